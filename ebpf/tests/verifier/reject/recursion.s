; error: recursive call to function at 2 prohibited
; at: 2
  call f
  exit
f:
  call f
  exit
