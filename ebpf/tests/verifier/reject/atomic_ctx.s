; error: atomic operation on ctx prohibited
; at: 1
  r2 = 1
  lock *(u64 *)(r1 + 32) += r2
  r0 = 0
  exit
