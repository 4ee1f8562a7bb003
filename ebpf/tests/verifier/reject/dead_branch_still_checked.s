; error: R5 !read_ok
; at: 3
  r1 = *(u64 *)(r1 + 32)
  r1 &= 3
  if r1 > 2 goto +2
  r0 = r5
  exit
  r0 = 0
  exit
