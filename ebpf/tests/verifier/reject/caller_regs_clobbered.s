; error: R1 !read_ok
; at: 2
  r1 = 1
  call ktime_get_ns
  r0 = r1
  exit
