; error: map_idx_value needs an array map, found map 'h' of kind Hash
; at: 0
; map: hash key=8 value=8 entries=4 name=h
  r1 = map_idx_value[0][0] ll
  r0 = 0
  exit
