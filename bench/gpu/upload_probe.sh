#!/bin/bash
# Runs upload_probe.cu (what a generation swap's code upload costs; row f of gpu_service) on
# the GPU machine: cubins of 1, 64 and 512 noinline functions. Output in $OUT.
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/upload_probe}
W=$(mktemp -d)
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
cd "$W"
# The spin kernel is the probe's own; compile it into a cubin of its own.
sed -n '/^struct Ctl/,/^};/p;/^extern "C" __global__ void spin/,/^}/p;/^extern "C" __global__ void mark/,/^}/p' "$here/upload_probe.cu" > spin.cu
nvcc -cubin -arch=sm_90 spin.cu -o spin.cubin || exit 1
for n in 1 64 512; do
  {
    echo '__device__ unsigned long long sink;'
    for i in $(seq 1 $n); do
      echo "__noinline__ __device__ unsigned long long f$i(unsigned long long x) { return x * ${i}ull + (x >> 3) ^ $((i * 7))ull; }"
    done
    echo 'extern "C" __global__ void gen() { unsigned long long x = threadIdx.x;'
    for i in $(seq 1 $n); do echo "  x = f$i(x);"; done
    echo '  if (x == 42) sink = x; }'
  } > gen_$n.cu
  nvcc -cubin -arch=sm_90 gen_$n.cu -o gen_$n.cubin || exit 1
done
nvcc -O2 -std=c++17 -arch=sm_90 "$here/upload_probe.cu" -o upload_probe -lcuda || exit 1
ls -l *.cubin | tee "$OUT/cubins.txt"
timeout 120 ./upload_probe gen_1.cubin gen_64.cubin gen_512.cubin 2>&1 | tee "$OUT/upload_probe.log"
