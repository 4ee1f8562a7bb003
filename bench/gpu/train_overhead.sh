#!/usr/bin/env bash
# Issue 13: a counting uprobe on every CUDA driver call of a PyTorch training-step loop,
# against the same loop without trace, alternating, 5 times each. Uses scripts/gpu-carry.
set -u
out=${OUT:?}; mkdir -p "$out"; d=target/gpu-carry
res=$out/train_overhead.jsonl; : > "$res"
for i in $(seq ${RUNS:-5}); do
	p=$(python3 bench/gpu/train_step.py ${STEPS:-300} | tail -1)
	echo "{\"run\":$i,\"mode\":\"plain\",\"r\":$p}" >> "$res"
	"$d/bpftime-super" trace --interval 0 --json --shim "$d/libbpftime_attach.so" "$d/uprobe_all_count.bpf.o" \
		-- python3 bench/gpu/train_step.py ${STEPS:-300} > "$out/traced_$i.out" 2> "$out/traced_$i.err"
	t=$(grep '"steps"' "$out/traced_$i.out" | tail -1)
	echo "{\"run\":$i,\"mode\":\"traced\",\"r\":$t}" >> "$res"
	# The shim without programs: what trace costs before any probe runs.
	"$d/bpftime-super" trace --interval 0 --json --shim "$d/libbpftime_attach.so" \
		-- python3 bench/gpu/train_step.py ${STEPS:-300} > "$out/shim_$i.out" 2> "$out/shim_$i.err"
	t=$(grep '"steps"' "$out/shim_$i.out" | tail -1)
	echo "{\"run\":$i,\"mode\":\"shim\",\"r\":$t}" >> "$res"
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
print(json.dumps({"runs": len(rows) // 3, "plain_median_s": p, "shim_only_median_s": sh, "traced_median_s": t, "ratio": t / p, "shim_ratio": sh / p,
                  "probed_calls_last_run": calls, "calls_per_step": calls / (30 + rows[0]["r"]["steps"])}))
PY
