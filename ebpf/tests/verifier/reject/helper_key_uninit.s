; error: (uninitialized) for R2
; at: 4
; map: array key=4 value=16 entries=4
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -4
  call map_lookup_elem
  r0 = 0
  exit
