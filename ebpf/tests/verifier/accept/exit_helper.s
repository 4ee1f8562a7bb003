; bpf_exit (507) ends the program like exit
  r2 = *(u64 *)(r1 + 32)
  if r2 == 0 goto stop
  r0 = 1
  exit
stop:
  call exit
