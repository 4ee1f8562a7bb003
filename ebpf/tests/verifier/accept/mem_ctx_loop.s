; ctx: mem 32
; zero the block one byte at a time
  r3 = 0
loop:
  r4 = r1
  r4 += r3
  *(u8 *)(r4 + 0) = 0
  r3 += 1
  if r3 < 32 goto loop
  r0 = 0
  exit
