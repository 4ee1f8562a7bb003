#!/usr/bin/env bash
# Run 36b of bench/results/cxl_gpu.md: the fixed-latency path of run 36 (one timer read
# before the spin, the latency read before the arrival) against run 35's build, alternating,
# on one machine: target/s36/bins.tar.xz (run 35) and bins2.tar.xz (run 36). Prints R lines.
set -u
mkdir -p t && tar -xJf target/s36/bins.tar.xz && mv target/gpu-carry target/a35 && tar -xJf target/s36/bins2.tar.xz
export PATH=$PATH:/usr/local/cuda/bin
nvcc -O3 -gencode arch=compute_90,code=[sm_90,compute_90] -o /tmp/chase cxl-sim/examples/chase.cu
q="--no-stats --no-kernel-time --no-cap --cache-mib 0 --seq-ratio 1 --strided-fraction 1"
v() { sed -n 's/.*ns_per_step=\([^ ]*\).*/\1/p' | tail -1; }
echo "R plain $(/tmp/chase 1024 50000 random | v)"
for rep in 1 2; do for l in 100 400 1600; do
 echo "R new rep=$rep lat=$l $(target/gpu-carry/bpftime-super-cxl run $q --latency-ns $l -- /tmp/chase 1024 50000 random | v)"
 echo "R run35 rep=$rep lat=$l $(target/a35/bpftime-super-cxl run $q --latency-ns $l -- /tmp/chase 1024 50000 random | v)"
done; done
echo "R plain $(/tmp/chase 1024 50000 random | v)"
