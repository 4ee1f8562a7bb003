#!/bin/bash
# GPU differential test of the JIT: generate, run on the GPU, compare with the interpreter.
#
# Run from the repository root (or a copy of its layout) on the GPU machine:
#   SEED=1 COUNT=10000 bench/gpu/jit_diff.sh
# Needs: target/release/gpu_diff (cargo build --release -p bench --bin gpu_diff, built on the
# development machine) and target/bpf-objs/*.bpf.o (the tests/programs C files built with
# clang -O2 -g -target bpf; the GPU machine has no clang). Writes to $OUT (default
# /tmp/jit-gpu-out): jit_gpu_diff_summary.json, device.txt, diff.log.
set -u -o pipefail
SEED=${SEED:-1}
COUNT=${COUNT:-10000}
GPU_DIFF=${GPU_DIFF:-target/release/gpu_diff}
OBJS=${OBJS:-target/bpf-objs}
JOBS=${JOBS:-16}
OUT=${OUT:-/tmp/jit-gpu-out}
W=${WORK:-/tmp/jit-gpu-diff}
mkdir -p "$OUT" "$W"
rm -rf "$W/cases"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  nvcc --version | grep -i release
  date -u +%Y-%m-%dT%H:%M:%SZ
} > "$OUT/device.txt"
cat "$OUT/device.txt"
nvcc -O2 -arch=sm_90 -o "$W/run_cases" bench/gpu/run_cases.cu -lcuda || exit 1
mkdir -p "$W/cases"
t0=$(date +%s.%N)
# The runner maps the region the maps live in and publishes its address; everything runs
# in that one process (the address is only valid there).
"$W/run_cases" serve "$W/cases" > "$W/runner.log" 2>&1 &
RUNNER=$!
for _ in $(seq 600); do [ -s "$W/cases/base.txt" ] && break; sleep 0.1; done
GPU_DIFF_BASE=$(cat "$W/cases/base.txt") || { cat "$W/runner.log"; exit 1; }
export GPU_DIFF_BASE
echo "map base: $GPU_DIFF_BASE"
"$GPU_DIFF" gen "$SEED" "$COUNT" "$W/cases" "$OBJS" || { kill "$RUNNER"; exit 1; }
t1=$(date +%s.%N)
# PTX -> cubin with ptxas on all cores (the driver would compile each module serially).
ls "$W"/cases/chunk_*.ptx | xargs -P "$JOBS" -I{} env PTXAS_FLAGS="${PTXAS_FLAGS:-}" sh -c 'ptxas ${PTXAS_FLAGS:-} -arch=sm_90 -o "${1%.ptx}.cubin" "$1" || echo "ptxas failed: $1"' _ {}
ls "$W"/cases/chunk_*.run | sed 's/\.run$//' > "$W/cases/chunks.txt"
touch "$W/cases/ready"
t2=$(date +%s.%N)
wait "$RUNNER"
echo "runner exit: $?"
grep -v "^$" "$W/runner.log" | tail -5
t3=$(date +%s.%N)
"$GPU_DIFF" check "$W/cases"
rc=$?
t4=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v e="$t4" 'BEGIN { printf "times: gen %.1f s, ptxas %.1f s, gpu %.1f s, check %.1f s\n", b - a, c - b, d - c, e - d }'
cp "$W/cases/summary.json" "$OUT/jit_gpu_diff_summary.json"
cp "$W/runner.log" "$OUT/runner.log"
exit $rc
