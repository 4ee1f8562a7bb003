; error: misaligned stack access off -12 size 8
; at: 1
; Linux rejects every stack access not aligned to its size
  r1 = 0
  *(u64 *)(r10 - 12) = r1
  r0 = 0
  exit
