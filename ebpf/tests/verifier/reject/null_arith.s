; error: null-check it first
; at: 7
; map: array key=4 value=16 entries=4
  r1 = 0
  *(u32 *)(r10 - 4) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -4
  call map_lookup_elem
  r0 += 4
  exit
