; error: comparison of pointers to different regions prohibited (data vs fp)
; at: 1
  r2 = *(u64 *)(r1 + 0)
  if r2 > r10 goto +0
  r0 = 0
  exit
