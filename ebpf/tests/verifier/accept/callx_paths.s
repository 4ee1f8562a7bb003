; callx whose id depends on the path: each path holds a known helper id (get_lane_id or
; get_sm_id), so each is checked as a call of that helper
  r6 = *(u64 *)(r1 + 32)
  r7 = 511
  if r6 & 1 goto call
  r7 = 509
call:
  callx r7
  r0 += 1
  exit
