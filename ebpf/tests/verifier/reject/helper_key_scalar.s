; error: R2 type=scalar, expected pointer to map key
; at: 3
; map: array key=4 value=16 entries=4
  r1 = map_idx[0] ll
  r2 = 0
  call map_lookup_elem
  r0 = 0
  exit
