#!/usr/bin/env bash
# Run 40 of bench/results/cxl_gpu.md: memory probes' fetching atomics relaxed
# (jit::JitOptions::relaxed_atomics, the default for memory probes) against acq_rel
# (BPFTIME_RELAXED_ATOMICS=0), alternating: the chase under the direct-x8 preset (a cap:
# the link's atomics on every access), with --count-only, and without a cap (no atomics: a
# control); SGEMM, the triad and the gather under direct-x8; the caps at 16/32/64 GB/s.
# OTHER=obj adds another build of the probe under direct-x8 (run 40: the queueing term
# without its divisions; run 41: the probe before the division-free queueing term).
# One `R …` line per measurement in $OUT/cxl40/log.txt.
#   CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_relaxed.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup ${RUN:-cxl40} cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu
q="--no-stats --no-kernel-time"
ra() { env BPFTIME_RELAXED_ATOMICS=$1 "${@:2}"; }
chase() { "$@" $b/chase 1024 50000 random | val ns_per_step; }
for rep in 1 2; do
	v=$(chase); r chase rel=none rep=$rep cfg=plain ns=$v
	for a in 1 0; do
		v=$(chase ra $a $cxl run $q --preset direct-x8 --); r chase rel=$a rep=$rep cfg=x8 ns=$v
		v=$(chase ra $a $cxl run $q --preset direct-x8 --count-only --); r chase rel=$a rep=$rep cfg=x8count ns=$v
		v=$(chase ra $a $cxl run $q --latency-ns 400 --no-cap --); r chase rel=$a rep=$rep cfg=l400 ns=$v
		[ -n "${OTHER:-}" ] && { v=$(chase ra $a $cxl run $q --object $OTHER --preset direct-x8 --); r chase rel=$a rep=$rep cfg=x8other ns=$v; }
	done
done
for app in "stream 67108864 5" "sgemm 4096 3" "gather 16777216 1024 5"; do
	name=${app%% *}
	v=$($b/$app | val kernel_us); r plain app=$name us=$v
	for a in 1 0; do
		v=$(ra $a $cxl run $q --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name rel=$a us=$v
	done
done
for cap in 16 32 64; do
	v=$($cxl run $q --latency-ns 0 --bandwidth-gbps $cap -- $b/stream 67108864 5 | val gbps); r stream_bw rel=1 cap=$cap gbps=$v
done
echo "done" >> "$log"
