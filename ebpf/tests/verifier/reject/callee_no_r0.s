; error: function at 3 returns without setting r0
; at: 3
  call f
  r0 = 0
  exit
f:
  exit
