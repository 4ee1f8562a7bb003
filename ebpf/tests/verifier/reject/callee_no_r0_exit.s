; error: R0 !read_ok: the program exits without setting r0
; at: 1
; the main program returns the r0 of a subprogram that did not set it
  call f
  exit
f:
  r1 = 1
  exit
