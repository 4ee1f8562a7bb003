; error: R3 !read_ok
; at: 1
  r0 = 0
  r0 += r3
  exit
