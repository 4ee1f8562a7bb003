; error: R1 type=fp, expected map pointer
; at: 4
  r1 = 0
  *(u32 *)(r10 - 4) = r1
  r1 = r10
  r2 = r10
  call map_lookup_elem
  r0 = 0
  exit
