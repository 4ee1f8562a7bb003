; error: call stack too deep: 9 frames, max 8
; at: 14
  call f1
  exit
f1:
  call f2
  exit
f2:
  call f3
  exit
f3:
  call f4
  exit
f4:
  call f5
  exit
f5:
  call f6
  exit
f6:
  call f7
  exit
f7:
  call f8
  exit
f8:
  call f9
  exit
f9:
  r0 = 0
  exit
