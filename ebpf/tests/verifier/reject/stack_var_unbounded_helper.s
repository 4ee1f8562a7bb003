; error: invalid stack access off
; at: 7
  r6 = *(u64 *)(r1 + 32)
  r1 = r10
  r1 += r6
  r2 = r10
  r2 += -16
  r3 = r10
  r3 += -24
  call get_block_idx
  r0 = 0
  exit
