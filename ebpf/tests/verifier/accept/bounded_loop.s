; sum 0..99 with a counter loop
  r0 = 0
  r1 = 0
loop:
  r0 += r1
  r1 += 1
  if r1 < 100 goto loop
  exit
