; `end < ptr` form, and range shared with a copy of the pointer
  r2 = *(u64 *)(r1 + 0)
  r3 = *(u64 *)(r1 + 8)
  r6 = r2
  r2 += 16
  if r3 < r2 goto out
  r0 = *(u64 *)(r6 + 8)
  exit
out:
  r0 = 0
  exit
