; error: infinite loop detected
; at: 2
  r0 = 0
  r1 = *(u64 *)(r1 + 32)
l:
  if r1 > 7 goto l
  exit
