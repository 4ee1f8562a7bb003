; error: invalid access to input data: off=1+[0,7] size=2, proven range=0
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
  r0 = *(u16 *)(r2 + 1)
out:
  r0 = 0
  exit
