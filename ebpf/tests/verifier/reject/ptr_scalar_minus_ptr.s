; error: subtracting a pointer
; at: 1
  r2 = 100
  r2 -= r10
  r0 = 0
  exit
