#!/usr/bin/env bash
# Run 35 of bench/results/cxl_gpu.md: a fixed latency (the same Δt in every class, no
# emulated cache, no cap, no statistics: CXL_FLAG_FIXED) waits from the data's arrival with
# none of the probe's lookups. The pointer chase at Δt 100–1,600 with the committed probe
# (the fast path) and with the probe before it (OLD_OBJ, which takes the full path on the
# same configuration), alternating, and with --count-only; the triad under the same
# configuration as a check that a kernel of many warps runs right.
# One `R …` line per measurement in $OUT/cxl35/log.txt.
#   OLD_OBJ=target/s36/old.bpf.o CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_fixed.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup ${RUN:-cxl35} cxl-sim/examples/chase.cu attach/tests/apps/stream.cu
q="--no-stats --no-kernel-time --no-cap --cache-mib 0 --seq-ratio 1 --strided-fraction 1"
chase() { "$@" $b/chase 1024 50000 random | val ns_per_step; }
v=$(chase); r chase probe=none lat=plain ns=$v
for rep in ${REPS:-1 2}; do
	for l in 100 200 400 800 1600; do
		v=$(chase $cxl run $q --latency-ns $l --); r chase probe=fixed rep=$rep lat=$l ns=$v
		v=$(chase $cxl run $q --object ${OLD_OBJ:?} --latency-ns $l --); r chase probe=full rep=$rep lat=$l ns=$v
	done
	v=$(chase); r chase probe=none lat=plain ns=$v
done
v=$(chase $cxl run $q --count-only --latency-ns 400 --); r chase probe=fixed lat=400 wait=none ns=$v
v=$(chase $cxl run $q --object $OLD_OBJ --count-only --latency-ns 400 --); r chase probe=full lat=400 wait=none ns=$v
v=$($b/stream 67108864 5 | val kernel_us); r stream probe=none us=$v
for l in 100 400; do
	f="$w/stream_fixed_$l.txt"
	$cxl run $q --latency-ns $l -- $b/stream 67108864 5 > "$f" 2>&1
	r stream probe=fixed lat=$l us=$(val kernel_us < "$f") ok=$(grep -c " ok " "$f")
	f="$w/stream_full_$l.txt"
	$cxl run $q --object $OLD_OBJ --latency-ns $l -- $b/stream 67108864 5 > "$f" 2>&1
	r stream probe=full lat=$l us=$(val kernel_us < "$f") ok=$(grep -c " ok " "$f")
done
echo "done" >> "$log"
