; error: (uninitialized) for R3
; at: 9
; map: array key=4 value=16 entries=4
  r1 = 0
  *(u64 *)(r10 - 8) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -8
  r3 = r10
  r3 += -24
  r4 = 0
  call map_update_elem
  r0 = 0
  exit
