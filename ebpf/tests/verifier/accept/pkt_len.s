; data_end - data is a scalar; the range comes from the check
  r2 = *(u64 *)(r1 + 0)
  r3 = *(u64 *)(r1 + 8)
  r4 = r3
  r4 -= r2
  r5 = r2
  r5 += 2
  if r5 > r3 goto out
  r0 = *(u16 *)(r2 + 0)
  r0 += r4
  exit
out:
  r0 = 0
  exit
