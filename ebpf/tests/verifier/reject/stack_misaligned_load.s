; error: misaligned stack access off -6 size 4
; at: 2
  r1 = 0
  *(u64 *)(r10 - 8) = r1
  r0 = *(u32 *)(r10 - 6)
  exit
