; error: kfunc calls are not supported
; at: 0
  call kfunc[7]
  r0 = 0
  exit
