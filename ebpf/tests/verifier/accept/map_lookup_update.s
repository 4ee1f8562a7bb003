; map: array key=4 value=16 entries=4 name=counts
  r1 = 0
  *(u32 *)(r10 - 4) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -4
  call map_lookup_elem
  if r0 == 0 goto miss
  r1 = *(u64 *)(r0 + 8)
  r1 += 1
  *(u64 *)(r0 + 8) = r1
  r0 = 0
  exit
miss:
  r1 = 1
  *(u64 *)(r10 - 16) = r1
  *(u64 *)(r10 - 24) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -4
  r3 = r10
  r3 += -24
  r4 = 0
  call map_update_elem
  r0 = 0
  exit
