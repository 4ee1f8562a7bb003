; error: R1 type=scalar, expected pointer to 8 writable bytes
; at: 5
  r1 = 0
  r2 = r10
  r2 += -8
  r3 = r10
  r3 += -16
  call get_block_idx
  r0 = 0
  exit
