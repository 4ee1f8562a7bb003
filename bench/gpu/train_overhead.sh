#!/usr/bin/env bash
# Issue 13: a counting uprobe on every CUDA driver call of a PyTorch training-step loop,
# against the same loop without trace and under trace with no programs, RUNS rounds in a
# random order within each round, paired ratios per round. Uses scripts/gpu-carry.
set -u
out=${OUT:?}; mkdir -p "$out"; d=target/gpu-carry
res=$out/train_overhead.jsonl; : > "$res"
plain() { p=$(python3 bench/gpu/train_step.py ${STEPS:-300} | tail -1); echo "{\"run\":$1,\"mode\":\"plain\",\"r\":$p}" >> "$res"; }
traced() {
	"$d/bpftime-super" trace --interval 0 --json --shim "$d/libbpftime_attach.so" "$d/uprobe_all_count.bpf.o" \
		-- python3 bench/gpu/train_step.py ${STEPS:-300} > "$out/traced_$1.out" 2> "$out/traced_$1.err"
	t=$(grep '"steps"' "$out/traced_$1.out" | tail -1)
	echo "{\"run\":$1,\"mode\":\"traced\",\"r\":$t}" >> "$res"
}
# The shim without programs: what trace costs before any probe runs.
shim() {
	"$d/bpftime-super" trace --interval 0 --json --shim "$d/libbpftime_attach.so" \
		-- python3 bench/gpu/train_step.py ${STEPS:-300} > "$out/shim_$1.out" 2> "$out/shim_$1.err"
	t=$(grep '"steps"' "$out/shim_$1.out" | tail -1)
	echo "{\"run\":$1,\"mode\":\"shim\",\"r\":$t}" >> "$res"
}
# Each round runs the three in a random order (ORDER=fixed: plain, traced, shim), so that a
# drift of the machine over a round does not favour one of them.
for i in $(seq ${RUNS:-5}); do
	modes="plain traced shim"
	[ "${ORDER:-random}" = random ] && modes=$(printf '%s\n' $modes | shuf | tr '\n' ' ')
	for m in $modes; do $m "$i"; done
done
cat "$res"
python3 - "$res" "$out/traced_${RUNS:-5}.out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda m: statistics.median(r["r"]["seconds"] for r in rows if r["mode"] == m)
p, t = med("plain"), med("traced")
sh = med("shim") if any(r["mode"] == "shim" for r in rows) else float("nan")
calls = 0
for l in open(sys.argv[2]):
    try:
        v = json.loads(l)
    except ValueError:
        continue
    if v.get("event") == "map" and v.get("final") and v["map"].endswith(":calls"):
        calls = sum(e["value"][0] for e in v["printed"])
# Paired: each round's traced (and shim) time over the same round's plain time.
by = {}
for r in rows:
    by.setdefault(r["run"], {})[r["mode"]] = r["r"]["seconds"]
pt = sorted(v["traced"] / v["plain"] for v in by.values() if "traced" in v and "plain" in v)
ps = sorted(v["shim"] / v["plain"] for v in by.values() if "shim" in v and "plain" in v)
print(json.dumps({"runs": len(rows) // 3, "plain_median_s": p, "shim_only_median_s": sh, "traced_median_s": t, "ratio": t / p, "shim_ratio": sh / p,
                  "paired_traced_ratios": pt, "paired_shim_ratios": ps,
                  "paired_traced_median": statistics.median(pt) if pt else None,
                  "paired_shim_median": statistics.median(ps) if ps else None,
                  "probed_calls_last_run": calls, "calls_per_step": calls / (30 + rows[0]["r"]["steps"])}))
PY
