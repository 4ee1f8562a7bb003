; error: R1 pointer arithmetic with *= prohibited
; at: 0
  r1 *= 2
  r0 = 0
  exit
