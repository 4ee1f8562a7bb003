; ctx: mem 64
; r1 points to 64 bytes, r2 holds 64
  if r2 < 16 goto out
  r3 = *(u64 *)(r1 + 0)
  r3 += 1
  *(u64 *)(r1 + 56) = r3
  *(u8 *)(r1 + 63) = 1
out:
  r0 = 0
  exit
