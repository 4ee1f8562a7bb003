; error: invalid read from stack off -600 size 8
; at: 11
; r3 differs at the join only in value; it later becomes a stack offset, so precision
; tracking must mark it and keep the second path from being pruned.
  r6 = *(u64 *)(r1 + 32)
  r1 = 0
  *(u64 *)(r10 - 8) = r1
  r4 = 0
  if r6 > 5 goto a
  r3 = -8
  goto b
a:
  r3 = -600
b:
  r4 += 1
  r2 = r10
  r2 += r3
  r0 = *(u64 *)(r2 + 0)
  exit
