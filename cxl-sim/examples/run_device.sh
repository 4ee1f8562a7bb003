#!/usr/bin/env bash
# cxl-sim on the GPU machine, every validation and benchmark of issue 15 in one run.
# Needs target/gpu-carry (scripts/gpu-carry). Writes $OUT/cxl/log.txt (one `R name key=value…`
# line per measurement, read by cxl-sim/examples/summarize.py), the sweep's CSV and PNGs,
# and $OUT/cxl.tar.gz.
#   OUT=/tmp/o bash cxl-sim/examples/run_device.sh
set -u
out=${OUT:?}; w=$out/cxl; mkdir -p "$w"
log=$w/log.txt
carry=${CARRY:-target/gpu-carry}
cxl=$carry/bpftime-super-cxl
export BPFTIME_FONT=$PWD/$carry/DejaVuSans.ttf
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$w/device.txt"
nvcc --version | tail -2 >> "$w/device.txt"
b=/tmp/cxlbin; mkdir -p $b
# PTX beside the SASS: the memory pass instruments PTX.
gen="-gencode arch=compute_90,code=[sm_90,compute_90]"
for s in cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu cxl-sim/examples/timer_res.cu \
	attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu; do
	nvcc -O3 $gen -o $b/$(basename ${s%.cu}) $s 2>> "$w/nvcc.err" || echo "nvcc $s failed"
done
r() { echo "R $*" | tee -a "$log"; }
val() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" | tail -1; }

$b/timer_res | tee -a "$w/timer.txt"
r timer $(cat "$w/timer.txt")

# 1. Pointer chase: latency = local + Δt (1 GiB random cycle, one thread).
for rep in 1 2; do
	v=$($b/chase 1024 100000 random | val ns_per_step); r chase_plain rep=$rep ns=$v
	for l in 0 100 200 400; do
		v=$($cxl run --latency-ns $l --no-cap --no-stats --no-kernel-time -- $b/chase 1024 100000 random | val ns_per_step); r chase_cxl lat=$l rep=$rep ns=$v
	done
	v=$($cxl run --latency-ns 400 --no-cap -- $b/chase 1024 100000 random | val ns_per_step); r chase_cxl_stats_timed lat=400 rep=$rep ns=$v
	v=$($cxl run --latency-ns 200 --no-cap --no-stats --no-kernel-time --wait sleep -- $b/chase 1024 100000 random | val ns_per_step); r chase_cxl_sleep lat=200 rep=$rep ns=$v
	v=$($cxl run --latency-ns 200 --no-cap --no-stats --no-kernel-time --cache-mib 0 -- $b/chase 1024 100000 random | val ns_per_step); r chase_cxl_nocache lat=200 rep=$rep ns=$v
done
$cxl run --latency-ns 200 --no-cap -- $b/chase 1024 100000 random > "$w/chase_run.txt" 2>&1

# 2. Random against sequential: seq ratio 4 at 400 ns.
for mode in random seq; do
	v=$($b/chase 1024 100000 $mode | val ns_per_step); r ratio_plain mode=$mode ns=$v
	v=$($cxl run --latency-ns 0 --no-cap --no-stats --no-kernel-time -- $b/chase 1024 100000 $mode | val ns_per_step); r ratio_zero mode=$mode ns=$v
	v=$($cxl run --latency-ns 400 --seq-ratio 4 --no-cap --no-stats --no-kernel-time -- $b/chase 1024 100000 $mode | val ns_per_step); r ratio_cxl mode=$mode ns=$v
done

# 3. Streaming bandwidth from the tier = the cap (STREAM triad, 2^26 floats, 12 bytes/element).
v=$($b/stream 67108864 10 | val gbps); r stream_bw cap=none gbps=$v
for cap in 16 32 64; do
	v=$($cxl run --latency-ns 0 --bandwidth-gbps $cap --no-stats --no-kernel-time -- $b/stream 67108864 5 | val gbps); r stream_bw cap=$cap gbps=$v
done

# 4. The emulator's own cost (Δt = 0, no cap), alternating with the plain app. `zero`: the
# delay probe alone, no counters, no kernel timer; `zero-stats`: with the counters;
# `zero-timed`: with the kernel timer; `count`: direct-x8's bookkeeping (cap included)
# without waiting.
for rep in 1 2; do
	for app in "stream 67108864 10" "sgemm 4096 5" "gather 16777216 1024 5"; do
		name=${app%% *}
		v=$($b/$app | val kernel_us); r cost app=$name cfg=plain rep=$rep us=$v
		v=$($cxl run --latency-ns 0 --no-cap --no-stats --no-kernel-time -- $b/$app | val kernel_us); r cost app=$name cfg=zero rep=$rep us=$v
		v=$($cxl run --latency-ns 0 --no-cap --no-kernel-time -- $b/$app | val kernel_us); r cost app=$name cfg=zero-stats rep=$rep us=$v
		v=$($cxl run --latency-ns 0 --no-cap --no-stats -- $b/$app | val kernel_us); r cost app=$name cfg=zero-timed rep=$rep us=$v
		v=$($cxl run --preset direct-x8 --count-only --no-stats --no-kernel-time -- $b/$app | val kernel_us); r cost app=$name cfg=count rep=$rep us=$v
	done
done
for app in "stream 67108864 5" "sgemm 4096 3" "gather 16777216 1024 5"; do
	name=${app%% *}
	v=$($cxl run --preset direct-x8 --no-stats --no-kernel-time -- $b/$app | val kernel_us); r preset app=$name cfg=direct-x8 us=$v
	v=$($cxl run --preset direct-x8 --no-cap --no-stats --no-kernel-time -- $b/$app | val kernel_us); r preset app=$name cfg=direct-x8-nocap us=$v
done
$cxl run --preset direct-x8 --json -- $b/gather 16777216 1024 5 > "$w/gather_direct.json" 2>&1

# 5. A real workload: the CuPy decoding loop (NVRTC PTX kernels), plain and at direct-x8.
for cfg in plain zero direct-x8; do
	t0=$(date +%s.%N)
	case $cfg in
	plain) python3 attach/tests/apps/llm_cupy.py 2 16 > "$w/llm_$cfg.txt" 2>&1 ;;
	zero) $cxl run --latency-ns 0 --no-cap -- python3 attach/tests/apps/llm_cupy.py 2 16 > "$w/llm_$cfg.txt" 2>&1 ;;
	*) $cxl run --preset $cfg -- python3 attach/tests/apps/llm_cupy.py 2 16 > "$w/llm_$cfg.txt" 2>&1 ;;
	esac
	t1=$(date +%s.%N)
	r llm cfg=$cfg wall_s=$(python3 -c "print($t1 - $t0)") checksum=$(grep -o 'checksum=[^ ]*' "$w/llm_$cfg.txt" | cut -d= -f2)
done

# 6. A sweep with plots.
timeout 400 $cxl sweep --no-stats --latency 0,100,200,400,800 --bandwidth none,64 --out "$w/sweep" -- $b/gather 4194304 256 3 > "$w/sweep.txt" 2>&1
echo "sweep rc $?" | tee -a "$log"
tar czf "$out/cxl.tar.gz" -C "$out" cxl
