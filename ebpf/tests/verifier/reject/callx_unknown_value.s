; error: R6 callx needs a known constant helper id
; at: 1
  r6 = *(u64 *)(r1 + 32)
  callx r6
  exit
