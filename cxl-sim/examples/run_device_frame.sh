#!/usr/bin/env bash
# Run 33 of bench/results/cxl_gpu.md: the delay probe with its eBPF frame slots in registers
# (jit::JitOptions::stack_regs, the default since run 33) against the same binary with every
# slot in local memory (BPFTIME_STACK_REGS=0), alternating in one run.
#   PART=chase: the pointer chase at Δt 100–1,600, with --count-only (the probe's own path)
#               and with the emulated cache off; the ratio check; the caps.
#   PART=cost:  the paths that run the probe inlined whole: statistics at Δt = 0, the
#               direct-x8 preset (and its statistics: what reached the link); Δt = 0 without
#               statistics (split, so unchanged) as a control.
# One `R …` line per measurement in $OUT/cxl33/log.txt.
#   PART=chase CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_frame.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup cxl33 cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu
q="--no-stats --no-kernel-time"
sr() { env BPFTIME_STACK_REGS=$1 "${@:2}"; }
if [ "${PART:?}" = chase ]; then
	v=$($b/chase 1024 50000 random | val ns_per_step); r chase regs=none lat=plain ns=$v
	for s in 1 0; do
		for l in 100 200 400 800 1600; do
			v=$(sr $s $cxl run $q --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step)
			r chase regs=$s lat=$l ns=$v
		done
		v=$(sr $s $cxl run $q --latency-ns 400 --no-cap --count-only -- $b/chase 1024 50000 random | val ns_per_step)
		r chase regs=$s lat=400 wait=none ns=$v
		for l in 100 200 400; do
			v=$(sr $s $cxl run $q --cache-mib 0 --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step)
			r chase_nocache regs=$s lat=$l ns=$v
		done
		v=$(sr $s $cxl run $q --cache-mib 0 --latency-ns 400 --no-cap --count-only -- $b/chase 1024 50000 random | val ns_per_step)
		r chase_nocache regs=$s lat=400 wait=none ns=$v
	done
	v=$($b/chase 1024 50000 random | val ns_per_step); r chase regs=none lat=plain ns=$v
	v=$($b/chase 1024 50000 seq | val ns_per_step); r chase_seq regs=none lat=plain ns=$v
	for m in random seq; do
		v=$($cxl run $q --cache-mib 0 --latency-ns 1600 --seq-ratio 2 --no-cap -- $b/chase 1024 50000 $m | val ns_per_step)
		r chase_ratio2_nocache regs=1 mode=$m lat=1600 ns=$v
	done
	for cap in 16 32 64; do
		v=$($cxl run $q --latency-ns 0 --bandwidth-gbps $cap -- $b/stream 67108864 5 | val gbps); r stream_bw regs=1 cap=$cap gbps=$v
	done
fi
if [ "$PART" = cost ]; then
	for app in "stream 67108864 5" "sgemm 4096 3" "gather 16777216 1024 5"; do
		name=${app%% *}
		v=$($b/$app | val kernel_us); r plain app=$name us=$v
		for s in 1 0; do
			v=$(sr $s $cxl run $q --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name regs=$s us=$v
			v=$(sr $s $cxl run --no-kernel-time --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r stats0 app=$name regs=$s us=$v
			v=$(sr $s $cxl run $q --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r split0 app=$name regs=$s us=$v
		done
		$cxl run --no-kernel-time --preset direct-x8 -- $b/$app > "$w/x8_stats_$name.txt" 2>&1
		r preset_stats app=$name us=$(val kernel_us < "$w/x8_stats_$name.txt")
	done
fi
echo "done" >> "$log"
