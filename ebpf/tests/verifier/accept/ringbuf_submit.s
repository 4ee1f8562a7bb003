; map: ringbuf entries=4096 name=rb
  r1 = map_idx[0] ll
  r2 = 16
  r3 = 0
  call ringbuf_reserve
  if r0 == 0 goto out
  r1 = 42
  *(u64 *)(r0 + 0) = r1
  *(u64 *)(r0 + 8) = r1
  r1 = r0
  r2 = 0
  call ringbuf_submit
out:
  r0 = 0
  exit
