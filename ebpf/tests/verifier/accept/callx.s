; callx (RFC 9669's "callx" group, BPF_JMP | BPF_CALL | BPF_X): the helper id is the value of
; the register in dst; a known constant there is checked and called like `call` of that id
; map: array key=4 value=8 entries=4
  r6 = 511
  callx r6
  r7 = r0
  r7 &= 0xffff
  r1 = 0
  *(u32 *)(r10 - 4) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -4
  r3 = 1
  callx r3
  if r0 == 0 goto out
  r1 = *(u64 *)(r0 + 0)
  r7 += r1
  *(u64 *)(r0 + 0) = r7
out:
  r0 = r7
  exit
