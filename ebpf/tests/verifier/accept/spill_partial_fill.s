; map: array key=4 value=16 entries=1
; a bounded scalar spilled as u64 and filled as u32 keeps its bounds
  r6 = *(u64 *)(r1 + 32)
  r6 &= 12
  *(u64 *)(r10 - 8) = r6
  r1 = 0
  *(u32 *)(r10 - 12) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -12
  call map_lookup_elem
  if r0 == 0 goto out
  r1 = *(u32 *)(r10 - 8)
  r0 += r1
  r0 = *(u32 *)(r0 + 0)
out:
  r0 = 0
  exit
