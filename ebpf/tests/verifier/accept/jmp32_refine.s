; map: array key=4 value=64 entries=1
; a 32-bit compare bounds a value that is known to fit in 32 bits
  r6 = *(u32 *)(r1 + 32)
  r1 = 0
  *(u32 *)(r10 - 4) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -4
  call map_lookup_elem
  if r0 == 0 goto out
  if w6 > 56 goto out
  r0 += r6
  r1 = *(u64 *)(r0 + 0)
out:
  r0 = 0
  exit
