; error: variable offset on ctx pointer prohibited
; at: 2
  r2 = *(u64 *)(r1 + 32)
  r2 &= 8
  r1 += r2
  r0 = *(u64 *)(r1 + 32)
  exit
