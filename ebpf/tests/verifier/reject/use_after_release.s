; error: use of released ringbuf memory
; at: 10
; map: ringbuf entries=4096
  r1 = map_idx[0] ll
  r2 = 16
  r3 = 0
  call ringbuf_reserve
  if r0 == 0 goto out
  r6 = r0
  r1 = r6
  r2 = 0
  call ringbuf_submit
  *(u64 *)(r6 + 0) = 1
out:
  r0 = 0
  exit
