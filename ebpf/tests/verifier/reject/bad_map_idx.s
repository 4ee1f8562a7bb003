; error: map index 3 out of range (program has 1 maps)
; at: 0
; map: array key=4 value=8 entries=1
  r1 = map_idx[3] ll
  r0 = 0
  exit
