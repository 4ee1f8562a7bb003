; error: jump out of range: target 7
; at: 1
  r0 = 0
  goto +5
  exit
