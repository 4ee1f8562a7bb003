; a format string built on the stack
  r1 = 0x0a6425
  *(u64 *)(r10 - 8) = r1
  r1 = r10
  r1 += -8
  r2 = 4
  r3 = 42
  r4 = 0
  r5 = 0
  call trace_printk
  r0 = 0
  exit
