; error: cannot write into read-only map '.rodata'
; at: 6
; map: rodata value=16 init="abc\0"
  r1 = map_idx_value[0][8] ll
  r2 = r10
  r2 += -8
  r3 = r10
  r3 += -16
  call get_block_idx
  r0 = 0
  exit
