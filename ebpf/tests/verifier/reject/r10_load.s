; error: frame pointer r10 is read-only
; at: 1
  *(u64 *)(r10 - 8) = r1
  r10 = *(u64 *)(r10 - 8)
  r0 = 0
  exit
