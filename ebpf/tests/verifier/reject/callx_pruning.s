; error: R1 type=scalar, expected map pointer (argument 1 of map_lookup_elem)
; at: 6
; the two paths reach `callx r7` with different helper ids: the second must not be pruned
; as covered by the first (the id is precise), or its map_lookup_elem would go unchecked
  r6 = *(u64 *)(r1 + 32)
  r7 = 7
  if r6 > 5 goto b
  goto join
b:
  r7 = 1
join:
  r1 = 0
  callx r7
  r0 = 0
  exit
