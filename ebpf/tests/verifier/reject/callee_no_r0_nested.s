; error: R0 !read_ok (register read before it was written)
; at: 4
; r0 left unset by the innermost subprogram is unset for every caller up the chain
  call mid
  r0 = 0
  exit
mid:
  call leaf
  r0 += 1
  exit
leaf:
  exit
