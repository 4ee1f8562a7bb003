; error: pointer arithmetic with <<= prohibited
; at: 0
  r1 <<= 1
  r0 = 0
  exit
