; bpf-to-bpf call that writes through a pointer to the caller's stack
  r1 = 0
  *(u64 *)(r10 - 8) = r1
  *(u64 *)(r10 - 16) = r1
  r1 = r10
  r1 += -16
  call fill
  r0 = *(u64 *)(r10 - 16)
  r1 = *(u64 *)(r10 - 8)
  r0 += r1
  exit
fill:
  r2 = 7
  *(u64 *)(r10 - 8) = r2
  r3 = *(u64 *)(r10 - 8)
  *(u64 *)(r1 + 0) = r3
  r0 = 0
  exit
