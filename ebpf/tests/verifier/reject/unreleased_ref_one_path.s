; error: unreleased reference
; at: 14
; map: ringbuf entries=4096
  r6 = *(u64 *)(r1 + 32)
  r1 = map_idx[0] ll
  r2 = 16
  r3 = 0
  call ringbuf_reserve
  if r0 == 0 goto out
  if r6 > 3 goto out2
  r1 = r0
  r2 = 0
  call ringbuf_submit
out:
  r0 = 0
  exit
out2:
  r0 = 0
  exit
