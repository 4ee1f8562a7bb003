; error: partial read of a spilled pointer
; at: 1
  *(u64 *)(r10 - 8) = r1
  r0 = *(u32 *)(r10 - 8)
  exit
