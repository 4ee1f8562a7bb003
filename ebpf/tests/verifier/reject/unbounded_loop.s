; error: infinite loop detected
; max_insns: 5000
  r1 = *(u64 *)(r1 + 32)
l:
  r1 += 1
  if r1 != 0 goto l
  r0 = 0
  exit
