#!/usr/bin/env bash
# cxl-sim's live paths on the GPU machine: placement by the allocator's host probes
# (gather's 1 GiB table in the tier, its index and output local) and a parameter change
# while a kernel runs (when the chase slows down, against when the region was written).
# One `R …` line per measurement in $OUT/cxl4/log.txt.
#   CARRY=target/cxl-carry OUT=/tmp/o bash cxl-sim/examples/run_device_live.sh
set -u
out=${OUT:?}; w=$out/cxl4; mkdir -p "$w"; log=$w/log.txt
carry=${CARRY:-target/gpu-carry}; cxl=$carry/bpftime-super-cxl
b=/tmp/cxlbin; mkdir -p $b
gen="-gencode arch=compute_90,code=[sm_90,compute_90]"
for s in cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu; do
	nvcc -O3 $gen -o $b/$(basename ${s%.cu}) $s 2>> "$w/nvcc.err" || { echo "nvcc $s failed"; cat "$w/nvcc.err"; }
done
r() { echo "R $*" | tee -a "$log"; }
val() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" | tail -1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$w/device.txt"
q="--no-stats --no-kernel-time"
v=$($b/gather 16777216 1024 5 | val kernel_us); r place cfg=plain us=$v
v=$($cxl run $q --preset direct-x8 -- $b/gather 16777216 1024 5 | val kernel_us); r place cfg=all us=$v
$cxl run $q --preset direct-x8 --placement 'size>=512MB' -- $b/gather 16777216 1024 5 > "$w/place_size.txt" 2>&1
r place cfg=size512 us=$(val kernel_us < "$w/place_size.txt")
$cxl run $q --preset direct-x8 --placement 'local=100MB' -- $b/gather 16777216 1024 5 > "$w/place_local.txt" 2>&1
r place cfg=local100 us=$(val kernel_us < "$w/place_local.txt")
cat "$w/place_size.txt" "$w/place_local.txt" | grep -v "^not emulated"
# The app takes about 3 s to reach its first kernel (trace, the shim, CUDA, the module);
# the changes land while the chase's launches run.
for at in ${LIVE_AT:-3800 4200 4600}; do
	CHASE_SLOW_NS=2200 $cxl run $q --latency-ns 0 --no-cap --json --at ${at}ms:latency-ns=3200 -- $b/chase 1024 400000 random 6 > "$w/live_$at.json" 2> "$w/live_$at.err"
	written=$(python3 -c "import json; print(json.load(open('$w/live_$at.json'))['changes'][0]['written_unix_ns'])" 2>/dev/null)
	seen=$(val first_unix_ns < "$w/live_$at.err"); unc=$(val uncertainty_ns < "$w/live_$at.err")
	r live at_ms=$at written_unix_ns=$written first_slow_unix_ns=$seen clock_uncertainty_ns=$unc delay_ns=$(python3 -c "print(${seen:-0} - ${written:-0})")
done
