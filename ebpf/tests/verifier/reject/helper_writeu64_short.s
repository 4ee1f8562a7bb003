; error: invalid stack access off -4 size 8
; at: 6
  r1 = r10
  r1 += -4
  r2 = r10
  r2 += -16
  r3 = r10
  r3 += -24
  call get_thread_idx
  r0 = 0
  exit
