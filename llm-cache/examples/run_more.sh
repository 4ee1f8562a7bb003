#!/usr/bin/env bash
# On the GPU machine: the offloaded-KV-cache run (offload_kv.py), the skewed MoE run with
# transformers' fused experts (offload_moe.py) and the same model with one module per
# expert, the experts alone offloaded (offload_moe.py --per-expert), each under
# `llm-cache observe`, then `simulate` and plots for each. The KV run names its blocks
# through the script's hook on the cache's offload (timed names).
# Needs scripts/gpu-carry's binaries. Usage: [RUNS="kv moe moe_experts"] run_more.sh OUTDIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../.." && pwd)"
out="$1"; mkdir -p "$out"; c="$root/target/gpu-carry"
[ -f "$c/DejaVuSans.ttf" ] && export BPFTIME_FONT="$c/DejaVuSans.ttf"
obs() { name=$1; shift; "$c/bpftime-super-llm-cache" observe --json -o "$out/$name.trace" --bpftime "$c/bpftime-super" \
	--trace-arg=--shim --trace-arg="$c/libbpftime_attach.so" "$@" > "$out/$name.txt" 2> "$out/$name.err"; echo "$name rc=$?"; }
runs=${RUNS:-kv moe moe_experts}
for n in $runs; do
	case $n in
	kv) obs kv --names "$out/kv_names.csv" -- python3 "$here/offload_kv.py" --names "$out/kv_names.csv" ;;
	moe) obs moe --names "$out/moe_names.csv" -- python3 "$here/offload_moe.py" "$out/moe_names.csv" ;;
	moe_experts) obs moe_experts --names "$out/moe_experts_names.csv" -- python3 "$here/offload_moe.py" --per-expert "$out/moe_experts_names.csv" ;;
	*) echo "unknown run $n"; exit 2 ;;
	esac
done
for n in $runs; do
	head -n 1 "$out/$n.txt"; tail -n 3 "$out/$n.err"
	"$c/bpftime-super-llm-cache" simulate "$out/$n.trace" --capacity 64MB,128MB,256MB,512MB,1GB --plot "$out/plots_$n" > "$out/simulate_$n.txt" 2>&1
	"$c/bpftime-super-llm-cache" simulate "$out/$n.trace" --recommend 256MB > "$out/recommend_$n.txt" 2>&1
	head -n 30 "$out/simulate_$n.txt"; head -n 12 "$out/recommend_$n.txt"
done
