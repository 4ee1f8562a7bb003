; map: rodata value=16 init="hello\0world!\0\0\0\0"
  r1 = map_idx_value[0][0] ll
  call puts
  r1 = map_idx_value[0][6] ll
  call puts
  r0 = 0
  exit
