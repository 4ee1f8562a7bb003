; error: R2 expected a known constant size > 0
; at: 5
; map: ringbuf entries=4096
  r2 = *(u64 *)(r1 + 32)
  r2 &= 15
  r1 = map_idx[0] ll
  r3 = 0
  call ringbuf_reserve
  r0 = 0
  exit
