; error: R0 leaks a pointer: the program must return a scalar, found fp
; at: 1
  r0 = r10
  exit
