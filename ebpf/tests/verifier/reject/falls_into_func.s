; error: falls through into function at 3
; at: 2
  call f
  r0 = 0
  r0 += 1
f:
  r0 = 0
  exit
