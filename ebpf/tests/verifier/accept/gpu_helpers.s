; GPU helpers with u64 out-parameters on the stack
  r1 = r10
  r1 += -8
  r2 = r10
  r2 += -16
  r3 = r10
  r3 += -24
  call get_block_idx
  r1 = r10
  r1 += -32
  r2 = r10
  r2 += -40
  r3 = r10
  r3 += -48
  call get_thread_idx
  r0 = *(u64 *)(r10 - 8)
  r1 = *(u64 *)(r10 - 32)
  r0 += r1
  call membar
  call get_lane_id
  r6 = r0
  call get_sm_id
  r0 += r6
  exit
