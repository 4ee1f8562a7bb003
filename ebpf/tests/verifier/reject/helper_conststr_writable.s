; error: found writable map '.data'
; at: 2
; map: data value=8 init="abc\0\0\0\0\0"
  r1 = map_idx_value[0][0] ll
  call puts
  r0 = 0
  exit
