; error: must be read with 8-byte loads
; at: 0
  r0 = *(u32 *)(r1 + 0)
  exit
