; error: is not allowed for ringbuf_reserve (expected a ringbuf map)
; at: 4
; map: array key=4 value=16 entries=1
  r1 = map_idx[0] ll
  r2 = 16
  r3 = 0
  call ringbuf_reserve
  r0 = 0
  exit
