#!/usr/bin/env bash
# Run 15 of bench/results/cxl_gpu.md: the probe whose bookkeeping runs inside the load's
# latency (only the wait follows the data). Pointer-chase latency for small Δt, random
# against sequential with the emulated cache off (`--cache-mib 0`), the emulator's own
# cost at Δt = 0 and the direct-x8 preset, each ratio next to the plain app in the same
# run. One `R …` line per measurement in $OUT/cxl15/log.txt.
#   CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_arrival.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup cxl15 cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu
q="--no-stats --no-kernel-time"
# Latency: local + Δt, ±10% for 100, 200, 400 (the issue's check), with and without the
# emulated cache.
for rep in 1 2; do
	v=$($b/chase 1024 50000 random | val ns_per_step); r chase mode=random lat=plain rep=$rep ns=$v
	for l in 0 100 200 400 800 1600; do
		v=$($cxl run $q --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step)
		r chase mode=random lat=$l rep=$rep ns=$v
	done
	for l in 100 200 400; do
		v=$($cxl run $q --cache-mib 0 --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step)
		r chase_nocache mode=random lat=$l rep=$rep ns=$v
	done
done
# Random against sequential, the emulated cache off (every access reaches the tier):
# the added latencies' ratio must be the configured 2.
v=$($b/chase 1024 50000 seq | val ns_per_step); r chase mode=seq lat=plain ns=$v
for m in random seq; do
	v=$($cxl run $q --cache-mib 0 --latency-ns 1600 --seq-ratio 2 --no-cap -- $b/chase 1024 50000 $m | val ns_per_step)
	r chase_ratio2_nocache mode=$m lat=1600 ns=$v
done
# Cost at Δt = 0 and the direct-x8 preset (medians of three, alternating with plain).
for rep in 1 2 3; do
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
echo "done" >> "$log"
