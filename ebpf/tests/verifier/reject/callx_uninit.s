; error: R6 !read_ok
; at: 0
  callx r6
  r0 = 0
  exit
