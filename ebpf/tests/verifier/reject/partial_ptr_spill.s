; error: partial or misaligned spill of a pointer
; at: 0
  *(u32 *)(r10 - 8) = r1
  r0 = 0
  exit
