; error: falls off the end of the program
; at: 1
  r0 = 0
  r0 += 1
