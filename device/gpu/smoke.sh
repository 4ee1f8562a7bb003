#!/bin/bash
# End-to-end check of the CUDA backend on a GPU machine, through the CLI only:
# start `run --persistent --backend cuda`, load an example, submit jobs of 4 and 100,000
# records, compare the outputs with the CPU's, replace the program, read `status`.
# BIN: the bpftime-super binary (built on the development machine). Logs go to $OUT.
set -u -o pipefail
BIN=${BIN:-target/release/bpftime-super}
OUT=${OUT:-/tmp/bpftime-smoke}
mkdir -p "$OUT"
name="bpftime-smoke-$$"
fail=0
check() { if eval "$1"; then echo "ok: $2"; else echo "FAIL: $2"; fail=1; fi; }
RUST_LOG=${RUST_LOG:-info} "$BIN" run --persistent --backend cuda --name "$name" --arena-mib 256 \
  --device-arena-mib 64 ${EXTRA:-} >"$OUT/service.log" 2>&1 &
svc=$!
for _ in $(seq 600); do [ -S "/dev/shm/$name.sock" ] && break; kill -0 $svc 2>/dev/null || break; sleep 0.05; done
if ! [ -S "/dev/shm/$name.sock" ]; then echo "FAIL: service did not start"; cat "$OUT/service.log"; exit 1; fi
head -c 2000 "$OUT/service.log"
"$BIN" load --name "$name" examples/vec_add.bpf.o
printf '\x01\0\0\0\x02\0\0\0\x03\0\0\0\x04\0\0\0\x05\0\0\0\x06\0\0\0\x07\0\0\0\x08\0\0\0' >"$OUT/pairs.bin"
timeout 20 "$BIN" submit --name "$name" --prog vec_add --input "$OUT/pairs.bin" --record-size 8 \
  --out "$OUT/sums.bin" --out-record-size 4 --results --json >"$OUT/submit4.json"
cat "$OUT/submit4.json"; echo
check '[ "$(od -An -tu4 "$OUT/sums.bin" | xargs)" = "3 7 11 15" ]' "4-record job on the GPU"
python3 -c "
import struct,random
random.seed(7)
open('$OUT/big.bin','wb').write(b''.join(struct.pack('<II',random.randrange(1<<31),random.randrange(1<<31)) for _ in range(100000)))"
timeout 30 "$BIN" submit --name "$name" --prog vec_add --input "$OUT/big.bin" --record-size 8 \
  --out "$OUT/big_out.bin" --out-record-size 4 --json >"$OUT/submit_big.json"
cat "$OUT/submit_big.json"; echo
python3 -c "
import struct
d=open('$OUT/big.bin','rb').read(); o=open('$OUT/big_out.bin','rb').read()
ok=all(struct.unpack_from('<I',o,4*i)[0]==(sum(struct.unpack_from('<II',d,8*i))&0xffffffff) for i in range(100000))
print('big job outputs', 'match' if ok else 'DIFFER'); exit(0 if ok else 1)" && echo "ok: 100k-record job" || { echo "FAIL: 100k-record job"; fail=1; }
# `records` (a per-thread array) lives in GPU memory by default: map dump reads it from the
# GPU, and the per-thread counts add up to the records run so far (4 + 100,000).
"$BIN" map dump --name "$name" records --json >"$OUT/dump1.json"
python3 -c "
import json,struct
d=json.load(open('$OUT/dump1.json')); v=bytes.fromhex(d['entries'][0][1])
total=sum(struct.unpack_from('<Q',v,8*i)[0] for i in range(len(v)//8))
print('per-thread record counts add up to', total); exit(0 if total==100004 else 1)" && echo "ok: device map dump" || { echo "FAIL: device map dump"; fail=1; }
# map update writes thread 0's value in GPU memory; the next dump shows it.
"$BIN" map update --name "$name" records 00000000 2a00000000000000
"$BIN" map dump --name "$name" records --json >"$OUT/dump2.json"
check 'python3 -c "import json; v=json.load(open(\"$OUT/dump2.json\"))[\"entries\"][0][1]; exit(0 if v.startswith(\"2a00000000000000\") else 1)"' "device map update"
grep -q '"placement": "device"' <("$BIN" list --name "$name" --json) && echo "ok: list shows the placement" || { echo "FAIL: list shows the placement"; fail=1; }
sleep 0.5
"$BIN" status --name "$name" --json >"$OUT/status1.json"; cat "$OUT/status1.json"; echo
check 'grep -q "\"tier\": \"native\"" "$OUT/status1.json"' "program moved to the native tier"
"$BIN" replace --name "$name" vec_add examples/vec_add.bpf.o
timeout 20 "$BIN" submit --name "$name" --prog vec_add --input "$OUT/pairs.bin" --record-size 8 \
  --out "$OUT/sums2.bin" --out-record-size 4 --json >"$OUT/submit_r.json"; cat "$OUT/submit_r.json"; echo
check '[ "$(od -An -tu4 "$OUT/sums2.bin" | xargs)" = "3 7 11 15" ]' "job after replace"
"$BIN" map dump --name "$name" records | head -5
"$BIN" stop --name "$name"
wait $svc
echo "service exit: $?"
tail -30 "$OUT/service.log"
exit $fail
