; error: pointer arithmetic with 32-bit += prohibited
; at: 1
  r2 = r10
  w2 += 1
  r0 = 0
  exit
