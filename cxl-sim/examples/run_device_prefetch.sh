#!/usr/bin/env bash
# Run 32 of bench/results/cxl_gpu.md: where the delay probe's work goes on a pointer chase,
# four builds of bpf/cxl.bpf.c side by side (`cxl run --object`):
#   old    — the committed probe: the load's arrival read first, then the lookups;
#   new    — the lookups' loads issued first, then arrival, then the rest (measured worse
#            for delays longer than the probe's work; dropped);
#   nohist — new without the warp's history (every access random);
#   min    — new's gate, then arrival and the wait only: no lookup, no bookkeeping.
# The variants are bench/results/cxl_gpu/run32/{new,nohist,min}.patch (new against the
# committed source, the other two against new), built with scripts/build-builtin-probes'
# clang line into OBJ_DIR/{old,new,nohist,min}.bpf.o.
# Each at Δt 100–1,600 and with --count-only (every delay computed, none waited: the
# probe's own path), the emulated cache on and off; then the ratio check, the caps, the
# cost at Δt = 0 and the direct-x8 preset with old and new, and kernel_time.cu (edited
# after run 31) built and run once.
# One `R …` line per measurement in $OUT/cxl32/log.txt.
#   OBJ_DIR=target/s32/objs CARRY=target/s32/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_prefetch.sh
set -u
. "$(dirname "$0")/device_lib.sh"
objs=${OBJ_DIR:?}
cxl_device_setup cxl32 cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu cxl-sim/examples/kernel_time.cu
[ -x "$b/kernel_time" ]; r compile src=cxl-sim/examples/kernel_time.cu rc=$?
$b/kernel_time 1 2 5 > "$w/kernel_time_plain.txt" 2>&1; r run src=kernel_time rc=$?
q="--no-stats --no-kernel-time"
chase() { $b/chase 1024 50000 "$@" | val ns_per_step; }
v=$(chase random); r chase probe=none lat=plain ns=$v
for p in old new nohist min; do
	o="--object $objs/$p.bpf.o"
	for l in 100 200 400 800 1600; do
		v=$($cxl run $q $o --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step)
		r chase probe=$p lat=$l ns=$v
	done
	v=$($cxl run $q $o --latency-ns 400 --no-cap --count-only -- $b/chase 1024 50000 random | val ns_per_step)
	r chase probe=$p lat=400 wait=none ns=$v
	for l in 100 200 400; do
		v=$($cxl run $q $o --cache-mib 0 --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step)
		r chase_nocache probe=$p lat=$l ns=$v
	done
	v=$($cxl run $q $o --cache-mib 0 --latency-ns 400 --no-cap --count-only -- $b/chase 1024 50000 random | val ns_per_step)
	r chase_nocache probe=$p lat=400 wait=none ns=$v
done
v=$(chase random); r chase probe=none lat=plain ns=$v
v=$(chase seq); r chase_seq probe=none lat=plain ns=$v
for p in old new; do
	o="--object $objs/$p.bpf.o"
	for m in random seq; do
		v=$($cxl run $q $o --cache-mib 0 --latency-ns 1600 --seq-ratio 2 --no-cap -- $b/chase 1024 50000 $m | val ns_per_step)
		r chase_ratio2_nocache probe=$p mode=$m lat=1600 ns=$v
	done
	for cap in 16 32 64; do
		v=$($cxl run $q $o --latency-ns 0 --bandwidth-gbps $cap -- $b/stream 67108864 5 | val gbps); r stream_bw probe=$p cap=$cap gbps=$v
	done
done
for rep in 1 2; do
	for app in "stream 67108864 10" "sgemm 4096 5" "gather 16777216 1024 5"; do
		name=${app%% *}
		v=$($b/$app | val kernel_us); r cost app=$name probe=none rep=$rep us=$v
		for p in old new; do
			v=$($cxl run $q --object $objs/$p.bpf.o --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name probe=$p rep=$rep us=$v
		done
	done
done
for app in "stream 67108864 5" "sgemm 4096 3" "gather 16777216 1024 5"; do
	name=${app%% *}
	for p in old new; do
		v=$($cxl run $q --object $objs/$p.bpf.o --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name probe=$p us=$v
	done
done
echo "done" >> "$log"
