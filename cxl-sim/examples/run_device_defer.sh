#!/usr/bin/env bash
# Run 27 of bench/results/cxl_gpu.md: the split probe's load blocks moved to the block
# barrier (`jit::passes::defer`). At Δt = 0 with no cap and no statistics (what `cxl run`
# splits), alternating: the plain app, the blocks at their loads (BPFTIME_DEFER_LOADS=0,
# run 23's code), at the barrier (the default), and at the barrier uncapped
# (BPFTIME_REG_CAP=0). Then the same accesses counted with statistics, split and deferred
# (BPFTIME_COLD_SPLIT=1) against the probe inlined at each load (BPFTIME_COLD_SPLIT=0):
# the counts must be equal. Then the CuPy decoder: tokens and checksum must equal the plain
# run's. One `R …` line per measurement in $OUT/cxl27/log.txt.
#   CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_defer.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup cxl27 attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu cxl-sim/examples/gather.cu
q="--no-stats --no-kernel-time"
for rep in 1 2 3; do
	for app in "sgemm 4096 5" "stream 67108864 10" "gather 16777216 1024 5"; do
		name=${app%% *}
		o=$($b/$app); r cost app=$name cfg=plain rep=$rep us=$(echo "$o" | val kernel_us) sum=$(echo "$o" | val checksum)
		o=$(BPFTIME_DEFER_LOADS=0 $cxl run $q --latency-ns 0 --no-cap -- $b/$app); r cost app=$name cfg=at_load rep=$rep us=$(echo "$o" | val kernel_us) sum=$(echo "$o" | val checksum)
		o=$($cxl run $q --latency-ns 0 --no-cap -- $b/$app); r cost app=$name cfg=deferred rep=$rep us=$(echo "$o" | val kernel_us) sum=$(echo "$o" | val checksum)
		o=$(BPFTIME_REG_CAP=0 $cxl run $q --latency-ns 0 --no-cap -- $b/$app); r cost app=$name cfg=deferred_uncapped rep=$rep us=$(echo "$o" | val kernel_us) sum=$(echo "$o" | val checksum)
	done
done
# The same accesses seen: statistics at Δt = 0, inlined at the loads against split and
# deferred, and split at the loads.
for cfg in inline deferred at_load; do
	case $cfg in
	inline) env="BPFTIME_COLD_SPLIT=0" ;;
	deferred) env="BPFTIME_COLD_SPLIT=1" ;;
	at_load) env="BPFTIME_COLD_SPLIT=1 BPFTIME_DEFER_LOADS=0" ;;
	esac
	env $env $cxl run --no-kernel-time --latency-ns 0 --no-cap -- $b/sgemm 1024 2 > "$w/stats_$cfg.txt" 2>&1
	acc=$(grep "tier accesses" "$w/stats_$cfg.txt" | sed 's/[,;]//g')
	r stats app=sgemm1024 cfg=$cfg accesses=$(echo "$acc" | awk '{print $4}') bytes=$(echo "$acc" | awk '{print $5}') sum=$(val checksum < "$w/stats_$cfg.txt")
done
app=attach/tests/apps/llm_cupy.py
for cfg in plain deferred at_load; do
	case $cfg in
	plain) python3 $app 2 16 > "$w/llm_$cfg.txt" 2>&1 ;;
	deferred) $cxl run $q --latency-ns 0 --no-cap -- python3 $app 2 16 > "$w/llm_$cfg.txt" 2>&1 ;;
	at_load) BPFTIME_DEFER_LOADS=0 $cxl run $q --latency-ns 0 --no-cap -- python3 $app 2 16 > "$w/llm_$cfg.txt" 2>&1 ;;
	esac
	line=$(grep "^llm layers" "$w/llm_$cfg.txt" | tail -1)
	r llm cfg=$cfg checksum=$(echo "$line" | sed -n 's/.*checksum=\([^ ]*\).*/\1/p') tokens_md5=$(echo "$line" | sed -n 's/.*tokens=\(\[[^]]*\]\).*/\1/p' | md5sum | cut -c1-12)
done
echo "done" >> "$log"
