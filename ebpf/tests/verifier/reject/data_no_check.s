; error: invalid access to input data: off=0 size=4, proven range=0
; at: 1
  r2 = *(u64 *)(r1 + 0)
  r0 = *(u32 *)(r2 + 0)
  exit
