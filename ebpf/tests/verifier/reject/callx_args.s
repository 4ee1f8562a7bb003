; error: R2 type=scalar, expected pointer to map key
; at: 4
; map: array key=4 value=8 entries=4
; the helper a callx names gets the argument checks of a static call
  r1 = map_idx[0] ll
  r2 = 0
  r6 = 1
  callx r6
  r0 = 0
  exit
