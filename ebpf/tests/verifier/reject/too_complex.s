; error: program too complex: processed 201 instructions (limit 200)
; max_insns: 200
  r1 = 0
l:
  r1 += 1
  if r1 < 1000 goto l
  r0 = 0
  exit
