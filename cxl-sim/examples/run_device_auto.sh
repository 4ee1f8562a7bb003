#!/usr/bin/env bash
# Run 23 of bench/results/cxl_gpu.md: `cxl run` as committed after run 22. At zero delay
# with no cap and no statistics it splits the probe (`trace --cold-split`: the probe's
# first test at every access, the rest called, the kernel's registers stored around the
# call and the kernel capped near its own occupancy); otherwise the probe stays inlined
# whole. The emulator's cost at Δt = 0 against the plain app and the inlined probe
# (BPFTIME_COLD_SPLIT=0), alternating; then the paths that delay, to show them unchanged:
# statistics at Δt = 0, the pointer chase, the triad under caps, the direct-x8 preset.
# One `R …` line per measurement in $OUT/cxl23/log.txt.
#   CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_auto.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup cxl23 cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu
q="--no-stats --no-kernel-time"
for rep in 1 2 3; do
	for app in "stream 67108864 10" "sgemm 4096 5" "gather 16777216 1024 5"; do
		name=${app%% *}
		v=$($b/$app | val kernel_us); r cost app=$name cfg=plain rep=$rep us=$v
		v=$(BPFTIME_COLD_SPLIT=0 $cxl run $q --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name cfg=inline rep=$rep us=$v
		v=$($cxl run $q --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name cfg=auto rep=$rep us=$v
	done
done
for app in "stream 67108864 10" "sgemm 4096 5"; do
	name=${app%% *}
	v=$($cxl run --no-kernel-time --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name cfg=auto_stats us=$v
done
v=$($b/chase 1024 50000 random | val ns_per_step); r chase mode=random lat=plain ns=$v
for l in 0 100 200 400 1600; do
	v=$($cxl run $q --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step); r chase mode=random cfg=auto lat=$l ns=$v
done
v=$($b/stream 67108864 10 | val gbps); r stream_bw cap=none gbps=$v
for cap in 16 32 64; do
	v=$($cxl run $q --latency-ns 0 --bandwidth-gbps $cap -- $b/stream 67108864 5 | val gbps); r stream_bw cfg=auto cap=$cap gbps=$v
done
for app in "stream 67108864 5" "sgemm 4096 3" "gather 16777216 1024 5"; do
	name=${app%% *}
	v=$($cxl run $q --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name cfg=auto us=$v
done
echo "done" >> "$log"
