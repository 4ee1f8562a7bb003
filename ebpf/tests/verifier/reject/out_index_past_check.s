; error: invalid access to output: off=0+[0,56] size=8, proven range=0
; at: 10
; out[k & 7] needs 64 proven bytes, only 32 were checked
  r2 = *(u64 *)(r1 + 24)
  r6 = *(u64 *)(r1 + 16)
  r3 = r6
  r3 += 32
  if r3 > r2 goto out
  r2 = *(u64 *)(r1 + 32)
  r2 &= 7
  r2 <<= 3
  r6 += r2
  r4 = 1
  *(u64 *)(r6 + 0) = r4
out:
  r0 = 0
  exit
