; error: 32-bit or sign-extending move of a pointer
; at: 0
  w2 = w1
  r0 = 0
  exit
