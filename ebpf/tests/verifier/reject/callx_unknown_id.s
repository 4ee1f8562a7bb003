; error: R6 callx of unknown helper 4: no helper has this id
; at: 1
  r6 = 4
  callx r6
  exit
