; error: pointer arithmetic on data_end prohibited
; at: 1
  r3 = *(u64 *)(r1 + 8)
  r3 += 1
  r0 = 0
  exit
