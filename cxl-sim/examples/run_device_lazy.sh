#!/usr/bin/env bash
# Run 18 of bench/results/cxl_gpu.md: loaded values read at the probe's ctx point (the body's
# registers renamed) instead of before the body. Pointer chase under the committed probe
# (arrival first) and run 16's "between" order (`--object`), the cost at Δt = 0, against
# the plain app in the same run. One `R …` line per measurement in $OUT/cxl18/log.txt.
#   OBJ_DIR=dir-with-between.bpf.o CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_lazy.sh
set -u
. "$(dirname "$0")/device_lib.sh"
objs=${OBJ_DIR:?}
cxl_device_setup cxl18 cxl-sim/examples/chase.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu
q="--no-stats --no-kernel-time"
v=$($b/chase 1024 50000 random | val ns_per_step); r chase probe=none lat=plain ns=$v
v=$($b/chase 1024 50000 seq | val ns_per_step); r chase_seq probe=none lat=plain ns=$v
for p in committed between; do
	o=""; [ $p = between ] && o="--object $objs/between.bpf.o"
	for l in 0 100 200 400 800 1600; do
		v=$($cxl run $q $o --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step)
		r chase probe=$p lat=$l ns=$v
	done
	for l in 100 200 400; do
		v=$($cxl run $q $o --cache-mib 0 --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step)
		r chase_nocache probe=$p lat=$l ns=$v
	done
	for m in random seq; do
		v=$($cxl run $q $o --cache-mib 0 --latency-ns 1600 --seq-ratio 2 --no-cap -- $b/chase 1024 50000 $m | val ns_per_step)
		r chase_ratio2_nocache probe=$p mode=$m lat=1600 ns=$v
	done
done
for rep in 1 2; do
	for app in "stream 67108864 10" "sgemm 4096 5"; do
		name=${app%% *}
		v=$($b/$app | val kernel_us); r cost app=$name probe=none rep=$rep us=$v
		v=$($cxl run $q --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name probe=committed rep=$rep us=$v
	done
done
echo "done" >> "$log"
