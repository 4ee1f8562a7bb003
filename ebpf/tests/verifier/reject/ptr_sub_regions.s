; error: subtraction of pointers to different regions
; at: 1
  r2 = r10
  r2 -= r1
  r0 = 0
  exit
