; error: (uninitialized)
; at: 7
; reading buf[idx & 15] needs all 16 bytes initialized; only 8 are
  r6 = *(u64 *)(r1 + 32)
  r1 = 0
  *(u64 *)(r10 - 8) = r1
  r6 &= 15
  r2 = r10
  r2 += -16
  r2 += r6
  r0 = *(u8 *)(r2 + 0)
  exit
