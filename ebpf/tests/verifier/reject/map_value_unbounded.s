; error: unbounded memory access
; at: 10
; map: array key=4 value=16 entries=4
  r6 = *(u64 *)(r1 + 32)
  r1 = 0
  *(u32 *)(r10 - 4) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -4
  call map_lookup_elem
  if r0 == 0 goto out
  r0 += r6
  r0 = *(u8 *)(r0 + 0)
out:
  r0 = 0
  exit
