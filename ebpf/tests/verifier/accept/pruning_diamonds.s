; many independent diamonds: pruning keeps this linear
  r6 = *(u64 *)(r1 + 32)
  r0 = 0
  if r6 & 1 goto a1
  r0 += 1
a1:
  if r6 & 2 goto a2
  r0 += 1
a2:
  if r6 & 4 goto a3
  r0 += 1
a3:
  if r6 & 8 goto a4
  r0 += 1
a4:
  if r6 & 16 goto a5
  r0 += 1
a5:
  r0 &= 7
  exit
