; error: pointer arithmetic with ^= prohibited
; at: 1
  r2 = 1
  r2 ^= r10
  r0 = 0
  exit
