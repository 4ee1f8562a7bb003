#!/usr/bin/env bash
# Run 38 of bench/results/cxl_gpu.md: what the calibration (run 37's 100 ns off every wait)
# does to the direct-x8 preset's slowdowns (the full path: classes, emulated cache, cap),
# STREAM triad, gather and SGEMM, with --compensate-ns 100 and 0 alternating; and a sweep
# of the chase in the fixed configuration with the calibration, whose CSV and plots show
# slowdown = (local + Δt) / local.
# One `R …` line per measurement in $OUT/cxl38/log.txt.
#   CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_calibrated_presets.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup ${RUN:-cxl38} cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu
q="--no-stats --no-kernel-time"
for app in "stream 67108864 5" "sgemm 4096 3" "gather 16777216 1024 5"; do
	name=${app%% *}
	v=$($b/$app | val kernel_us); r plain app=$name us=$v
	for rep in 1 2; do
		for c in 100 0; do
			v=$($cxl run $q --compensate-ns $c --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name comp=$c rep=$rep us=$v
		done
	done
done
$cxl calibrate -- $b/chase 1024 50000 random > "$w/calibrate.txt" 2> "$w/calibrate.err"
r calibrate rc=$? "$(head -1 "$w/calibrate.txt")"
$cxl sweep --no-stats --no-cap --cache-mib 0 --seq-ratio 1 --strided-fraction 1 \
	--latency 0,100,200,400,800,1600 --out "$w/sweep" -- $b/chase 1024 50000 random > "$w/sweep.txt" 2>&1
r sweep rc=$?
cat "$w/sweep/results.csv"
echo "done" >> "$log"
