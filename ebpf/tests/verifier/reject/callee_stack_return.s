; error: returning a pointer to the callee's stack prohibited
; at: 4
  call f
  r0 = 0
  exit
f:
  r0 = r10
  exit
