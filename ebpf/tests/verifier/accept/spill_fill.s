; spill a pointer and a bounded scalar, fill them back and use them
  *(u64 *)(r10 - 8) = r1
  r2 = *(u64 *)(r1 + 32)
  r2 &= 63
  *(u64 *)(r10 - 16) = r2
  r1 = 0
  r6 = *(u64 *)(r10 - 8)
  r0 = *(u64 *)(r6 + 40)
  r3 = *(u64 *)(r10 - 16)
  if r3 > 63 goto bad
  r0 += r3
  exit
bad:
  r0 = *(u64 *)(r0 + 0)
  exit
