#!/usr/bin/env bash
# On the GPU machine: the observer's cost on the offloaded Llama's generation, in one
# process: `llm-cache observe -- offload_llama.py --toggle-pairs PAIRS --tokens TOKENS`
# alternates generations with the observer recording and paused (the shim's
# bpftime_host_probes_pause), REPS processes. $CARRY (default target/gpu-carry) holds
# bpftime-super-llm-cache, bpftime-super and libbpftime_attach.so.
# Usage: run_overhead.sh OUTDIR [REPS] [PAIRS] [TOKENS]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../.." && pwd)"
out="$1"; reps="${2:-2}"; pairs="${3:-12}"; tokens="${4:-4}"; mkdir -p "$out"
c="${CARRY:-$root/target/gpu-carry}"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch, transformers, accelerate; print("torch", torch.__version__, "transformers", transformers.__version__, "accelerate", accelerate.__version__)'; } > "$out/device.txt"
for i in $(seq "$reps"); do
	"$c/bpftime-super-llm-cache" observe --json -o "/tmp/overhead_$i.trace" --bpftime "$c/bpftime-super" \
		--trace-arg=--shim --trace-arg="$c/libbpftime_attach.so" \
		-- python3 "$here/offload_llama.py" "/tmp/overhead_names_$i.csv" --toggle-pairs "$pairs" --tokens "$tokens" \
		> "$out/overhead_$i.txt" 2> "$out/overhead_$i.err"
	echo "rep $i rc=$?"; grep toggle_pairs "$out/overhead_$i.txt" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
print("ratio recording/paused", round(d["ratio_median"], 4), "ci95", [round(x, 4) for x in d["ratio_ci95"]])'
done
