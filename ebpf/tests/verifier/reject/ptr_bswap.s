; error: byte swap prohibited
; at: 0
  r1 = be64 r1
  r0 = 0
  exit
