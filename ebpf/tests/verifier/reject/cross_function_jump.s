; error: crosses into function
; at: 1
  call f
  goto +1
  exit
f:
  r0 = 0
  exit
