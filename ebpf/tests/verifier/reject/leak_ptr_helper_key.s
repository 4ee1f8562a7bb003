; error: contains a spilled pointer
; at: 5
; map: hash key=8 value=8 entries=4
  *(u64 *)(r10 - 8) = r10
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -8
  call map_lookup_elem
  r0 = 0
  exit
