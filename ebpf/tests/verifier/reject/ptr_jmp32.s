; error: 32-bit comparison of a pointer prohibited
; at: 0
  if w1 == 0 goto +0
  r0 = 0
  exit
