; map: percpu key=4 value=32 entries=1
  r1 = 0
  *(u32 *)(r10 - 4) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -4
  call map_lookup_elem
  if r0 != 0 goto have
  exit
have:
  r1 = *(u64 *)(r0 + 24)
  r1 += 1
  *(u64 *)(r0 + 24) = r1
  r0 = 0
  exit
