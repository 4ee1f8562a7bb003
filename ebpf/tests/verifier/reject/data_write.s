; error: input data is read-only
; at: 5
  r2 = *(u64 *)(r1 + 0)
  r3 = *(u64 *)(r1 + 8)
  r4 = r2
  r4 += 8
  if r4 > r3 goto out
  *(u8 *)(r2 + 0) = 1
out:
  r0 = 0
  exit
