#!/usr/bin/env bash
# Run 21 of bench/results/cxl_gpu.md: the probe's first test at every access reads one
# word (CXL_FLAG_ACTIVE, derived by the host) instead of five (the flags, three latencies,
# the cap). The emulator's cost at Δt = 0 (no cap, no statistics), alternating with the
# plain app and the earlier build (`cxl run --object`), and the pointer chase at Δt 0 and
# 1,600 as a check that delays still hold. One `R …` line per measurement in
# $OUT/cxl21/log.txt.
#   OLD=earlier.bpf.o CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_active.sh
set -u
. "$(dirname "$0")/device_lib.sh"
old=${OLD:?}
cxl_device_setup cxl21 cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu
q="--no-stats --no-kernel-time"
for rep in 1 2 3; do
	for app in "stream 67108864 10" "sgemm 4096 5" "gather 16777216 1024 5"; do
		name=${app%% *}
		v=$($b/$app | val kernel_us); r cost app=$name probe=none rep=$rep us=$v
		v=$($cxl run $q --object $old --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name probe=five rep=$rep us=$v
		v=$($cxl run $q --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name probe=one rep=$rep us=$v
	done
done
v=$($b/chase 1024 50000 random | val ns_per_step); r chase probe=none lat=plain ns=$v
for l in 0 1600; do
	v=$($cxl run $q --object $old --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step); r chase probe=five lat=$l ns=$v
	v=$($cxl run $q --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step); r chase probe=one lat=$l ns=$v
done
echo "done" >> "$log"
