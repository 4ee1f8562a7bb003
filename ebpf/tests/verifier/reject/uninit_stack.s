; error: invalid read from stack off -16+0 size 8 (uninitialized)
; at: 1
  *(u64 *)(r10 - 8) = r1
  r0 = *(u64 *)(r10 - 16)
  exit
