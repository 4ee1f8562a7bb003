; clang's pattern: check out + 32 <= out_end once, then index out[k & 3]
  r2 = *(u64 *)(r1 + 24)
  r6 = *(u64 *)(r1 + 16)
  r3 = r6
  r3 += 32
  if r3 > r2 goto out
  r2 = *(u64 *)(r1 + 32)
  r2 &= 3
  r2 <<= 3
  r6 += r2
  r4 = 1
  *(u64 *)(r6 + 0) = r4
out:
  r0 = 0
  exit
