; error: map_ptr cannot be dereferenced
; at: 2
; map: hash key=8 value=8 entries=4
  r1 = map_idx[0] ll
  r0 = *(u64 *)(r1 + 0)
  exit
