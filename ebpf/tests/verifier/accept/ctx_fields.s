; scalar fields of the job ctx
  r0 = *(u64 *)(r1 + 32)
  r2 = *(u64 *)(r1 + 40)
  r3 = *(u64 *)(r1 + 48)
  r4 = *(u32 *)(r1 + 72)
  r5 = *(u8 *)(r1 + 79)
  r0 += r2
  r0 += r3
  r0 += r4
  r0 += r5
  exit
