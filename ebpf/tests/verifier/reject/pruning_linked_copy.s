; error: invalid read from stack off
; at: 14
; The fall-through path bounds r3 through its linked copy r6 (r3 = r6, then a check on
; r6) and is checkpointed at `j`. The taken path reaches `j` with an unbounded r3 that is
; not a copy of r6: it must not be pruned, although r3 and r6 have the same ranges.
  r6 = *(u64 *)(r1 + 32)
  r7 = *(u64 *)(r1 + 40)
  r8 = *(u64 *)(r1 + 48)
  r1 = 0
  *(u64 *)(r10 - 8) = r1
  *(u64 *)(r10 - 16) = r1
  if r8 > 5 goto a
  r3 = r6
  goto j
a:
  r3 = r7
j:
  if r6 > 8 goto out
  r2 = r10
  r2 += -16
  r2 += r3
  r0 = *(u8 *)(r2 + 0)
  exit
out:
  r0 = 0
  exit
