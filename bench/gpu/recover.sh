#!/usr/bin/env bash
# Issue 18 row a on the CUDA backend: a service is killed with SIGKILL while clients
# submit, and restarted with --recover. Its program comes back at its version, its
# shared-memory map keeps its count, every job submitted ends once (completed, or
# SERVICE_RESTARTED (-10), or the client is told the service died), and a map placed in
# GPU memory comes back with its host mirror (what the last `map dump` read). Uses the
# binaries of scripts/gpu-carry.
#   bash bench/gpu/recover.sh OUT_DIR
set -uo pipefail
out=${1:?OUT_DIR}; mkdir -p "$out"
d=target/gpu-carry; B=$d/bpftime-super
name=bpft-recover-$$
log=$out/recover.log; : > "$log"
say() { echo "$*" | tee -a "$log"; }
serve() {
	"$B" run --persistent --backend cuda --name "$name" "$@" 2>>"$out/service.err" &
	spid=$!
	for _ in $(seq 200); do [ -S "/dev/shm/$name.sock" ] && "$B" status --name "$name" >/dev/null 2>&1 && break; sleep 0.05; done
}
python3 -c 'import struct,sys; sys.stdout.buffer.write(b"".join(struct.pack("<Q",i) for i in range(1000)))' > "$out/in.bin"
serve
"$B" load --name "$name" "$d/job_counter.bpf.o" --map-placement per_worker=device >>"$log" 2>&1
"$B" submit --name "$name" --prog job_counter --input "$out/in.bin" --record-size 8 --json > "$out/before.json"
"$B" map dump --name "$name" job_counter:counts --json > "$out/counts_before.json"
"$B" map dump --name "$name" job_counter:per_worker --json > "$out/per_worker_before.json"
# A long job running on the GPU when the service is killed: 2^27 records, each an LCG
# loop of 200,000-200,255 iterations that depends on the record's index (a loop of a
# constant trip count is folded away by ptxas). It must end SERVICE_RESTARTED.
python3 -c 'import sys; sys.stdout.buffer.write(bytes(1 << 27))' > "$out/spin_in.bin"
python3 -c 'import sys; sys.stdout.buffer.write(bytes.fromhex("7912200000000000" "bf23000000000000" "57030000ff000000" "07030000400d0300" "bf20000000000000" "270000006d4ec641" "0700000039300000" "07030000ffffffff" "5503fcff00000000" "9500000000000000"))' > "$out/spin.bin"
"$B" load --name "$name" "$out/spin.bin" --as spin >>"$log" 2>&1
"$B" submit --name "$name" --prog spin --input "$out/spin_in.bin" --record-size 1 --timeout 60 --json > "$out/long.json" 2>&1 &
long=$!
sleep 1
# Clients submitting while the service is killed.
subs=($long)
for i in 1 2 3 4 5 6 7 8; do
	"$B" submit --name "$name" --prog job_counter --input "$out/in.bin" --record-size 8 --timeout 30 --json > "$out/inflight_$i.json" 2>&1 &
	subs+=($!)
done
sleep 0.3
old=$spid; kill -9 "$spid"; wait "$spid" 2>/dev/null
say "killed service pid $old"
sleep 0.3
t0=$(date +%s.%N)
serve --recover
t1=$(date +%s.%N)
say "recovered service up in $(python3 -c "print(round(($t1-$t0)*1e3))") ms"
"$B" status --name "$name" --json > "$out/status_after.json"
wait "${subs[@]}"
"$B" submit --name "$name" --prog job_counter --input "$out/in.bin" --record-size 8 --json > "$out/after.json"
"$B" map dump --name "$name" job_counter:counts --json > "$out/counts_after.json"
"$B" map dump --name "$name" job_counter:per_worker --json > "$out/per_worker_after.json"
"$B" list --name "$name" --json > "$out/list_after.json"
"$B" stop --name "$name" >/dev/null 2>&1; wait "$spid"
python3 - "$out" <<'PY' | tee -a "$log"
import glob, json, sys
out = sys.argv[1]
def count(f):
    e = json.load(open(f))["entries"]
    return int.from_bytes(bytes.fromhex(e[0][1]), "little")
ok = restarted = died = 0
for f in sorted(glob.glob(out + "/inflight_*.json")):
    t = open(f).read()
    try:
        j = json.loads(t)
        ok += j["status"] == 0
        restarted += j["status"] == -10
    except ValueError:
        died += 1
before, after = count(out + "/counts_before.json"), count(out + "/counts_after.json")
st = json.load(open(out + "/status_after.json"))
rec = st.get("recovered") or {}
lo, hi = 1000 * (2 + ok), 1000 * (2 + ok + restarted + died)
print(f"in flight at the kill: {ok} completed, {restarted} ended SERVICE_RESTARTED, {died} told the service died")
print("long job:", open(out + "/long.json").read().strip()[:300])
print(f"recovered status says {rec.get('ended_jobs')} job(s) ended as restarted")
print(f"recovered: {rec}")
print(f"counts: {before} before the kill, {after} at the end (expected {lo}..{hi})")
good = before == 1000 and lo <= after <= hi and rec.get("programs") == 2 and rec.get("ended_jobs", 0) >= 1
print("PASS" if good else "FAIL")
PY
for f in "$out"/*.json; do case "$f" in *per_worker*) continue;; esac; echo "== $(basename "$f")"; cat "$f"; echo; done >> "$log"
cat "$log"
rm -f "$out/spin_in.bin" "$out/in.bin"
