; error: outside the 512-byte frame
; at: 1
  r1 = 0
  *(u64 *)(r10 - 520) = r1
  r0 = 0
  exit
