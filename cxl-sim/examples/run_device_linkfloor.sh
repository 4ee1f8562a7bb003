#!/usr/bin/env bash
# Run 34 of bench/results/cxl_gpu.md: what a 4096² SGEMM asks of memory below the L2, next
# to what the emulator sent to the direct-x8 link in run 33 (795 MB a launch): ncu's DRAM
# bytes of one plain launch. Then SGEMM at Δt = 0 (split probe) against plain, three
# alternating repetitions, to re-check the ≤ 1.3× margin that run 33 read as 1.31×.
# One `R …` line per measurement in $OUT/cxl34/log.txt.
#   CARRY=target/gpu-carry OUT=/tmp/o bash cxl-sim/examples/run_device_linkfloor.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup cxl34 attach/tests/apps/sgemm.cu
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
$ncu --launch-count 1 --csv --print-units base --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum $b/sgemm 4096 1 > "$w/ncu_sgemm.csv" 2> "$w/ncu.err"
for m in dram__bytes_read.sum dram__bytes_write.sum lts__t_bytes.sum gpu__time_duration.sum; do
	r ncu app=sgemm metric=$m value=$(grep "\"$m\"" "$w/ncu_sgemm.csv" | head -1 | awk -F'","' '{gsub(/"/,"",$NF); print $NF}')
done
for rep in 1 2 3; do
	v=$($b/sgemm 4096 5 | val kernel_us); r cost app=sgemm cfg=plain rep=$rep us=$v
	v=$($cxl run --no-stats --no-kernel-time --latency-ns 0 --no-cap -- $b/sgemm 4096 5 | val kernel_us); r cost app=sgemm cfg=split rep=$rep us=$v
done
echo "done" >> "$log"
