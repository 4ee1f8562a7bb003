; error: misaligned stack access off -13 size 2
; at: 4
; the offset counts from the frame pointer, through the derived pointer too
  r1 = 0
  *(u64 *)(r10 - 16) = r1
  r2 = r10
  r2 += -16
  *(u16 *)(r2 + 3) = 1
  r0 = 0
  exit
