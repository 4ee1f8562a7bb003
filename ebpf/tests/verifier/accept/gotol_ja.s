
  r0 = 1
  gotol skip
  r0 = *(u64 *)(r0 + 0)
skip:
  goto +1
  r0 = 2
  exit
