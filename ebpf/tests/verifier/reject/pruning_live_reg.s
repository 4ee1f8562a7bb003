; error: invalid read from stack off -600 size 8: outside the 512-byte frame
; at: 9
; the fall-through path completes first and is checkpointed at `b`; the taken path must
; not be pruned against it because r3 is live there
  r6 = *(u64 *)(r1 + 32)
  r1 = 0
  *(u64 *)(r10 - 8) = r1
  r3 = -8
  if r6 > 5 goto a
  goto b
a:
  r3 = -600
b:
  r2 = r10
  r2 += r3
  r0 = *(u64 *)(r2 + 0)
  exit
