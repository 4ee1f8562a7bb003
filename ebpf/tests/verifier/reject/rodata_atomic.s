; error: cannot write into read-only map
; at: 3
; map: rodata value=8 init="abcdefg\0"
  r1 = map_idx_value[0][0] ll
  r2 = 1
  lock *(u64 *)(r1 + 0) += r2
  r0 = 0
  exit
