; error: not supported
; at: 0
  r1 = map_value[3][0] ll
  r0 = 0
  exit
