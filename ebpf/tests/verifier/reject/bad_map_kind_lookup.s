; error: map 'rb' of kind ringbuf is not allowed for map_lookup_elem
; at: 6
; map: ringbuf entries=4096 name=rb
  r1 = 0
  *(u32 *)(r10 - 4) = r1
  r1 = map_idx[0] ll
  r2 = r10
  r2 += -4
  call map_lookup_elem
  r0 = 0
  exit
