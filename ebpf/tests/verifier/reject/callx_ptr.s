; error: R10 type=fp, expected a scalar helper id for callx
; at: 0
  callx r10
  r0 = 0
  exit
