; error: invalid ctx access: off=80 size=8
; at: 0
  r0 = *(u64 *)(r1 + 80)
  exit
