; error: cannot write into read-only map '.rodata'
; at: 2
; map: rodata value=8 init="abcdefg\0"
  r1 = map_idx_value[0][0] ll
  *(u8 *)(r1 + 0) = 1
  r0 = 0
  exit
