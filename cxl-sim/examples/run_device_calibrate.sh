#!/usr/bin/env bash
# Run 37 of bench/results/cxl_gpu.md: the probe takes its own cost off every wait
# (`cxl_config.compensation`). `cxl calibrate` measures that cost on the pointer chase at
# Δt 1,000 (the default file, which `cxl run` then reads) and at 1,600 (another file, to see
# that it holds); then the chase at Δt 100–1,600 with the calibration and without it
# (--compensate-ns 0), alternating, in the fixed configuration (one latency, no cache, no
# cap, no statistics); the ratio check and the caps with the calibration.
# One `R …` line per measurement in $OUT/cxl37/log.txt.
#   CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_calibrate.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup ${RUN:-cxl37} cxl-sim/examples/chase.cu attach/tests/apps/stream.cu
# XDG_CONFIG_HOME is $w/config (device_lib.sh): the calibration below is this run's.
q="--no-stats --no-kernel-time --no-cap --cache-mib 0 --strided-fraction 1"
chase() { "$@" $b/chase 1024 50000 ${MODE:-random} | val ns_per_step; }
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
v=$(chase); r chase comp=none lat=plain ns=$v
for d in 1600 1000; do
	f=$w/calibrate_$d.json
	if [ $d = 1000 ]; then cal=(); else cal=(--calibration $w/cal1600.json); fi
	$cxl calibrate --latency-ns $d "${cal[@]}" --json -- $b/chase 1024 50000 random > "$f" 2> "$w/calibrate_$d.err"
	r calibrate D=$d rc=$? comp=$(field compensation_ns < "$f") measured=$(field measured_ns < "$f") zero=$(field zero_ns_per_load < "$f") delayed=$(field delayed_ns_per_load < "$f") loads=$(field loads < "$f")
done
cat "$XDG_CONFIG_HOME/bpftime-super/cxl-calibration.json" > "$w/calibration_used.json"
v=$(chase $cxl run $q --seq-ratio 1 --latency-ns 0 --); r chase comp=auto lat=0 ns=$v
for rep in ${REPS:-1 2 3}; do
	for l in 100 200 400 800 1600; do
		v=$(chase $cxl run $q --seq-ratio 1 --latency-ns $l --); r chase comp=auto rep=$rep lat=$l ns=$v
		v=$(chase $cxl run $q --seq-ratio 1 --compensate-ns 0 --latency-ns $l --); r chase comp=0 rep=$rep lat=$l ns=$v
	done
	v=$(chase); r chase comp=none lat=plain ns=$v
done
# The ratio check (random pays 2× sequential; full path: two classes) and the sequential
# chase's own plain step.
v=$(MODE=seq chase); r chase_seq comp=none lat=plain ns=$v
for c in auto 0; do
	comp=(); [ $c = 0 ] && comp=(--compensate-ns 0)
	for m in random seq; do
		v=$(MODE=$m chase $cxl run $q "${comp[@]}" --seq-ratio 2 --latency-ns 1600 --); r chase_ratio2 comp=$c mode=$m lat=1600 ns=$v
	done
done
for cap in 16 32 64; do
	v=$($cxl run --no-stats --no-kernel-time --latency-ns 0 --bandwidth-gbps $cap -- $b/stream 67108864 5 | val gbps); r stream_bw comp=auto cap=$cap gbps=$v
done
f="$w/stream_fixed_400.txt"
$cxl run $q --seq-ratio 1 --latency-ns 400 -- $b/stream 67108864 5 > "$f" 2>&1
r stream comp=auto lat=400 us=$(val kernel_us < "$f") ok=$(grep -c " ok " "$f")
echo "done" >> "$log"
