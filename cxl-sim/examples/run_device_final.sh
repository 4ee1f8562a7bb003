#!/usr/bin/env bash
# The figures of bench/results/cxl_gpu.md that come from the final probe (the delay runs
# from the load's data arrival): pointer-chase latency, random against sequential, the
# emulator's own cost, and the direct-x8 preset. One `R …` line per measurement in
# $OUT/cxl3/log.txt.
#   CARRY=target/cxl-carry OUT=/tmp/o bash cxl-sim/examples/run_device_final.sh
set -u
out=${OUT:?}; w=$out/cxl3; mkdir -p "$w"; log=$w/log.txt
carry=${CARRY:-target/gpu-carry}; cxl=$carry/bpftime-super-cxl
b=/tmp/cxlbin; mkdir -p $b
gen="-gencode arch=compute_90,code=[sm_90,compute_90]"
for s in cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu; do
	nvcc -O3 $gen -o $b/$(basename ${s%.cu}) $s 2>> "$w/nvcc.err" || echo "nvcc $s failed"
done
r() { echo "R $*" | tee -a "$log"; }
val() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" | tail -1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$w/device.txt"
q="--no-stats --no-kernel-time"
for m in random seq; do
	v=$($b/chase 1024 50000 $m | val ns_per_step); r chase mode=$m lat=plain ns=$v
	for l in 0 100 400 800 1600 3200; do
		v=$($cxl run $q --latency-ns $l --no-cap -- $b/chase 1024 50000 $m | val ns_per_step); r chase mode=$m lat=$l ns=$v
	done
	v=$($cxl run $q --latency-ns 3200 --seq-ratio 2 --no-cap -- $b/chase 1024 50000 $m | val ns_per_step); r chase_ratio2 mode=$m lat=3200 ns=$v
done
for rep in 1 2; do
	for app in "stream 67108864 10" "sgemm 4096 5" "gather 16777216 1024 5"; do
		name=${app%% *}
		v=$($b/$app | val kernel_us); r cost app=$name cfg=plain rep=$rep us=$v
		v=$($cxl run $q --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name cfg=zero rep=$rep us=$v
	done
done
for app in "stream 67108864 5" "sgemm 4096 3" "gather 16777216 1024 5"; do
	name=${app%% *}
	v=$($cxl run $q --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name cfg=direct-x8 us=$v
	v=$($cxl run $q --preset direct-x8 --no-cap -- $b/$app | val kernel_us); r preset app=$name cfg=direct-x8-nocap us=$v
done
