; error: R2 size is unbounded
; at: 10
  r6 = *(u64 *)(r1 + 32)
  r1 = 0
  *(u64 *)(r10 - 8) = r1
  r1 = r10
  r1 += -8
  r2 = r6
  r2 |= 1
  r3 = 0
  r4 = 0
  r5 = 0
  call trace_printk
  r0 = 0
  exit
