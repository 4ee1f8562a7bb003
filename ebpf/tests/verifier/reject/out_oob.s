; error: invalid access to output: off=8 size=1, proven range=8
; at: 5
  r2 = *(u64 *)(r1 + 16)
  r3 = *(u64 *)(r1 + 24)
  r4 = r2
  r4 += 8
  if r4 > r3 goto out
  *(u8 *)(r2 + 8) = 1
out:
  r0 = 0
  exit
