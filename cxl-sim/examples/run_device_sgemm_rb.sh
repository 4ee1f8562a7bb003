#!/usr/bin/env bash
# Run 43 of bench/results/cxl_gpu.md: the register-blocked SGEMM (sgemm_rb.cu, 128 x 128
# tiles, 8 x 8 outputs a thread, rasterised) against the 16 x 16-tile one, 4096², plain, at
# Δt = 0 with no cap (the emulator's own cost) and at the direct-x8 preset, alternating.
# One `R …` line per measurement in $OUT/cxl43/log.txt; one direct-x8 run's whole output
# (with the emulator's statistics) in $OUT/cxl43/x8_stats.txt. With SIZES (e.g. "8192
# 16384"), only sgemm_rb at those sizes, three launches each, and no statistics run.
#   CARRY=target/s25c OUT=/tmp/o bash cxl-sim/examples/run_device_sgemm_rb.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup cxl43 cxl-sim/examples/sgemm_rb.cu attach/tests/apps/sgemm.cu
cat "$w/nvcc.err" 2>/dev/null
q="--no-stats --no-kernel-time"
if [ -n "${SIZES:-}" ]; then
	for rep in ${REPS:-1}; do
		for s in $SIZES; do
			v=$($b/sgemm_rb $s 3 | val kernel_us); r cost app=sgemm_rb size=$s cfg=plain rep=$rep us=$v
			v=$($cxl run $q --latency-ns 0 --no-cap -- $b/sgemm_rb $s 3 | val kernel_us); r cost app=sgemm_rb size=$s cfg=zero rep=$rep us=$v
			v=$($cxl run $q --preset direct-x8 -- $b/sgemm_rb $s 3 | val kernel_us); r preset app=sgemm_rb size=$s cfg=direct-x8 rep=$rep us=$v
		done
	done
	echo "done" >> "$log"
	exit 0
fi
for rep in ${REPS:-1 2}; do
	for app in "sgemm_rb 4096 5" "sgemm 4096 5"; do
		name=${app%% *}
		v=$($b/$app | val kernel_us); r cost app=$name cfg=plain rep=$rep us=$v
		v=$($cxl run $q --latency-ns 0 --no-cap -- $b/$app | val kernel_us); r cost app=$name cfg=zero rep=$rep us=$v
		v=$($cxl run $q --preset direct-x8 -- $b/$app | val kernel_us); r preset app=$name cfg=direct-x8 rep=$rep us=$v
	done
done
$cxl run --preset direct-x8 -- $b/sgemm_rb 4096 3 > "$w/x8_stats.txt" 2>&1
r stats app=sgemm_rb cfg=direct-x8 us=$(val kernel_us < "$w/x8_stats.txt") ok=$(grep -c " ok " "$w/x8_stats.txt")
echo "done" >> "$log"
