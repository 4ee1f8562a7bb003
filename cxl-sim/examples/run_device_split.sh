#!/usr/bin/env bash
# Run 22 of bench/results/cxl_gpu.md: memory-probe blocks that free the kernel's registers
# around the probe's cold part (the probe's code from its first read of the access on, now
# a function of the module the blocks call; the kernel capped at the original's occupancy
# plus one allocation unit), against the earlier blocks (BPFTIME_KEEP_REGISTERS=1: the
# whole probe inlined at every access) and the plain app, alternating. The emulator's cost
# at Δt = 0, then the delays through the new path: the pointer chase at Δt 0…1,600,
# random against sequential at a 2:1 ratio, the triad's bandwidth under caps of 16, 32 and
# 64 GB/s, and the direct-x8 preset. One `R …` line per measurement in $OUT/cxl22/log.txt.
#   CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_split.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup cxl22 cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu
q="--no-stats --no-kernel-time"
for rep in 1 2 3; do
	for app in "stream 67108864 10" "sgemm 4096 5" "gather 16777216 1024 5"; do
		name=${app%% *}
		v=$($b/$app | val kernel_us); r cost app=$name cfg=plain rep=$rep us=$v
		v=$(BPFTIME_KEEP_REGISTERS=1 $cxl run $q --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name cfg=inline rep=$rep us=$v
		v=$($cxl run $q --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name cfg=split rep=$rep us=$v
	done
done
for app in "stream 67108864 10" "sgemm 4096 5"; do
	name=${app%% *}
	v=$($cxl run --no-kernel-time --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name cfg=split_stats us=$v
	v=$($cxl run --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name cfg=split_stats_time us=$v
done
for m in random seq; do
	v=$($b/chase 1024 50000 $m | val ns_per_step); r chase mode=$m lat=plain ns=$v
	for l in 0 100 200 400 800 1600; do
		v=$($cxl run $q --latency-ns $l --no-cap -- $b/chase 1024 50000 $m | val ns_per_step); r chase mode=$m cfg=split lat=$l ns=$v
	done
	v=$($cxl run $q --latency-ns 3200 --seq-ratio 2 --no-cap -- $b/chase 1024 50000 $m | val ns_per_step); r chase_ratio2 mode=$m cfg=split lat=3200 ns=$v
done
for l in 400 1600; do
	v=$(BPFTIME_KEEP_REGISTERS=1 $cxl run $q --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step); r chase mode=random cfg=inline lat=$l ns=$v
done
v=$($b/stream 67108864 10 | val gbps); r stream_bw cap=none gbps=$v
for cap in 16 32 64; do
	v=$($cxl run $q --latency-ns 0 --bandwidth-gbps $cap -- $b/stream 67108864 5 | val gbps); r stream_bw cfg=split cap=$cap gbps=$v
done
for app in "stream 67108864 5" "sgemm 4096 3" "gather 16777216 1024 5"; do
	name=${app%% *}
	v=$($cxl run $q --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name cfg=split us=$v
	v=$(BPFTIME_KEEP_REGISTERS=1 $cxl run $q --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name cfg=inline us=$v
done
echo "done" >> "$log"
