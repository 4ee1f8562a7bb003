#!/bin/bash
# Row f (and g) of bench/src/bin/gpu_service.rs with host gaps on and off, alternating, in
# one device call: the time no backend takes jobs during a swap, the GPU's own pause, and
# the client's round trips meanwhile.
#
#   BIN=dir-with-bpftime-super-and-gpu_service bench/gpu/host_gaps.sh [PAIRS] [ROWS] [MODES]
#
# MODES (default "on off"): any of on, off, on-standby and off-standby (the last two start
# row f only once the warm standby worker is ready).
#
# Writes $OUT/gaps_{on,off}_N.json and $OUT/tables.txt (each run's rows); the runs' own
# directories stay in $WORK.
set -u -o pipefail
BIN=${BIN:-target/release}
OUT=${OUT:-/tmp/host_gaps}
WORK=${WORK:-/tmp/host_gaps_work}
mkdir -p "$OUT"
PAIRS=${1:-2}
ROWS=${2:-f,g}
MODES=${3:-on off}
here=$(dirname "$0")
rc=0
for i in $(seq 1 "$PAIRS"); do
    for mode in $MODES; do
        o="$WORK/gaps_${mode}_$i"
        mkdir -p "$o"
        case $mode in on*) g=1 ;; *) g=0 ;; esac
        case $mode in *-standby) w=1 ;; *) w=0 ;; esac
        BPFTIME_BENCH_WAIT_STANDBY=$w BPFTIME_GPU_HOST_GAPS=$g BIN="$BIN" OUT="$o" bash "$here/service.sh" "$ROWS" > "$o/table.txt" 2>&1 || rc=1
        cp "$o/gpu_service.json" "$OUT/gaps_${mode}_$i.json" 2>/dev/null
        {
            echo "== host gaps $mode, run $i"
            grep -E '^\| [fg] ' "$o/table.txt" || tail -20 "$o/table.txt"
        } | tee -a "$OUT/tables.txt"
    done
done
exit $rc
