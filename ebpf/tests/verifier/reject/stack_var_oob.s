; error: invalid write to stack off -16+[0,31] size 1: outside the 512-byte frame
; at: 8
  r6 = *(u64 *)(r1 + 32)
  r1 = 0
  *(u64 *)(r10 - 16) = r1
  *(u64 *)(r10 - 8) = r1
  r6 &= 31
  r2 = r10
  r2 += -16
  r2 += r6
  *(u8 *)(r2 + 0) = 1
  r0 = 0
  exit
