#!/usr/bin/env bash
# On the GPU machine: the offloaded Llama (examples/offload_llama.py) plain and under
# `llm-cache observe`, alternating, then the simulator on the observed trace.
# Needs scripts/gpu-carry's binaries. Usage: run_device.sh OUTDIR [REPS]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../.." && pwd)"
out="$1"; reps="${2:-2}"; mkdir -p "$out"
c="$root/target/gpu-carry"
[ -f "$c/DejaVuSans.ttf" ] && export BPFTIME_FONT="$c/DejaVuSans.ttf"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch, transformers, accelerate; print("torch", torch.__version__, "transformers", transformers.__version__, "accelerate", accelerate.__version__)'; } > "$out/device.txt"
for i in $(seq "$reps"); do
	python3 "$here/offload_llama.py" "$out/names_plain.csv" > "$out/plain_$i.txt" 2> "$out/plain_$i.err"
	"$c/bpftime-super-llm-cache" observe --json --names "$out/names.csv" -o "$out/llama.trace" \
		--api-log "$out/llama.apilog" --bpftime "$c/bpftime-super" --trace-arg=--shim --trace-arg="$c/libbpftime_attach.so" \
		-- python3 "$here/offload_llama.py" "$out/names.csv" > "$out/observed_$i.txt" 2> "$out/observed_$i.err"
	echo "rep $i: rc=$?"; tail -n 3 "$out/plain_$i.txt" "$out/observed_$i.txt"
done
"$c/bpftime-super-llm-cache" simulate "$out/llama.trace" --capacity 256MB,512MB,1GB,1536MB,2GB --plot "$out/plots" > "$out/simulate.txt" 2>&1
"$c/bpftime-super-llm-cache" simulate "$out/llama.trace" --capacity 256MB,512MB,1GB,1536MB,2GB --json > "$out/simulate.json" 2>&1
"$c/bpftime-super-llm-cache" simulate "$out/llama.trace" --recommend 512MB > "$out/recommend.txt" 2>&1
cat "$out/simulate.txt"; head -20 "$out/recommend.txt"
