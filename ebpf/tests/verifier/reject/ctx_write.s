; error: cannot write into ctx
; at: 1
  r2 = 1
  *(u64 *)(r1 + 32) = r2
  r0 = 0
  exit
