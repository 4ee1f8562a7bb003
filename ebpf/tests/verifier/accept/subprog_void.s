; a bpf-to-bpf call of a subprogram that returns without setting r0 (what clang emits for a
; `static void __noinline` function): as in Linux, only the main program's exit needs r0,
; and this caller never reads r0 between the call and its own write
  r1 = r10
  r1 += -8
  r2 = 7
  call store
  r1 = r10
  r1 += -8
  r2 = 5
  call store
  r0 = *(u64 *)(r10 - 8)
  exit
store:
  *(u64 *)(r1 + 0) = r2
  exit
