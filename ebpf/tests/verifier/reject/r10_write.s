; error: frame pointer r10 is read-only
; at: 0
  r10 = 0
  r0 = 0
  exit
