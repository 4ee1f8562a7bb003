; error: invalid access to mem: off=16 size=1, mem size=16
; at: 6
; map: ringbuf entries=4096
  r1 = map_idx[0] ll
  r2 = 16
  r3 = 0
  call ringbuf_reserve
  if r0 == 0 goto out
  *(u8 *)(r0 + 16) = 1
  r1 = r0
  r2 = 0
  call ringbuf_submit
out:
  r0 = 0
  exit
