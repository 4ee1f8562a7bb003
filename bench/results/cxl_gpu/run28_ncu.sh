#!/bin/bash
# Where the split probe's Δt = 0 cost goes on SGEMM (run 28): ncu on the plain kernel, on
# `cxl run`'s split build (the blocks at the loads, as committed), and on run 27b's blocks
# at the barrier (BPFTIME_DEFER_LOADS unset with run 27b's binaries): registers, occupancy,
# instructions, warp stall reasons. Binaries of 3d58e7a in target/s21/gpu-carry.
export PATH=$PATH:/usr/local/cuda/bin
g=target/s21/gpu-carry
nvcc -O3 -gencode arch=compute_90,code=[sm_90,compute_90] -o /tmp/sgemm attach/tests/apps/sgemm.cu || exit 1
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section InstructionStats --metrics smsp__inst_executed.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
q="--latency-ns 0 --no-cap --no-stats --no-kernel-time"
timeout 150 ncu --target-processes all -k regex:sgemm --launch-skip 1 -c 1 $S --csv /tmp/sgemm 4096 2 > $OUT/plain.csv 2> $OUT/plain.err; echo "plain rc $?"
BPFTIME_DEFER_LOADS=0 timeout 200 ncu --target-processes all -k regex:sgemm --launch-skip 1 -c 1 $S --csv $g/bpftime-super-cxl run $q -- /tmp/sgemm 4096 2 > $OUT/at_load.csv 2> $OUT/at_load.err; echo "at_load rc $?"
timeout 200 ncu --target-processes all -k regex:sgemm --launch-skip 1 -c 1 $S --csv $g/bpftime-super-cxl run $q -- /tmp/sgemm 4096 2 > $OUT/deferred.csv 2> $OUT/deferred.err; echo "deferred rc $?"
for f in $OUT/*.csv; do echo "== $f"; grep -E '"(Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Duration|Executed Instructions|Warp Cycles Per Issued Instruction|Issued Warp Per Scheduler|smsp__inst_executed.sum|smsp__average_warps_issue_stalled)' $f | awk -F'","' '{print $(NF-2)" | "$(NF-1)" | "$NF}' | head -60; done
tail -2 $OUT/*.err
