; error: R0 invalid memory access: type=scalar
; at: 9
; map: array key=4 value=16 entries=4
  r1 = 0
  *(u32 *)(r10 - 4) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -4
  call map_lookup_elem
  r6 = r0
  if r6 != 0 goto ok
  r0 = *(u64 *)(r0 + 0)
ok:
  r0 = 0
  exit
