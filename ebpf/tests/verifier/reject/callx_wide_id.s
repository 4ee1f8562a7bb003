; error: R6 callx of unknown helper 4294967303
; at: 2
; the whole 64-bit register is the id: 0x1_0000_0007 is not helper 7
  r6 = 0x100000007 ll
  callx r6
  exit
