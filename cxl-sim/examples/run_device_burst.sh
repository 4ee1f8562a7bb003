#!/usr/bin/env bash
# Run 20 of bench/results/cxl_gpu.md: the kernels' link after an idle spell. The probe
# adds an access's bytes to the link word first and restarts an idle link with a
# compare-and-swap after; when many accesses meet an idle link at once, one swap takes and
# the others pass on the old word. The variants of bench/results/cxl_gpu/run20_raise.patch
# raise the word to now first (a swap loop; `new` there also only when it is more than
# 1 µs behind), then add. Builds side by side (`cxl run --object` for all but the
# embedded one): the STREAM triad's bandwidth under a cap, small launches (the link idles
# between them) to the full 2^26, and the direct-x8 preset. One `R …` line per measurement
# in $OUT/cxl20/log.txt.
#   PROBES="old=earlier.bpf.o raise=other.bpf.o" CARRY=target/gpu-carry OUT=/tmp/o \
#     bash cxl-sim/examples/run_device_burst.sh
# SMALL_ONLY=1: the small launches with `--cache-mib 0` alone.
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup cxl20 cxl-sim/examples/gather.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu
q="--no-stats --no-kernel-time"
probes="${PROBES:-} embedded="
# run NAME ARGS…: the cxl run with probe NAME's object (`embedded`: the binary's own).
run() {
	local p=$1 o="" e; shift
	for e in $probes; do [ "${e%%=*}" = "$p" ] && [ -n "${e#*=}" ] && o="--object ${e#*=}"; done
	$cxl run $q $o "$@"
}
names=$(for e in $probes; do printf '%s ' "${e%%=*}"; done)
# Small launches fit the emulated GPU cache (its default size) and, after the first launch,
# hit it: the tier sees few of their bytes. `--cache-mib 0` sends every byte to the link.
for cache in default 0; do
	[ "${SMALL_ONLY:-}" ] && [ $cache = default ] && continue
	c=""; [ $cache = 0 ] && c="--cache-mib 0"
	for n in 65536 262144 1048576 16777216; do
		[ "${SMALL_ONLY:-}" ] && [ $n = 16777216 ] && continue
		v=$($b/stream $n 20 | val gbps); r stream n=$n probe=none cap=none gbps=$v
		for cap in 16 64; do
			for p in $names; do
				v=$(run $p $c --latency-ns 0 --bandwidth-gbps $cap -- $b/stream $n 20 | val gbps)
				r stream n=$n cache=$cache probe=$p cap=$cap gbps=$v
			done
		done
	done
done
[ "${SMALL_ONLY:-}" ] && { echo "done" >> "$log"; exit 0; }
v=$($b/stream 67108864 5 | val gbps); r stream n=67108864 probe=none cap=none gbps=$v
for cap in 16 32 64; do
	for p in $names; do
		v=$(run $p --latency-ns 0 --bandwidth-gbps $cap -- $b/stream 67108864 5 | val gbps)
		r stream n=67108864 probe=$p cap=$cap gbps=$v
	done
done
for app in "stream 67108864 5" "sgemm 4096 3" "gather 16777216 1024 5"; do
	name=${app%% *}
	v=$($b/$app | val kernel_us); r preset app=$name probe=none cfg=plain us=$v
	for p in $names; do
		v=$(run $p --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name probe=$p cfg=direct-x8 us=$v
	done
done
echo "done" >> "$log"
