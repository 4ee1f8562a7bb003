#!/usr/bin/env bash
# Runs 29 and 30 of bench/results/cxl_gpu.md: a split-probe build (CARRY) against the build
# before (OLD) and the plain apps, alternating, three repetitions, at Δt = 0 with no cap and
# no statistics (what `cxl run` splits). Run 29: the bases of shared-memory loads kept out
# of the registers stored around the cold call (`224d38a`) against run 28's `3d58e7a` with
# BPFTIME_DEFER_LOADS=0 (`f4f5759`'s split path); run 30: r10 computed where named in the
# hot part against `224d38a` (measured and dropped). Then the CuPy decoder (tokens and checksum against plain),
# ncu's instruction count of one SGEMM launch, and (from run 30) the split probe past its
# first test: statistics at Δt = 0 with the probe split (BPFTIME_COLD_SPLIT=1), whose byte
# counts must equal the inlined probe's. One `R …` line per measurement in $OUT/$RUN/log.txt.
#   RUN=cxl30 CARRY=target/s24/gpu-carry OLD=target/s22/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_kept.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup ${RUN:-cxl29} attach/tests/apps/stream.cu attach/tests/apps/sgemm.cu cxl-sim/examples/gather.cu
old=${OLD:?}/bpftime-super-cxl
q="--no-stats --no-kernel-time --latency-ns 0 --no-cap"
for rep in 1 2 3; do
	for app in "sgemm 4096 5" "stream 67108864 10" "gather 16777216 1024 5"; do
		name=${app%% *}
		o=$($b/$app); r cost app=$name cfg=plain rep=$rep us=$(echo "$o" | val kernel_us) sum=$(echo "$o" | val checksum)
		o=$(BPFTIME_DEFER_LOADS=0 $old run $q -- $b/$app); r cost app=$name cfg=old rep=$rep us=$(echo "$o" | val kernel_us) sum=$(echo "$o" | val checksum)
		o=$($cxl run $q -- $b/$app); r cost app=$name cfg=new rep=$rep us=$(echo "$o" | val kernel_us) sum=$(echo "$o" | val checksum)
	done
done
app=attach/tests/apps/llm_cupy.py
for cfg in plain new; do
	case $cfg in
	plain) python3 $app 2 16 > "$w/llm_$cfg.txt" 2>&1 ;;
	new) $cxl run $q -- python3 $app 2 16 > "$w/llm_$cfg.txt" 2>&1 ;;
	esac
	line=$(grep "^llm layers" "$w/llm_$cfg.txt" | tail -1)
	r llm cfg=$cfg checksum=$(echo "$line" | sed -n 's/.*checksum=\([^ ]*\).*/\1/p') tokens_md5=$(echo "$line" | sed -n 's/.*tokens=\(\[[^]]*\]\).*/\1/p' | md5sum | cut -c1-12)
done
S="--print-units base --section SpeedOfLight --section Occupancy --section LaunchStats --metrics smsp__inst_executed.sum"
for cfg in old new; do
	case $cfg in
	old) BPFTIME_DEFER_LOADS=0 timeout 200 ncu --target-processes all -k regex:sgemm --launch-skip 1 -c 1 $S --csv $old run $q -- $b/sgemm 4096 2 > "$w/ncu_$cfg.csv" 2> "$w/ncu_$cfg.err" ;;
	new) timeout 200 ncu --target-processes all -k regex:sgemm --launch-skip 1 -c 1 $S --csv $cxl run $q -- $b/sgemm 4096 2 > "$w/ncu_$cfg.csv" 2> "$w/ncu_$cfg.err" ;;
	esac
	r ncu app=sgemm cfg=$cfg inst=$(grep -m1 '"smsp__inst_executed.sum"' "$w/ncu_$cfg.csv" | awk -F'","' '{print $NF}' | tr -d '",') regs=$(grep -m1 '"Registers Per Thread"' "$w/ncu_$cfg.csv" | awk -F'","' '{print $NF}' | tr -d '",') duration_ns=$(grep -m1 '"Duration"' "$w/ncu_$cfg.csv" | awk -F'","' '{print $NF}' | tr -d '",')
done
for app in "sgemm 1024 2" "stream 16777216 2"; do
	name=${app%% *}
	for cfg in inline split; do
		f="$w/stats_${name}_$cfg.txt"
		case $cfg in
		inline) BPFTIME_COLD_SPLIT=0 $cxl run --no-kernel-time --latency-ns 0 --no-cap -- $b/$app > "$f" 2>&1 ;;
		split) BPFTIME_COLD_SPLIT=1 $cxl run --no-kernel-time --latency-ns 0 --no-cap -- $b/$app > "$f" 2>&1 ;;
		esac
		# `tier accesses (warp requests): N, B bytes; …`
		bytes=$(sed -n 's/.*tier accesses (warp requests): [0-9]*, \([0-9]*\) bytes.*/\1/p' "$f")
		r stats app=$name cfg=$cfg bytes=$bytes sum=$(val checksum < "$f")
	done
done
echo "done" >> "$log"
