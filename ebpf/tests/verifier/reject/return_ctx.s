; error: found ctx
; at: 1
  r0 = r1
  exit
