#!/bin/bash
# JIT benchmarks on the GPU: eBPF→PTX compile time, PTX→cubin through the driver, and
# JIT-compiled eBPF against hand-written CUDA over 100M records (bench/gpu/jit_vs_cuda.cu).
#
# Run from the repository root (or a copy of its layout) on the GPU machine:
#   bench/gpu/run.sh
# Needs target/release/gpu_diff (built on the development machine). Writes to $OUT:
# jit_gpu_bench_raw.json (driver side), jit_gpu_compile.json (compile time), sass.tar.gz.
set -u -o pipefail
GPU_DIFF=${GPU_DIFF:-target/release/gpu_diff}
OUT=${OUT:-/tmp/jit-gpu-out}
W=${WORK:-/tmp/jit-gpu-bench}
mkdir -p "$OUT" "$W/sass"
nvcc -O2 -arch=sm_90 -o "$W/jit_vs_cuda" bench/gpu/jit_vs_cuda.cu -lcuda || exit 1
rm -rf "$W/b"; mkdir -p "$W/b"
# jit_vs_cuda reserves the maps' address range and publishes it; gpu_diff bakes it into the
# PTX. No driver JIT cache: every cuModuleLoadData / cuLink* really compiles.
CUDA_CACHE_DISABLE=1 "$W/jit_vs_cuda" "$W/b" > "$OUT/jit_gpu_bench_raw.json" 2> "$W/jvc.err" &
JVC=$!
for _ in $(seq 600); do [ -s "$W/b/base.txt" ] && break; sleep 0.1; done
GPU_DIFF_BASE=$(cat "$W/b/base.txt") || { cat "$W/jvc.err"; exit 1; }
export GPU_DIFF_BASE
echo "map base: $GPU_DIFF_BASE"
"$GPU_DIFF" bench "$W/b" || { kill $JVC; exit 1; }
cp "$W/b/compile.json" "$OUT/jit_gpu_compile.json"
touch "$W/b/ready"
wait $JVC
rc=$?
cat "$OUT/jit_gpu_bench_raw.json" "$W/jvc.err"
for p in vecadd filter hist hashcount; do
  ptxas -O3 -arch=sm_90 -o "$W/$p.cubin" "$W/b/$p.ptx" && cuobjdump -sass "$W/$p.cubin" > "$W/sass/$p.jit.sass"
  ptxas -O3 -arch=sm_90 -v -o /dev/null "$W/b/$p.ptx" 2> "$W/sass/$p.ptxas-v.txt"
done
cuobjdump -sass "$W/jit_vs_cuda" > "$W/sass/cuda.sass"
cp "$W"/b/*.ptx "$W/sass/"
tar czf "$OUT/sass.tar.gz" -C "$W" sass
exit $rc
