; error: R0 !read_ok (register read before it was written)
; at: 1
; a subprogram may return without setting r0, but then r0 is unreadable in the caller
  call f
  r1 = r0
  r0 = 0
  exit
f:
  exit
