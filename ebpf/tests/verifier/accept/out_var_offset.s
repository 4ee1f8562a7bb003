; write output at a variable offset bounded by an AND mask
  r6 = *(u64 *)(r1 + 16)
  r7 = *(u64 *)(r1 + 24)
  r2 = *(u64 *)(r1 + 32)
  r2 &= 7
  r6 += r2
  r3 = r6
  r3 += 8
  if r3 > r7 goto done
  r4 = 0x55
  *(u64 *)(r6 + 0) = r4
  r5 = *(u8 *)(r6 + 7)
done:
  r0 = 0
  exit
