; error: invalid write to stack off
; at: 3
; an unbounded variable offset on a stack pointer
  r6 = *(u64 *)(r1 + 32)
  r2 = r10
  r2 += r6
  *(u8 *)(r2 - 1) = 1
  r0 = 0
  exit
