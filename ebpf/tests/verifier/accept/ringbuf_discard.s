; map: ringbuf entries=4096 name=rb
  r6 = r1
  r1 = map_idx[0] ll
  r2 = 8
  r3 = 0
  call ringbuf_reserve
  if r0 != 0 goto have
  r0 = 1
  exit
have:
  r7 = r0
  r2 = *(u64 *)(r6 + 32)
  *(u64 *)(r7 + 0) = r2
  if r2 > 10 goto drop
  r1 = r7
  r2 = 0
  call ringbuf_submit
  r0 = 0
  exit
drop:
  r1 = r7
  r2 = 0
  call ringbuf_discard
  r0 = 0
  exit
