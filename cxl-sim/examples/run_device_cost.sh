#!/usr/bin/env bash
# The emulator's cost at Δt = 0 with and without its kernel timer (entry/exit probes), after
# kernel probes were inlined: median kernel time of STREAM / SGEMM / gather, alternating.
#   bash cxl-sim/examples/run_device_cost.sh   (needs target/gpu-carry with bpftime-super-cxl)
set -u
b=/tmp/cxlbin; mkdir -p $b; c=target/gpu-carry/bpftime-super-cxl
gen="-gencode arch=compute_90,code=[sm_90,compute_90]"
for s in attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu cxl-sim/examples/gather.cu; do nvcc -O3 $gen -o $b/$(basename ${s%.cu}) $s; done
val() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" | tail -1; }
for rep in 1 2; do
 for app in "stream 67108864 10" "sgemm 4096 5" "gather 16777216 1024 5"; do
  name=${app%% *}
  echo "R app=$name rep=$rep cfg=plain us=$($b/$app | val kernel_us)"
  echo "R app=$name rep=$rep cfg=no_kernel_time us=$($c run --no-stats --no-kernel-time --latency-ns 0 --no-cap -- $b/$app | val kernel_us)"
  echo "R app=$name rep=$rep cfg=kernel_time us=$($c run --no-stats --latency-ns 0 --no-cap -- $b/$app | val kernel_us)"
 done
done
