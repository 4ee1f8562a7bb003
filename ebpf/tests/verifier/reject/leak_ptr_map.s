; error: R10 leaks a pointer: only scalars may be stored into map value
; at: 8
; map: array key=4 value=16 entries=4
  r1 = 0
  *(u32 *)(r10 - 4) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -4
  call map_lookup_elem
  if r0 == 0 goto out
  *(u64 *)(r0 + 0) = r10
out:
  r0 = 0
  exit
