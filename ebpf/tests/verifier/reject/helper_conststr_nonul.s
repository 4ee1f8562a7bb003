; error: not NUL-terminated
; at: 2
; map: rodata value=4 init="abcd"
  r1 = map_idx_value[0][0] ll
  call puts
  r0 = 0
  exit
