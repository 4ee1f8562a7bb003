; error: proven range=0
; at: 5
  r2 = *(u64 *)(r1 + 0)
  r3 = *(u64 *)(r1 + 8)
  r4 = r2
  r4 += 4
  if r4 <= r3 goto out
  r0 = *(u32 *)(r2 + 0)
  exit
out:
  r0 = 0
  exit
