#!/usr/bin/env bash
# Run 16 of bench/results/cxl_gpu.md: where the delay probe reads the load's arrival time,
# three builds of bpf/cxl.bpf.c side by side in one run (`cxl run --object`):
#   before  — arrival first, then the lookups and the work (runs 13-14's probe, and the
#             committed one);
#   after   — the lookups and all the work, then arrival (run 15's probe);
#   between — the lookups' loads issued, the cache's hit test, arrival, then the work
#             (bench/results/cxl_gpu/run16_between.patch).
# Pointer-chase latency for small Δt, random against sequential with `--cache-mib 0`, and
# the cost at Δt = 0 under the default register cap and without one (BPFTIME_REG_CAP=0).
# One `R …` line per measurement in $OUT/cxl16/log.txt.
#   OBJ_DIR=dir-with-{before,after,between}.bpf.o CARRY=target/gpu-carry OUT=/tmp/o \
#     bash cxl-sim/examples/run_device_order.sh
set -u
. "$(dirname "$0")/device_lib.sh"
objs=${OBJ_DIR:?}
cxl_device_setup cxl16 cxl-sim/examples/chase.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu
q="--no-stats --no-kernel-time"
v=$($b/chase 1024 50000 random | val ns_per_step); r chase probe=none lat=plain ns=$v
v=$($b/chase 1024 50000 seq | val ns_per_step); r chase_seq probe=none lat=plain ns=$v
for p in before between after; do
	o="--object $objs/$p.bpf.o"
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
	v=$(BPFTIME_REG_CAP=0 $cxl run $q $o --latency-ns 0 --no-cap -- $b/chase 1024 50000 random | val ns_per_step)
	r chase probe=$p lat=0 cap=off ns=$v
done
for rep in 1 2; do
	for app in "stream 67108864 10" "sgemm 4096 5"; do
		name=${app%% *}
		v=$($b/$app | val kernel_us); r cost app=$name probe=none rep=$rep us=$v
		for p in before between after; do
			o="--object $objs/$p.bpf.o"
			v=$($cxl run $q $o --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name probe=$p cap=launch rep=$rep us=$v
			v=$(BPFTIME_REG_CAP=0 $cxl run $q $o --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name probe=$p cap=off rep=$rep us=$v
		done
	done
done
echo "done" >> "$log"
