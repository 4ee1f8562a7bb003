; error: div by zero: division by the immediate 0
; at: 1
; Linux rejects a constant divisor of 0 at load time (a register divisor may be 0)
  r0 = 7
  w0 s/= 0
  exit
