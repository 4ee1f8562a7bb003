; error: unknown helper 4
; at: 0
  call 4
  r0 = 0
  exit
