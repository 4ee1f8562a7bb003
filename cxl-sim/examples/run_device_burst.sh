#!/usr/bin/env bash
# Run 20 of bench/results/cxl_gpu.md: the kernels' link after an idle spell. The earlier
# probe added an access's bytes to the link word first and restarted an idle link with a
# compare-and-swap after; in a simultaneous burst every swap but one failed, and an idle
# spell became credit. The committed probe raises the word to now first (a swap loop),
# then adds. Both builds side by side (`cxl run --object` for the earlier one): the STREAM
# triad's bandwidth under a cap, small launches (the link idles between them) to the full
# 2^26, and the direct-x8 preset. One `R …` line per measurement in $OUT/cxl20/log.txt.
#   OLD=earlier-cxl.bpf.o CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_burst.sh
set -u
. "$(dirname "$0")/device_lib.sh"
old=${OLD:?}
cxl_device_setup cxl20 cxl-sim/examples/gather.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu
q="--no-stats --no-kernel-time"
for n in 65536 262144 1048576 16777216; do
	v=$($b/stream $n 20 | val gbps); r stream n=$n probe=none cap=none gbps=$v
	for cap in 16 64; do
		for p in old new; do
			o=""; [ $p = old ] && o="--object $old"
			v=$($cxl run $q $o --latency-ns 0 --bandwidth-gbps $cap -- $b/stream $n 20 | val gbps)
			r stream n=$n probe=$p cap=$cap gbps=$v
		done
	done
done
v=$($b/stream 67108864 5 | val gbps); r stream n=67108864 probe=none cap=none gbps=$v
for cap in 16 32 64; do
	for p in old new; do
		o=""; [ $p = old ] && o="--object $old"
		v=$($cxl run $q $o --latency-ns 0 --bandwidth-gbps $cap -- $b/stream 67108864 5 | val gbps)
		r stream n=67108864 probe=$p cap=$cap gbps=$v
	done
done
for app in "stream 67108864 5" "sgemm 4096 3" "gather 16777216 1024 5"; do
	name=${app%% *}
	v=$($b/$app | val kernel_us); r preset app=$name probe=none cfg=plain us=$v
	for p in old new; do
		o=""; [ $p = old ] && o="--object $old"
		v=$($cxl run $q $o --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name probe=$p cfg=direct-x8 us=$v
	done
done
echo "done" >> "$log"
