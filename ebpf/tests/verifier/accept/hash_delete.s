; map: hash key=8 value=8 entries=64 name=h
  r1 = *(u64 *)(r1 + 32)
  *(u64 *)(r10 - 8) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -8
  call map_delete_elem
  r0 = 0
  exit
