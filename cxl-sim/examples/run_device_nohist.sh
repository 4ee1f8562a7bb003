#!/usr/bin/env bash
# Run 26 of bench/results/cxl_gpu.md (a change measured and dropped: run26_nohist.patch): the probe keeps no warp history when the class
# decides nothing (one latency for every class, no statistics: the defaults), against the
# earlier object (OLD, `cxl run --object`), alternating: the pointer chase at Δt 0…1,600,
# with the default 64 MiB emulated cache and without it; then checks that the classes still
# work where they differ (`--seq-ratio 2`) and the direct-x8 preset. One `R …` line per
# measurement in $OUT/cxl26/log.txt.
#   OLD=earlier.bpf.o CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_nohist.sh
set -u
. "$(dirname "$0")/device_lib.sh"
old=${OLD:?}
cxl_device_setup cxl26 cxl-sim/examples/chase.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu cxl-sim/examples/gather.cu
q="--no-stats --no-kernel-time"
for rep in 1 2; do
	for m in random seq; do
		v=$($b/chase 1024 50000 $m | val ns_per_step); r chase mode=$m rep=$rep lat=plain ns=$v
		for cache in 64 0; do
			for l in 0 100 200 400 800 1600; do
				v=$($cxl run $q --object $old --cache-mib $cache --latency-ns $l --no-cap -- $b/chase 1024 50000 $m | val ns_per_step); r chase mode=$m rep=$rep cache=$cache probe=old lat=$l ns=$v
				v=$($cxl run $q --cache-mib $cache --latency-ns $l --no-cap -- $b/chase 1024 50000 $m | val ns_per_step); r chase mode=$m rep=$rep cache=$cache probe=new lat=$l ns=$v
			done
		done
	done
done
for m in random seq; do
	v=$($cxl run $q --latency-ns 3200 --seq-ratio 2 --no-cap -- $b/chase 1024 50000 $m | val ns_per_step); r chase_ratio2 mode=$m probe=new lat=3200 ns=$v
done
for app in "stream 67108864 5" "sgemm 4096 3" "gather 16777216 1024 5"; do
	name=${app%% *}
	v=$($cxl run $q --object $old --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name probe=old us=$v
	v=$($cxl run $q --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name probe=new us=$v
done
echo "done" >> "$log"
