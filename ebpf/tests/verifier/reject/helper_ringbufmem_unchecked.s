; error: null-check the ringbuf_reserve result first
; at: 7
; map: ringbuf entries=4096
  r1 = map_idx[0] ll
  r2 = 16
  r3 = 0
  call ringbuf_reserve
  r1 = r0
  r2 = 0
  call ringbuf_submit
  r0 = 0
  exit
