#!/usr/bin/env bash
# CUDA backend: programs' array maps, in shared memory and in GPU memory, hold what the GPU
# wrote, as `map dump` reads it. job_counter counts records with an atomic add (2 jobs of
# 1,000 records: 2,000); counter adds 1 to counts[index % 16] for 16 records (each 1).
# Prints PASS or FAIL per check. Uses the binaries of scripts/gpu-carry.
set -u
d=target/gpu-carry; B=$d/bpftime-super; n=bpft-shm-$$; out=${1:-/tmp}
"$B" run --persistent --backend cuda --name $n 2>"$out/shm_svc.err" & sp=$!
for _ in $(seq 200); do "$B" status --name $n >/dev/null 2>&1 && break; sleep 0.05; done
python3 -c 'import struct,sys; sys.stdout.buffer.write(b"".join(struct.pack("<Q",i) for i in range(1000)))' > /tmp/in.bin
python3 -c 'import struct,sys; sys.stdout.buffer.write(b"".join(struct.pack("<Q",i) for i in range(16)))' > /tmp/in16.bin
"$B" load --name $n $d/job_counter.bpf.o --as jc >/dev/null
"$B" load --name $n $d/job_counter.bpf.o --as jcdev --map-placement counts=device >/dev/null
"$B" load --name $n $d/counter.bpf.o --as cnt >/dev/null
check() { if [ "$2" = "$3" ]; then echo "PASS $1: $2"; else echo "FAIL $1: got $2, expected $3"; fi; }
val() { "$B" map dump --name $n "$1" --json | python3 -c 'import json,sys; print(" ".join(str(int.from_bytes(bytes.fromhex(v),"little")) for k,v in json.load(sys.stdin)["entries"]))'; }
for p in jc jcdev; do
	for _ in 1 2; do "$B" submit --name $n --prog $p --input /tmp/in.bin --record-size 8 >/dev/null; done
	check "$p:counts" "$(val $p:counts)" 2000
done
"$B" submit --name $n --prog cnt --input /tmp/in16.bin --record-size 8 >/dev/null
check "cnt:counts" "$(val cnt:counts)" "$(python3 -c 'print(" ".join(["1"]*16))')"
"$B" stop --name $n >/dev/null; wait $sp
