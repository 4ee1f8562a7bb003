#!/usr/bin/env bash
# Issue 13's device check: the five host-probe examples (api_errors, cumem_leak, memcpy_bw,
# sync_stalls, launch_profile) in one `trace --json --timeline` run of
# attach/tests/apps/known_calls.cu, whose allocations, copies, launches, synchronisations
# and one error are known; host_examples.py checks every count and the timeline. Then the
# same examples in text form, as a user sees them. Uses the binaries of scripts/gpu-carry
# (CARRY overrides).
#   OUT=dir bash bench/gpu/host_examples.sh
set -u
out=${OUT:?}; mkdir -p "$out"; d=${CARRY:-target/gpu-carry}
here="$(cd "$(dirname "$0")" && pwd)"
nvcc -O2 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 -Xlinker -export-dynamic \
	-o /tmp/known_calls attach/tests/apps/known_calls.cu -lcuda || exit 1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; } > "$out/device.txt"
/tmp/known_calls > "$out/plain.out" 2>&1; echo "plain rc $?"; cat "$out/plain.out"
progs=()
for p in api_errors cumem_leak memcpy_bw sync_stalls launch_profile; do progs+=("$d/$p.bpf.o"); done
"$d/bpftime-super" trace --interval 0 --json --timeline "$out/known_calls_timeline.json" --shim "$d/libbpftime_attach.so" \
	"${progs[@]}" -- /tmp/known_calls > "$out/host_examples.out" 2> "$out/host_examples.err"
echo "trace rc $?"; tail -3 "$out/host_examples.err"
"$d/bpftime-super" trace --interval 0 --shim "$d/libbpftime_attach.so" "${progs[@]}" -- /tmp/known_calls \
	> "$out/host_examples.txt" 2> "$out/host_examples_text.err"
echo "text rc $?"
python3 "$here/host_examples.py" "$out"
