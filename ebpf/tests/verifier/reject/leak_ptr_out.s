; error: leaks a pointer: only scalars may be stored into output
; at: 5
  r2 = *(u64 *)(r1 + 16)
  r3 = *(u64 *)(r1 + 24)
  r4 = r2
  r4 += 8
  if r4 > r3 goto out
  *(u64 *)(r2 + 0) = r1
out:
  r0 = 0
  exit
