; map: ringbuf entries=4096 name=events
  r2 = 99
  *(u64 *)(r10 - 8) = r2
  *(u64 *)(r10 - 16) = r2
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -16
  r3 = 16
  r4 = 0
  call ringbuf_output
  r0 = 0
  exit
