; byte-order ops on scalars
  r0 = *(u64 *)(r1 + 32)
  r0 = be16 r0
  r2 = 0x1234
  r2 = le32 r2
  r2 = bswap64 r2
  r0 += r2
  exit
