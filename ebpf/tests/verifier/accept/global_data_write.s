; map: data value=16 init="\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"
  r1 = map_idx_value[0][8] ll
  r2 = 1
  *(u64 *)(r1 + 0) = r2
  lock *(u64 *)(r1 + 0) += r2
  r0 = *(u32 *)(r1 - 8)
  exit
