; error: jump out of range: target -1
; at: 0
  goto -2
  exit
