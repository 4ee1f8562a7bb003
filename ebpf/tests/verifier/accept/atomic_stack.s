; atomics on initialized stack slots
  r1 = 5
  *(u64 *)(r10 - 8) = r1
  *(u32 *)(r10 - 12) = r1
  r2 = 1
  lock *(u64 *)(r10 - 8) += r2
  w3 = 2
  w3 = atomic_fetch_or((u32 *)(r10 - 12), w3)
  r0 = *(u64 *)(r10 - 8)
  r0 += r3
  exit
