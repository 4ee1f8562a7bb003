; error: R2 invalid memory access: type=scalar, expected a pointer
; at: 1
  r2 = 5
  r0 = *(u64 *)(r2 + 0)
  exit
