; max_insns: 3000
; 20 diamonds leave different values in dead registers: liveness lets pruning
; merge them (without it the last 7 choices stay distinct: 128x the work)
  r0 = 0
  r7 = *(u64 *)(r1 + 32)
  if r7 > 0 goto a0
  r2 = 0
  goto b0
a0:
  r2 = 100
b0:
  r0 += 1
  r7 = *(u64 *)(r1 + 40)
  if r7 > 1 goto a1
  r3 = 1
  goto b1
a1:
  r3 = 101
b1:
  r0 += 1
  r7 = *(u64 *)(r1 + 48)
  if r7 > 2 goto a2
  r4 = 2
  goto b2
a2:
  r4 = 102
b2:
  r0 += 1
  r7 = *(u64 *)(r1 + 56)
  if r7 > 3 goto a3
  r5 = 3
  goto b3
a3:
  r5 = 103
b3:
  r0 += 1
  r7 = *(u64 *)(r1 + 64)
  if r7 > 4 goto a4
  r6 = 4
  goto b4
a4:
  r6 = 104
b4:
  r0 += 1
  r7 = *(u64 *)(r1 + 72)
  if r7 > 5 goto a5
  r8 = 5
  goto b5
a5:
  r8 = 105
b5:
  r0 += 1
  r7 = *(u64 *)(r1 + 32)
  if r7 > 6 goto a6
  r9 = 6
  goto b6
a6:
  r9 = 106
b6:
  r0 += 1
  r7 = *(u64 *)(r1 + 40)
  if r7 > 7 goto a7
  r2 = 7
  goto b7
a7:
  r2 = 107
b7:
  r0 += 1
  r7 = *(u64 *)(r1 + 48)
  if r7 > 8 goto a8
  r3 = 8
  goto b8
a8:
  r3 = 108
b8:
  r0 += 1
  r7 = *(u64 *)(r1 + 56)
  if r7 > 9 goto a9
  r4 = 9
  goto b9
a9:
  r4 = 109
b9:
  r0 += 1
  r7 = *(u64 *)(r1 + 64)
  if r7 > 10 goto a10
  r5 = 10
  goto b10
a10:
  r5 = 110
b10:
  r0 += 1
  r7 = *(u64 *)(r1 + 72)
  if r7 > 11 goto a11
  r6 = 11
  goto b11
a11:
  r6 = 111
b11:
  r0 += 1
  r7 = *(u64 *)(r1 + 32)
  if r7 > 12 goto a12
  r8 = 12
  goto b12
a12:
  r8 = 112
b12:
  r0 += 1
  r7 = *(u64 *)(r1 + 40)
  if r7 > 13 goto a13
  r9 = 13
  goto b13
a13:
  r9 = 113
b13:
  r0 += 1
  r7 = *(u64 *)(r1 + 48)
  if r7 > 14 goto a14
  r2 = 14
  goto b14
a14:
  r2 = 114
b14:
  r0 += 1
  r7 = *(u64 *)(r1 + 56)
  if r7 > 15 goto a15
  r3 = 15
  goto b15
a15:
  r3 = 115
b15:
  r0 += 1
  r7 = *(u64 *)(r1 + 64)
  if r7 > 16 goto a16
  r4 = 16
  goto b16
a16:
  r4 = 116
b16:
  r0 += 1
  r7 = *(u64 *)(r1 + 72)
  if r7 > 17 goto a17
  r5 = 17
  goto b17
a17:
  r5 = 117
b17:
  r0 += 1
  r7 = *(u64 *)(r1 + 32)
  if r7 > 18 goto a18
  r6 = 18
  goto b18
a18:
  r6 = 118
b18:
  r0 += 1
  r7 = *(u64 *)(r1 + 40)
  if r7 > 19 goto a19
  r8 = 19
  goto b19
a19:
  r8 = 119
b19:
  r0 += 1
  exit
