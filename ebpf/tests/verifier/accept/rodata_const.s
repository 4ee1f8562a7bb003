; map: rodata value=8 init="\0\0\0\0\0\0\0\0"
; map: array key=4 value=16 entries=1
; .rodata is constant: loads from it give known values
  r1 = 0
  *(u32 *)(r10 - 4) = r1
  r1 = map_idx[1] ll
  r2 = r10
  r2 += -4
  call map_lookup_elem
  if r0 == 0 goto out
  r1 = map_idx_value[0][0] ll
  r2 = *(u32 *)(r1 + 4)
  r0 += r2
  r3 = *(u64 *)(r0 + 8)
out:
  r0 = 0
  exit
