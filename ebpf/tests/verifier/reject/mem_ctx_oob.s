; error: invalid access to mem: off=60 size=8, mem size=64
; at: 0
; ctx: mem 64
  r0 = *(u64 *)(r1 + 60)
  exit
