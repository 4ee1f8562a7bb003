; error: must be passed unmodified
; at: 9
; map: ringbuf entries=4096
  r1 = map_idx[0] ll
  r2 = 16
  r3 = 0
  call ringbuf_reserve
  if r0 == 0 goto out
  r1 = r0
  r1 += 8
  r2 = 0
  call ringbuf_submit
out:
  r0 = 0
  exit
