; error: R0 !read_ok
; at: 1
  call membar
  exit
