; error: pointer to the callee's stack into the caller's stack
; at: 6
  r1 = r10
  r1 += -8
  call f
  r0 = 0
  exit
f:
  r2 = r10
  *(u64 *)(r1 + 0) = r2
  r0 = 0
  exit
