#!/usr/bin/env bash
# Issue 18 rows a and e on the GPU machine, in one run. Writes everything into
# $OUT/row_e.tar.gz (the device tool returns few files):
#   gpu_fault.json: GPU fault -> next job served, warm standby vs a new worker;
#   fault_latency.jsonl: how long the driver takes to report a trap / an illegal address;
#   recover/: the CUDA-backend service killed and restarted with --recover;
#   shm_map_check.txt: array maps hold what the GPU wrote;
#   service/gpu_service.json: the service benchmark (rows a-h, the fault check).
set -u
out=${OUT:?}; w=$out/row_e; mkdir -p "$w"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$w/device.txt"
nvcc -O2 -arch=sm_90 -o /tmp/fault_latency bench/gpu/fault_latency.cu -lcuda 2> "$w/nvcc.err"
for m in trap trap trap illegal illegal illegal; do
	timeout 60 /tmp/fault_latency $m >> "$w/fault_latency.jsonl" 2>> "$w/fault_latency.err"
done
cat "$w/fault_latency.jsonl"
BPFTIME_LOG=warn OUT=$w timeout 240 target/gpu-carry/gpu_fault > /dev/null 2> "$w/gpu_fault.log"
echo "gpu_fault rc $?"
timeout 150 bash bench/gpu/recover.sh "$w/recover" > "$w/recover.out" 2>&1
echo "recover rc $?"
bash bench/gpu/shm_map_check.sh "$w" | tee "$w/shm_map_check.txt"
OUT=$w/service timeout 240 target/gpu-carry/gpu_service > /dev/null 2> "$w/gpu_service.log"
echo "gpu_service rc $?"
tar czf "$out/row_e.tar.gz" -C "$out" row_e
