#!/usr/bin/env bash
# On the GPU machine: hot attach on running programs. `tick` (a launch every 10 ms for 12 s,
# static cudart) runs under `trace --name` with kernel_count; launchlate is loaded at 3 s and
# unloaded at 7 s. The same with tick built with a `__device__` counter (its module must not
# be moved: a warning, and the count still right). Needs target/gpu-carry (scripts/gpu-carry
# plus launchlate.bpf.o). Writes OUT/hot_*.{out,err,log} and OUT/hot_summary.json.
#   bash attach/tests/gpu/hot.sh OUT
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../../.." && pwd)"
out="$1"; mkdir -p "$out"
carry="$root/target/gpu-carry"; B="$carry/bpftime-super"; SHIM="$carry/libbpftime_attach.so"
apps=/tmp/bpftime-apps; mkdir -p "$apps"; cd "$root/attach/tests/apps"
G="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
nvcc -O2 $G -o "$apps/tick" tick.cu 2>&1 | grep -v warning
nvcc -O2 $G -DDEVICE_VAR -o "$apps/tick_var" tick.cu 2>&1 | grep -v warning
for app in tick tick_var; do
	name="hot-$app-$$"
	"$B" trace --shim "$SHIM" --interval 0 --json --name "$name" "$carry/kernel_count.bpf.o" -- "$apps/$app" 12 10 \
		> "$out/hot_$app.out" 2> "$out/hot_$app.err" &
	tp=$!
	sleep 3
	t0=$(date +%s.%N)
	"$B" load --name "$name" --json "$carry/launchlate.bpf.o" > "$out/hot_${app}_load.log" 2>&1; echo "load rc=$? at $t0" >> "$out/hot_${app}_load.log"
	sleep 4
	t1=$(date +%s.%N)
	"$B" unload --name "$name" launchlate > "$out/hot_${app}_unload.log" 2>&1; echo "unload rc=$? at $t1" >> "$out/hot_${app}_unload.log"
	wait $tp; echo "trace rc=$?" >> "$out/hot_$app.err"
done
python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]; res = {}
for app in ["tick", "tick_var"]:
    lines = [json.loads(l) for l in open(os.path.join(out, f"hot_{app}.out")) if l.startswith("{")]
    final = lambda m: sum(e["value"][0] for ev in lines if ev.get("event") == "map" and ev.get("final") and ev["map"].endswith(":" + m) for e in ev["printed"])
    appline = next((l for l in open(os.path.join(out, f"hot_{app}.out")) if l.startswith("tick ")), "")
    want = int(appline.split("launches=")[1].split()[0]) if "launches=" in appline else None
    err = open(os.path.join(out, f"hot_{app}.err")).read()
    r = dict(app=appline.strip(), launches=want, kernel_count=final("kernel_count:launches") if False else None,
             counted=final("launches"), late_launches=None, early=final("early"), untimed=final("untimed"),
             hot_events=[e for e in lines if e.get("event") == "hot"], warnings=[e["what"] for e in lines if e.get("event") == "warning"],
             load=open(os.path.join(out, f"hot_{app}_load.log")).read()[-300:], unload=open(os.path.join(out, f"hot_{app}_unload.log")).read()[-200:])
    per_map = {}
    for ev in lines:
        if ev.get("event") == "map" and ev.get("final"):
            per_map[ev["map"]] = [(e["key"], e["value"][0]) for e in ev["printed"]]
    r["maps"] = per_map
    res[app] = r
    print(json.dumps({app: r})[:2500])
json.dump(res, open(os.path.join(out, "hot_summary.json"), "w"), indent=1)
PY
