#!/usr/bin/env bash
# Run 31 of bench/results/cxl_gpu.md: the kernel table of `cxl run` (entry/exit probes,
# bpf/cxl_time.bpf.c) against CUDA events on kernel_time.cu (a short kernel of 2 and of 8
# blocks interleaved with a long one), the triad, and the CuPy decoder's table, for the
# build before the launch-tagged stamps (OLD) and after (CARRY). One `R …` line per
# measurement in $OUT/cxl31/log.txt; the tables in $OUT/cxl31/*.txt.
#   CARRY=target/s25/gpu-carry OLD=target/s22/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_ktime.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup cxl31 cxl-sim/examples/kernel_time.cu attach/tests/apps/stream.cu
q="--no-stats --latency-ns 0 --no-cap"
row() { # row NAME FILE: the kernel table's row NAME: launches and ms
	awk -v k="$1" '$1 == k { print "launches=" $2 " table_ms=" $3 }' "$2"
}
for build in old new; do
	cxl_b=$cxl
	[ $build = old ] && cxl_b=${OLD:?}/bpftime-super-cxl
	for cfg in "1 2" "0 2" "1 8"; do
		set -- $cfg
		f="$w/kt_${build}_$1_$2.txt"
		$cxl_b run $q -- $b/kernel_time $1 $2 30 > "$f" 2>&1
		ev=$(grep '^kernel_time' "$f")
		r ktime build=$build sync=$1 blocks=$2 kernel=short_k $(row short_k "$f") events_ms=$(echo "$ev" | sed -n 's/.*short launches=[0-9]* events_ms=\([^ ]*\).*/\1/p')
		r ktime build=$build sync=$1 blocks=$2 kernel=long_k $(row long_k "$f") events_ms=$(echo "$ev" | sed -n 's/.*long launches=[0-9]* events_ms=\([^ ]*\).*/\1/p')
	done
	f="$w/triad_$build.txt"
	$cxl_b run $q -- $b/stream 16777216 10 > "$f" 2>&1
	r triad build=$build $(row triad "$f") kernel_us=$(val kernel_us < "$f")
	f="$w/llm_$build.txt"
	$cxl_b run $q -- python3 attach/tests/apps/llm_cupy.py 2 16 > "$f" 2>&1
	for k in matvec embed rmsnorm attention add_inplace silu_gate append_kv; do
		r llm build=$build kernel=$k $(row $k "$f")
	done
done
echo "done" >> "$log"
