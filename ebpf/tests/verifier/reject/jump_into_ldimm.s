; error: jump into the middle of ld_imm64 at 2
; at: 1
  r0 = 0
  goto +1
  r1 = 0x100000000 ll
  exit
