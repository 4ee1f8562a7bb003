; error: outside the 512-byte frame
; at: 0
  *(u64 *)(r10 + 0) = 1
  r0 = 0
  exit
