; error: falls off the end of the program
; at: 1
  r0 = 0
  if r0 == 0 goto -2
