; error: combined stack size of calls func@0(304) -> func@4(304) is 608 bytes, exceeds 512
; at: 2
  r1 = 0
  *(u64 *)(r10 - 304) = r1
  call f
  exit
f:
  r1 = 0
  *(u64 *)(r10 - 304) = r1
  r0 = 0
  exit
