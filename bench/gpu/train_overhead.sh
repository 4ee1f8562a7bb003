#!/usr/bin/env bash
# Issue 13: a counting uprobe on every CUDA driver call of a PyTorch training-step loop,
# against the same loop without trace and under trace with no programs, RUNS rounds in a
# random order within each round, paired ratios per round. Uses scripts/gpu-carry (or
# CARRY=dir with bpftime-super, libbpftime_attach.so and uprobe_all_count.bpf.o). Every run
# is pinned to the same cores (PIN, default 2-5), so the three modes share one slice of the
# machine. The figure is the ratio of the runs' median step times, paired within a round,
# with a bootstrap 95% interval of its median over the rounds.
set -u
out=${OUT:?}; mkdir -p "$out"; d=${CARRY:-target/gpu-carry}
pin() { taskset -c "${PIN:-2-5}" "$@"; }
res=$out/train_overhead.jsonl; : > "$res"
plain() { p=$(pin python3 bench/gpu/train_step.py ${STEPS:-300} | tail -1); echo "{\"run\":$1,\"mode\":\"plain\",\"r\":$p}" >> "$res"; }
traced() {
	pin "$d/bpftime-super" trace --interval 0 --json --shim "$d/libbpftime_attach.so" "$d/uprobe_all_count.bpf.o" \
		-- python3 bench/gpu/train_step.py ${STEPS:-300} > "$out/traced_$1.out" 2> "$out/traced_$1.err"
	t=$(grep '"steps"' "$out/traced_$1.out" | tail -1)
	echo "{\"run\":$1,\"mode\":\"traced\",\"r\":$t}" >> "$res"
}
# The shim without programs: what trace costs before any probe runs.
shim() {
	pin "$d/bpftime-super" trace --interval 0 --json --shim "$d/libbpftime_attach.so" \
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
[ "${RUNS:-5}" -gt 0 ] && python3 - "$res" "$out/traced_${RUNS:-5}.out" <<'PY'
import json, random, statistics, sys
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
# The same on the runs' median step times (the loop's steady state, without the hiccups).
step = {}
for r in rows:
    if "step_median_s" in r["r"]:
        step.setdefault(r["run"], {})[r["mode"]] = r["r"]["step_median_s"]
st = sorted(v["traced"] / v["plain"] for v in step.values() if "traced" in v and "plain" in v)
ss = sorted(v["shim"] / v["plain"] for v in step.values() if "shim" in v and "plain" in v)
def ci(xs, n=10000):
    if not xs:
        return None
    rng = random.Random(1)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return [meds[int(0.025 * n)], meds[int(0.975 * n)]]
print(json.dumps({"runs": len(rows) // 3, "plain_median_s": p, "shim_only_median_s": sh, "traced_median_s": t, "ratio": t / p, "shim_ratio": sh / p,
                  "paired_traced_ratios": pt, "paired_shim_ratios": ps,
                  "paired_traced_median": statistics.median(pt) if pt else None,
                  "paired_shim_median": statistics.median(ps) if ps else None,
                  "paired_step_traced_ratios": st, "paired_step_shim_ratios": ss,
                  "step_traced_median": statistics.median(st) if st else None, "step_traced_ci95": ci(st),
                  "step_shim_median": statistics.median(ss) if ss else None, "step_shim_ci95": ci(ss),
                  "traced_ci95": ci(pt),
                  "probed_calls_last_run": calls, "calls_per_step": calls / (30 + rows[0]["r"]["steps"])}))
PY
# In one process: blocks with the counting probe running and paused (TOGGLE_PAIRS pairs of
# TOGGLE_STEPS steps; 0 pairs: skipped).
if [ "${TOGGLE_PAIRS:-0}" -gt 0 ]; then
	pin "$d/bpftime-super" trace --interval 0 --json --shim "$d/libbpftime_attach.so" "$d/uprobe_all_count.bpf.o" \
		-- python3 bench/gpu/train_step.py ${TOGGLE_STEPS:-200} "$TOGGLE_PAIRS" > "$out/toggle.out" 2> "$out/toggle.err"
	grep '"pairs"' "$out/toggle.out" | tail -1
fi
