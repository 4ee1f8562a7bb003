; a stack array indexed by a masked value: buf[idx & 15] = 1, then hashed via trace_printk
  r6 = *(u64 *)(r1 + 32)
  r1 = 0
  *(u64 *)(r10 - 16) = r1
  *(u64 *)(r10 - 8) = r1
  r6 &= 15
  r2 = r10
  r2 += -16
  r2 += r6
  *(u8 *)(r2 + 0) = 1
  r0 = *(u8 *)(r2 + 0)
  r1 = r10
  r1 += -16
  r1 += r6
  r2 = 1
  r3 = 0
  r4 = 0
  r5 = 0
  call trace_printk
  r0 = 0
  exit
