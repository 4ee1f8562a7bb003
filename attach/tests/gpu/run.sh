#!/usr/bin/env bash
# On the GPU machine: builds the test apps with nvcc, runs each plain and under
# `bpftime-super trace`, and checks that the probes' counts equal the launches and threads
# each app really made and that its output is unchanged (check.py). Then the attach
# benchmarks (bench.py). Needs the binaries built on the dev machine (scripts/gpu-carry):
#   target/gpu-carry/{bpftime-super,libbpftime_attach.so,*.bpf.o}
#   bash attach/tests/gpu/run.sh OUTDIR [tests|bench|all|mem|mem-tests|mem-exact|mem-bench|mem-report|mem-ncu|host]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../../.." && pwd)"
out="$1"; what="${2:-all}"; mkdir -p "$out"
carry="$root/target/gpu-carry"; B="$carry/bpftime-super"; SHIM="$carry/libbpftime_attach.so"
apps=/tmp/bpftime-apps; mkdir -p "$apps"
cd "$root/attach/tests/apps"
G="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
build() { [ -x "$apps/$1" ] || nvcc -O2 $G "${@:2}" -o "$apps/$1" "$1.cu" 2>&1 | grep -v warning; }
for k in vecadd vecadd3 sgemm graph coop memtest stream launch_loop; do build $k; done
[ -x "$apps/vecadd_shared" ] || nvcc -O2 $G -cudart shared -o "$apps/vecadd_shared" vecadd.cu
[ -x "$apps/driver_api" ] || nvcc -O2 -arch=sm_90 -o "$apps/driver_api" driver_api.cu -lcuda
[ -x "$apps/load_time" ] || nvcc -O2 -arch=sm_90 -o "$apps/load_time" load_time.cu -lcuda
nvcc -ptx -arch=compute_90 -o "$apps/vecadd.ptx" vecadd.cu
nvcc -fatbin $G -o "$apps/vecadd.fatbin" vecadd.cu
cp numba_app.py cupy_app.py torch_app.py llm_cupy.py "$apps/"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; } > "$out/device.txt"
export B SHIM carry apps
[ -f "$carry/DejaVuSans.ttf" ] && export BPFTIME_FONT="$carry/DejaVuSans.ttf"
if [ "$what" = host ]; then
	python3 "$here/host.py" "$out" 2>&1 | tee "$out/host.log"
	exit 0
fi
if [ "$what" = mem ] || [ "$what" = mem-tests ] || [ "$what" = mem-exact ] || [ "$what" = mem-bench ] || [ "$what" = mem-report ] || [ "$what" = mem-ncu ]; then
	python3 "$here/mem.py" "$out" "$(echo "${what#mem}" | sed 's/^-//; s/^$/all/')" 2>&1 | tee "$out/mem.log"
	exit 0
fi
if [ "$what" != bench ]; then python3 "$here/check.py" "$out" 2>&1 | tee "$out/tests.log"; fi
if [ "$what" != tests ]; then python3 "$here/bench.py" "$out" 2>&1 | tee "$out/bench.log"; fi
if [ "$what" = all ] || [ "$what" = examples ]; then
	mkdir -p "$out/examples"
	for ex in kernel_count threadhist kernelretsnoop vecadd_args; do
		"$B" trace --shim "$SHIM" --interval 0 "$carry/$ex.bpf.o" -- "$apps/vecadd" 1048576 3 > "$out/examples/$ex.txt" 2>&1
		echo "== $ex: rc=$?"; head -c 1500 "$out/examples/$ex.txt"
	done
	"$B" trace --shim "$SHIM" --interval 0 "$carry/kernel_count.bpf.o" -- "$apps/graph" 100000 5 > "$out/examples/kernel_count_graph.txt" 2>&1
	# bpftime's own example, compiled from its source unchanged (scripts/gpu-carry, BPFTIME_SRC).
	if [ -f "$carry/bpftime_threadhist.bpf.o" ]; then
		"$B" trace --shim "$SHIM" --interval 0 "$carry/bpftime_threadhist.bpf.o" -- "$apps/vecadd3" 3 > "$out/examples/bpftime_threadhist.txt" 2>&1
		echo "== bpftime threadhist: rc=$?"; head -c 1500 "$out/examples/bpftime_threadhist.txt"
	fi
	"$B" trace --shim "$SHIM" --interval 0 "$carry/kernel_count.bpf.o" -- python3 "$apps/numba_app.py" > "$out/examples/kernel_count_numba.txt" 2>&1
fi
