; error: R0 !read_ok: the program exits without setting r0
; at: 0
  exit
