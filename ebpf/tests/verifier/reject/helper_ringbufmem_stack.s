; error: R1 type=fp, expected ringbuf memory
; at: 4
  r1 = r10
  r1 += -8
  r2 = 0
  r0 = 0
  call ringbuf_submit
  r0 = 0
  exit
