; stack accesses of every size at offsets aligned to their size, a variable index in steps
; of the access size among them
  r6 = *(u64 *)(r1 + 32)
  r1 = 0
  *(u64 *)(r10 - 16) = r1
  *(u64 *)(r10 - 8) = r1
  *(u32 *)(r10 - 12) = 3
  *(u16 *)(r10 - 6) = 2
  *(u8 *)(r10 - 3) = 1
  r0 = *(u8 *)(r10 - 3)
  r1 = *(u16 *)(r10 - 6)
  r0 += r1
  r1 = *(u32 *)(r10 - 12)
  r0 += r1
  r6 &= 3
  r6 <<= 2
  r2 = r10
  r2 += -16
  r2 += r6
  r1 = *(u32 *)(r2 + 0)
  r0 += r1
  exit
