; XDP-style bounds check on the input, then reads
  r2 = *(u64 *)(r1 + 0)
  r3 = *(u64 *)(r1 + 8)
  r4 = r2
  r4 += 8
  if r4 > r3 goto bad
  r0 = *(u32 *)(r2 + 4)
  r5 = *(u64 *)(r2 + 0)
  r0 += r5
  exit
bad:
  r0 = 0
  exit
