#!/bin/bash
# Where the emulator's Δt = 0 cost goes: ncu on the plain and the instrumented STREAM triad
# and SGEMM (registers, occupancy, throughput, warp stalls).
export PATH=$PATH:/usr/local/cuda/bin
tar -xJf target/s18/bins.tar.xz -C target
g=target/gpu-carry
gen="-gencode arch=compute_90,code=[sm_90,compute_90]"
nvcc -O3 $gen -o /tmp/stream attach/tests/apps/stream.cu &
nvcc -O3 $gen -o /tmp/sgemm attach/tests/apps/sgemm.cu &
wait
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
for app in "stream 67108864 3:triad" "sgemm 4096 2:sgemm"; do
	a=${app%%:*}; k=${app##*:}; n=${a%% *}
	timeout 120 ncu --target-processes all -k regex:$k --launch-skip 1 -c 1 $S --csv /tmp/$a > $OUT/${n}_plain.csv 2> $OUT/${n}_plain.err
	echo "$n plain rc $?"
	timeout 150 ncu --target-processes all -k regex:$k --launch-skip 1 -c 1 $S --csv $g/bpftime-super-cxl run --latency-ns 0 --no-cap --no-stats --no-kernel-time -- /tmp/$a > $OUT/${n}_cxl.csv 2> $OUT/${n}_cxl.err
	echo "$n cxl rc $?"
done
for f in $OUT/*.csv; do echo "== $f"; grep -E '"(Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Warp Cycles Per Issued Instruction|Issued Warp Per Scheduler|Block Limit Registers|Kernel Name)"' $f | awk -F'","' '{print $5" | "$(NF-2)" | "$NF}' | head -20; done
tail -3 $OUT/*.err
