; error: invalid read from stack off
; at: 3
  r6 = *(u64 *)(r1 + 32)
  r2 = r10
  r2 -= r6
  r0 = *(u8 *)(r2 + 0)
  exit
