; division and modulo by zero are defined (0 and dst), not errors
  r0 = *(u64 *)(r1 + 32)
  r1 = 0
  r0 /= r1
  r2 = 7
  r2 %= r1
  w2 /= 0
  r0 += r2
  exit
