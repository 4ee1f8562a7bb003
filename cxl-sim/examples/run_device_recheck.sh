#!/usr/bin/env bash
# Run 19 of bench/results/cxl_gpu.md: the live parameter change (as run_device_live.sh) and
# the CuPy decoder's output under the emulator, after the memory pass's ctx-point change
# (values read at the point, the body's registers renamed). One `R …` line per
# measurement in $OUT/cxl19/log.txt.
#   CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_recheck.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup cxl19 cxl-sim/examples/chase.cu
q="--no-stats --no-kernel-time"
# 2,000,000 steps a launch (about 0.7 s, 4 s in all), so that the changes land while
# the chase runs whether the app took 3 or 4 s to reach its first kernel.
for at in ${LIVE_AT:-3800 4200 4600}; do
	CHASE_SLOW_NS=2200 $cxl run $q --latency-ns 0 --no-cap --json --at ${at}ms:latency-ns=3200 -- $b/chase 1024 2000000 random 6 > "$w/live_$at.json" 2> "$w/live_$at.err"
	written=$(python3 -c "import json; print(json.load(open('$w/live_$at.json'))['changes'][0]['written_unix_ns'])" 2>/dev/null)
	seen=$(val first_unix_ns < "$w/live_$at.err"); unc=$(val uncertainty_ns < "$w/live_$at.err")
	r live at_ms=$at written_unix_ns=$written first_slow_unix_ns=$seen clock_uncertainty_ns=$unc delay_ns=$(python3 -c "print(${seen:-0} - ${written:-0})") $(grep -o "chase_slow launch=[0-9]* step=[0-9]*" "$w/live_$at.err" | head -1)
done
app=attach/tests/apps/llm_cupy.py
python3 $app 2 16 > "$w/llm_plain.txt" 2>&1
$cxl run $q --latency-ns 0 --no-cap -- python3 $app 2 16 > "$w/llm_zero.txt" 2>&1
$cxl run $q --preset direct-x8 -- python3 $app 2 16 > "$w/llm_x8.txt" 2>&1
for f in plain zero x8; do
	line=$(grep "^llm layers" "$w/llm_$f.txt" | tail -1)
	r llm cfg=$f checksum=$(echo "$line" | sed -n 's/.*checksum=\([^ ]*\).*/\1/p') tokens_md5=$(echo "$line" | sed -n 's/.*tokens=\(\[[^]]*\]\).*/\1/p' | md5sum | cut -c1-12)
done
echo "done" >> "$log"
