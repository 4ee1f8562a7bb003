; error: misaligned stack access off -16+[0,7] size 4
; at: 8
; a variable offset must keep the alignment too: idx & 7 may be odd
  r6 = *(u64 *)(r1 + 32)
  r1 = 0
  *(u64 *)(r10 - 16) = r1
  *(u64 *)(r10 - 8) = r1
  r6 &= 7
  r2 = r10
  r2 += -16
  r2 += r6
  r0 = *(u32 *)(r2 + 0)
  exit
