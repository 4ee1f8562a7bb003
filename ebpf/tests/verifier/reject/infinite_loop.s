; error: infinite loop detected
; at: 1
  r0 = 0
l:
  goto l
  exit
