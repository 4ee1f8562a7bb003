; error: invalid stack access off -8 size 9
; at: 11
  r6 = *(u64 *)(r1 + 32)
  r1 = 0
  *(u64 *)(r10 - 8) = r1
  r1 = r10
  r1 += -8
  r2 = r6
  r2 &= 7
  r2 += 2
  r3 = 0
  r4 = 0
  r5 = 0
  call trace_printk
  r0 = 0
  exit
