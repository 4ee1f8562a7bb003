; scan input bytes until a zero, at most 64
  r2 = *(u64 *)(r1 + 0)
  r3 = *(u64 *)(r1 + 8)
  r0 = 0
loop:
  r4 = r2
  r4 += 1
  if r4 > r3 goto done
  r5 = *(u8 *)(r2 + 0)
  if r5 == 0 goto done
  r2 = r4
  r0 += 1
  if r0 < 64 goto loop
done:
  exit
