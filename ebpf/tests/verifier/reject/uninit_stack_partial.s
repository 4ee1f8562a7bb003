; error: (uninitialized)
; at: 2
  r1 = 0
  *(u32 *)(r10 - 8) = r1
  r0 = *(u64 *)(r10 - 8)
  exit
