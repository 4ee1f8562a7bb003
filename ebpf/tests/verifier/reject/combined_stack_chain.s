; error: combined stack size of calls func@0(200) -> func@6(200) -> func@10(200) is 600 bytes, exceeds 512
; at: 8
; three frames of 200 bytes each: every frame fits, the chain does not
  r1 = 0
  *(u64 *)(r10 - 200) = r1
  call f
  call f
  r0 = 0
  exit
f:
  r1 = 0
  *(u64 *)(r10 - 200) = r1
  call g
  exit
g:
  r1 = 0
  *(u64 *)(r10 - 200) = r1
  r0 = 0
  exit
