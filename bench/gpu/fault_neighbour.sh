#!/usr/bin/env bash
# Runs fault_neighbour (3 s) alone, then again while fault_latency traps 1 s into it.
set -u
out=${OUT:?}; mkdir -p "$out"
nvcc -O2 -arch=sm_90 -o /tmp/fault_latency bench/gpu/fault_latency.cu -lcuda
nvcc -O2 -arch=sm_90 -o /tmp/fault_neighbour bench/gpu/fault_neighbour.cu
for i in 1 2 3; do
	echo "alone: $(/tmp/fault_neighbour 3)"
	/tmp/fault_neighbour 3 > /tmp/nb.json & nb=$!
	sleep 1; f=$(/tmp/fault_latency trap); wait $nb
	echo "with a fault: $(cat /tmp/nb.json) fault: $f"
done | tee "$out/fault_neighbour.txt"
