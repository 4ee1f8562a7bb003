#!/bin/bash
# The CUDA backend's rows a–h (bench/src/bin/gpu_service.rs) on the GPU machine.
#
#   BIN=dir-with-bpftime-super-and-gpu_service bench/gpu/service.sh [ROWS] [PRELUDE]
#
# ROWS: e.g. "a,b" (default: all rows). PRELUDE: C text put before the persistent runtime
# (BPFTIME_CUDA_PRELUDE), to compare a variant in the same session. Writes
# $OUT/gpu_service.{json,md}; exits 1 when a correctness check failed.
set -u -o pipefail
BIN=${BIN:-target/release}
OUT=${OUT:-/tmp/gpu_service}
mkdir -p "$OUT"
export BPFTIME_SUPER_BIN="$BIN/bpftime-super"
[ -n "${1:-}" ] && export BPFTIME_BENCH_ROWS="$1"
[ -n "${2:-}" ] && export BPFTIME_CUDA_PRELUDE="$2"
export BPFTIME_COMMIT=${BPFTIME_COMMIT:-$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
OUT="$OUT" "$BIN/gpu_service" > "$OUT/gpu_service.stdout" 2> "$OUT/gpu_service.stderr"
rc=$?
cat "$OUT/gpu_service.md" 2>/dev/null || tail -30 "$OUT/gpu_service.stderr"
exit $rc
