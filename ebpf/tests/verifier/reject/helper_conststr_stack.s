; error: expected pointer to a constant string in read-only global data
; at: 4
  r1 = 0
  *(u64 *)(r10 - 8) = r1
  r1 = r10
  r1 += -8
  call puts
  r0 = 0
  exit
