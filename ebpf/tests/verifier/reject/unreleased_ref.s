; error: unreleased reference
; at: 7
; map: ringbuf entries=4096
  r1 = map_idx[0] ll
  r2 = 16
  r3 = 0
  call ringbuf_reserve
  if r0 == 0 goto out
  r0 = 0
  exit
out:
  r0 = 0
  exit
