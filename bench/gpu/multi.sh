#!/bin/bash
# The persistent service on several GPUs (bench/src/bin/gpu_multi.rs), on a machine with
# two or more (the device tool's nvidia-h200-x2 or nvidia-h100-x2).
#
#   BIN=dir-with-bpftime-super-gpu_multi-job_counter.bpf.o-thread_count.bpf.o bench/gpu/multi.sh [ITERS]
#
# ITERS: LCG steps per record of the compute-bound job mix (default 20000). Writes
# $OUT/gpu_multi.{json,md}; exits 1 when a check failed, 2 with fewer than two GPUs.
set -u -o pipefail
BIN=${BIN:-target/release}
OUT=${OUT:-/tmp/gpu_multi}
mkdir -p "$OUT"
export BPFTIME_SUPER_BIN="$BIN/bpftime-super"
[ -f "$BIN/job_counter.bpf.o" ] && export BPFTIME_JOB_COUNTER="$BIN/job_counter.bpf.o"
[ -f "$BIN/thread_count.bpf.o" ] && export BPFTIME_THREAD_COUNT="$BIN/thread_count.bpf.o"
[ -n "${1:-}" ] && export BPFTIME_MULTI_ITERS="$1"
export BPFTIME_COMMIT=${BPFTIME_COMMIT:-$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm --format=csv,noheader
OUT="$OUT" "$BIN/gpu_multi" > "$OUT/gpu_multi.stdout" 2> "$OUT/gpu_multi.stderr"
rc=$?
cat "$OUT/gpu_multi.md" 2>/dev/null || tail -40 "$OUT/gpu_multi.stderr"
exit $rc
