#!/usr/bin/env bash
# The delay probe with the configuration refresh (in a window of every 131 µs an SM's first
# tier access fences, bpf_membar_gpu, which drops the SM's L1): a parameter change while the
# chase runs (as run_device_live.sh), pointer-chase latency against Δt (as
# run_device_final.sh), and the emulator's cost at Δt = 0. Also whether each fence drops the SM's L1
# (the SASS has `CCTL.IVALL`). One `R …` line per measurement in $OUT/cxl6/log.txt.
# VARIANTS="name=probe.o …" also measures the chase and the cost with those builds of
# bpf/cxl.bpf.c (`cxl run --object`), alternating with the embedded probe ("embedded").
#   OUT=/tmp/o bash cxl-sim/examples/run_device_refresh.sh   (needs scripts/gpu-carry's output)
set -u
out=${OUT:?}; w=$out/cxl6; mkdir -p "$w"; log=$w/log.txt
carry=${CARRY:-target/gpu-carry}; cxl=$carry/bpftime-super-cxl
b=/tmp/cxlbin; mkdir -p $b
gen="-gencode arch=compute_90,code=[sm_90,compute_90]"
for s in cxl-sim/examples/chase.cu cxl-sim/examples/gather.cu attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu; do
	nvcc -O3 $gen -o $b/$(basename ${s%.cu}) $s 2>> "$w/nvcc.err" || echo "nvcc $s failed"
done
r() { echo "R $*" | tee -a "$log"; }
val() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" | tail -1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$w/device.txt"
# Which fences drop L1: the SASS of one load, the fence, the same load again.
for f in "membar.sys" "fence.acq_rel.gpu" "fence.acq_rel.sys" "ld.acquire.gpu.global.u64 %a3, [%a0+16]"; do
	cat > /tmp/fence.ptx <<EOF
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 p) {
	.reg .u64 %a<5>;
	ld.param.u64 %a0, [p];
	ld.global.u64 %a1, [%a0];
	$f;
	ld.global.u64 %a2, [%a0];
	add.u64 %a4, %a1, %a2;
	st.global.u64 [%a0+8], %a4;
	ret;
}
EOF
	n=${f%% *}; ptxas -arch=sm_90 -o /tmp/fence.cubin /tmp/fence.ptx && cuobjdump -sass /tmp/fence.cubin > "$w/sass_${n//[^a-z_]/_}.txt"
	r fence what=$n sass="$(grep -oE '(LDG|MEMBAR|FENCE|CCTL|ERRBAR)[.A-Z_0-9]*' "$w/sass_${n//[^a-z_]/_}.txt" | tr '\n' ',')"
done
q="--no-stats --no-kernel-time"
# A change of latency 0 → 3200 ns while the chase's launches run (as run 5 of cxl_gpu.md).
for at in ${LIVE_AT:-3800 4200 4600 5000}; do
	CHASE_SLOW_NS=2200 $cxl run $q --latency-ns 0 --no-cap --json --at ${at}ms:latency-ns=3200 -- $b/chase 1024 400000 random 6 > "$w/live_$at.json" 2> "$w/live_$at.err"
	written=$(python3 -c "import json; print(json.load(open('$w/live_$at.json'))['changes'][0]['written_unix_ns'])" 2>/dev/null)
	seen=$(val first_unix_ns < "$w/live_$at.err"); unc=$(val uncertainty_ns < "$w/live_$at.err")
	where=$(grep -o "chase_slow launch=[0-9]* step=[0-9]*" "$w/live_$at.err" | head -1)
	r live at_ms=$at written_unix_ns=$written first_slow_unix_ns=$seen clock_uncertainty_ns=$unc delay_ns=$(python3 -c "print(${seen:-0} - ${written:-0})") "$where"
done
# Pointer-chase latency against Δt, and the emulator's cost at Δt = 0, alternating the
# probe builds.
objs="embedded= ${VARIANTS:-}"
for rep in $(seq ${CHASE_REPS:-2}); do
	v=$($b/chase 1024 50000 random | val ns_per_step); r chase rep=$rep probe=none lat=plain ns=$v
	for o in $objs; do
		name=${o%%=*}; file=${o#*=}; obj=${file:+--object $file}
		for l in ${CHASE_LAT:-0 100 200 400 800 1600}; do
			v=$($cxl run $q $obj --latency-ns $l --no-cap -- $b/chase 1024 50000 random | val ns_per_step); r chase rep=$rep probe=$name lat=$l ns=$v
		done
	done
done
for rep in $(seq ${COST_REPS:-2}); do
	for app in "stream 67108864 10" "sgemm 4096 5" "gather 16777216 1024 5"; do
		name=${app%% *}
		v=$($b/$app | val kernel_us); r cost app=$name probe=none cfg=plain rep=$rep us=$v
		for o in $objs; do
			pn=${o%%=*}; file=${o#*=}; obj=${file:+--object $file}
			v=$($cxl run $q $obj --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name probe=$pn cfg=zero rep=$rep us=$v
		done
	done
done
