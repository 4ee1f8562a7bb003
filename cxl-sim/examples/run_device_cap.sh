#!/usr/bin/env bash
# Run 17 of bench/results/cxl_gpu.md: the committed probe (arrival first) under the launch
# register cap that caps only kernels whose instrumented build would launch smaller blocks
# (the default), against no cap (BPFTIME_REG_CAP=0) and the plain app, alternating: the
# emulator's cost at Δt = 0 (and once with statistics), the pointer chase, and the
# direct-x8 preset. One `R …` line per measurement in $OUT/cxl17/log.txt.
#   CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_cap.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup cxl17 cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu
q="--no-stats --no-kernel-time"
for rep in 1 2 3; do
	for app in "stream 67108864 10" "sgemm 4096 5" "gather 16777216 1024 5"; do
		name=${app%% *}
		v=$($b/$app | val kernel_us); r cost app=$name cfg=plain rep=$rep us=$v
		v=$($cxl run $q --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name cfg=zero cap=launch rep=$rep us=$v
		v=$(BPFTIME_REG_CAP=0 $cxl run $q --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name cfg=zero cap=off rep=$rep us=$v
	done
done
for app in "stream 67108864 10" "sgemm 4096 5" "gather 16777216 1024 5"; do
	name=${app%% *}
	v=$($cxl run --no-kernel-time --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name cfg=zero_stats cap=launch us=$v
	v=$(BPFTIME_REG_CAP=0 $cxl run --no-kernel-time --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name cfg=zero_stats cap=off us=$v
done
v=$($b/chase 1024 50000 random | val ns_per_step); r chase lat=plain ns=$v
for l in 0 400 1600; do
	v=$($cxl run $q --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step); r chase lat=$l ns=$v
done
for app in "stream 67108864 5" "sgemm 4096 3" "gather 16777216 1024 5"; do
	name=${app%% *}
	v=$($cxl run $q --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name cfg=direct-x8 us=$v
	v=$($cxl run $q --preset direct-x8 --no-cap -- $b/$app | val kernel_us); r preset app=$name cfg=direct-x8-nocap us=$v
done
echo "done" >> "$log"
