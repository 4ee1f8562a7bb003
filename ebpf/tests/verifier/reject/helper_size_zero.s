; error: R2 size may be zero
; at: 8
  r1 = 0
  *(u64 *)(r10 - 8) = r1
  r1 = r10
  r1 += -8
  r2 = 0
  r3 = 0
  r4 = 0
  r5 = 0
  call trace_printk
  r0 = 0
  exit
