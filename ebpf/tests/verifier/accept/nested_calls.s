; main -> a -> b, each with its own stack
  r1 = 3
  *(u64 *)(r10 - 8) = r1
  r1 = r10
  r1 += -8
  call a
  exit
a:
  r2 = *(u64 *)(r1 + 0)
  *(u64 *)(r10 - 16) = r2
  r1 = r10
  r1 += -16
  r6 = 10
  call b
  r0 += r6
  exit
b:
  r0 = *(u64 *)(r1 + 0)
  r0 += 1
  exit
