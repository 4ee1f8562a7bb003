#!/usr/bin/env bash
# The second part of cxl-sim's device run: pointer-chase latencies above the probe's own
# critical path, kernel times from the entry/exit probes against the app's CUDA events,
# and a sweep with plots. Writes $OUT/cxl2/log.txt and $OUT/cxl2.tar.gz.
#   CARRY=target/cxl-carry OUT=/tmp/o bash cxl-sim/examples/run_device_sweep.sh
set -u
out=${OUT:?}; w=$out/cxl2; mkdir -p "$w"; log=$w/log.txt
carry=${CARRY:-target/gpu-carry}; cxl=$carry/bpftime-super-cxl
export BPFTIME_FONT=$PWD/$carry/DejaVuSans.ttf
b=/tmp/cxlbin; mkdir -p $b
gen="-gencode arch=compute_90,code=[sm_90,compute_90]"
for s in cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu attach/tests/apps/stream.cu; do
	nvcc -O3 $gen -o $b/$(basename ${s%.cu}) $s 2>> "$w/nvcc.err" || echo "nvcc $s failed"
done
r() { echo "R $*" | tee -a "$log"; }
val() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" | tail -1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$w/device.txt"
v=$($b/chase 1024 50000 random | val ns_per_step); r chase_plain ns=$v
for l in 0 400 800 1600 3200; do
	v=$($cxl run --latency-ns $l --no-cap --no-stats --no-kernel-time -- $b/chase 1024 50000 random | val ns_per_step); r chase_cxl lat=$l ns=$v
done
# Kernel time: the probes' sum against the app's events (median × launches).
for cfg in "--latency-ns 0 --no-cap" "--preset direct-x8"; do
	$cxl run $cfg --json -- $b/stream 16777216 6 > "$w/stream_timed.json" 2> "$w/stream_timed.err"
	app=$(grep -o 'kernel_us=[^ ]*' "$w/stream_timed.err" | cut -d= -f2)
	probe=$(python3 -c "import json; d=json.load(open('$w/stream_timed.json')); print(d['kernels']['triad'][0], d['kernels']['triad'][1])")
	r ktime cfg="${cfg// /_}" app_median_us=$app probe_launches_ns="${probe// /_}"
done
timeout 300 $cxl sweep --no-stats --latency 0,100,200,400,800 --bandwidth none,16,64 --out "$w/sweep" -- $b/gather 4194304 256 3 > "$w/sweep.txt" 2>&1
echo "sweep rc $?" | tee -a "$log"
cat "$w/sweep/results.csv"
tar czf "$out/cxl2.tar.gz" -C "$out" cxl2
