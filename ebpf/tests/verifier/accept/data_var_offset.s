; read input at a variable offset: data + (idx & 15), checked against data_end
  r2 = *(u64 *)(r1 + 0)
  r3 = *(u64 *)(r1 + 8)
  r4 = *(u64 *)(r1 + 40)
  r4 &= 15
  r2 += r4
  r5 = r2
  r5 += 4
  if r3 < r5 goto done
  r0 = *(u32 *)(r2 + 0)
  exit
done:
  r0 = 0
  exit
