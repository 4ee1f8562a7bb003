; map: array key=4 value=16 entries=1
  r1 = 0
  *(u32 *)(r10 - 4) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -4
  call map_lookup_elem
  if r0 == 0 goto out
  r6 = r0
  r0 = r6
  r1 = 1
  lock *(u64 *)(r0 + 0) += r1
  r2 = 3
  r2 = atomic_fetch_add((u64 *)(r0 + 8), r2)
  w3 = 5
  lock *(u32 *)(r0 + 12) |= w3
  r4 = r2
  r0 = 0
  r0 = cmpxchg_64(r6 + 8, r0, r4)
out:
  r0 = 0
  exit
