; division and modulo by a register holding zero are defined (0 and dst), not errors; only
; an immediate 0 divisor is rejected (reject/*_imm_zero.s)
  r0 = *(u64 *)(r1 + 32)
  r1 = 0
  r0 /= r1
  r2 = 7
  r2 %= r1
  w3 = 0
  w2 /= w3
  w4 = 9
  w4 s%= w3
  r0 += r2
  r0 += r4
  exit
