; error: (uninitialized)
; at: 1
  r2 = 1
  lock *(u64 *)(r10 - 8) += r2
  r0 = 0
  exit
