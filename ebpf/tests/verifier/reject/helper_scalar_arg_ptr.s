; error: R4 type=fp, expected scalar
; at: 8
; map: ringbuf entries=4096
  r2 = 0
  *(u64 *)(r10 - 8) = r2
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -8
  r3 = 8
  r4 = r10
  call ringbuf_output
  r0 = 0
  exit
