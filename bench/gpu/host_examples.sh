#!/usr/bin/env bash
# The host-probe examples on the real driver (issue 13): api_errors and cumem_leak on
# attach/tests/apps/leak.cu, whose allocations and one error are known. Uses the binaries
# of scripts/gpu-carry. Prints the final maps and PASS/FAIL per check.
set -u
out=${OUT:?}; mkdir -p "$out"; d=target/gpu-carry
nvcc -O2 -arch=sm_90 -Xlinker -export-dynamic -o /tmp/leak attach/tests/apps/leak.cu -lcuda || exit 1
"$d/bpftime-super" trace --interval 0 --shim "$d/libbpftime_attach.so" \
	"$d/api_errors.bpf.o" "$d/cumem_leak.bpf.o" -- /tmp/leak > "$out/host_examples.txt" 2> "$out/host_examples.err"
echo "rc $?"; cat "$out/host_examples.txt"; tail -3 "$out/host_examples.err"
check() { if grep -qE "$2" "$out/host_examples.txt"; then echo "PASS $1"; else echo "FAIL $1"; fi; }
check "api_errors: cuMemFree_v2 failed once with 1" '^@errors\[cuMemFree_v2, 1\]: 1$'
# The first frames are in the CUDA runtime (linked statically: no names), then ours.
check "cumem_leak: 2 MiB outstanding from keep_buffers" '^@outstanding_bytes\[.*keep_buffers\+0x[0-9a-f]+, main\+.*\]: 2097152$'
check "cumem_leak: 4000 bytes from keep_table" '^@outstanding_bytes\[.*keep_table\+0x[0-9a-f]+, main\+.*\]: 4000$'
check "cumem_leak: 2 allocations from keep_buffers" '^@outstanding_allocs\[.*keep_buffers\+.*\]: 2$'
check "cumem_leak: 1 allocation from keep_table" '^@outstanding_allocs\[.*keep_table\+.*\]: 1$'
n=$(grep -c "^@outstanding_bytes\[" "$out/host_examples.txt"); [ "$n" = 2 ] && echo "PASS cumem_leak: exactly 2 leaking stacks" || echo "FAIL cumem_leak: $n leaking stacks"
