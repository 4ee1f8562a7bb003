; error: proven range=0
; at: 9
  r2 = *(u64 *)(r1 + 0)
  r3 = *(u64 *)(r1 + 8)
  r4 = r2
  r4 += 8
  if r4 > r3 goto out
  r5 = *(u64 *)(r1 + 32)
  r5 &= 7
  r2 += r5
  r0 = 0
  r0 = *(u8 *)(r2 + 0)
out:
  r0 = 0
  exit
