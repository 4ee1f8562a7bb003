; error: pointer arithmetic with neg prohibited
; at: 0
  r1 = -r1
  r0 = 0
  exit
