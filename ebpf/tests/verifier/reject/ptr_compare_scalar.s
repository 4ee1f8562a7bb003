; error: pointer comparison prohibited: ctx compared with a scalar
; at: 0
  if r1 > 5 goto +0
  r0 = 0
  exit
