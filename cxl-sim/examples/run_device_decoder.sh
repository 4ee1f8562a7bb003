#!/usr/bin/env bash
# Run 25 of bench/results/cxl_gpu.md: the CuPy decoder (NVRTC-compiled RawKernels) under
# the split probe that `cxl run` uses at Δt = 0 (run 23), against the plain run, the probe
# inlined whole (BPFTIME_COLD_SPLIT=0) and the direct-x8 preset: tokens and checksum must
# be equal. One `R …` line per run in $OUT/cxl25/log.txt (wall seconds include trace's
# start and the driver's compile of every instrumented kernel).
#   CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_decoder.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup cxl25
q="--no-stats --no-kernel-time"
app=attach/tests/apps/llm_cupy.py
for cfg in plain split inline x8; do
	t0=$(date +%s.%N)
	case $cfg in
	plain) python3 $app 2 16 > "$w/llm_$cfg.txt" 2>&1 ;;
	split) $cxl run $q --latency-ns 0 --no-cap -- python3 $app 2 16 > "$w/llm_$cfg.txt" 2>&1 ;;
	inline) BPFTIME_COLD_SPLIT=0 $cxl run $q --latency-ns 0 --no-cap -- python3 $app 2 16 > "$w/llm_$cfg.txt" 2>&1 ;;
	x8) $cxl run $q --preset direct-x8 -- python3 $app 2 16 > "$w/llm_$cfg.txt" 2>&1 ;;
	esac
	t1=$(date +%s.%N)
	line=$(grep "^llm layers" "$w/llm_$cfg.txt" | tail -1)
	r llm cfg=$cfg wall_s=$(python3 -c "print(round($t1 - $t0, 2))") checksum=$(echo "$line" | sed -n 's/.*checksum=\([^ ]*\).*/\1/p') tokens_md5=$(echo "$line" | sed -n 's/.*tokens=\(\[[^]]*\]\).*/\1/p' | md5sum | cut -c1-12)
done
echo "done" >> "$log"
