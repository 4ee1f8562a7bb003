#!/usr/bin/env bash
# On the GPU machine: correlation ids, launch times and the one clock on real programs
# (issue 10's launchlate, issue 13's calibration and timeline). Needs, in $CARRY (default
# target/launch-carry): bpftime-super, libbpftime_attach.so, launchlate.bpf.o,
# launch_profile.bpf.o. Writes every output into OUT and a summary (launch_clock.py).
#   bash attach/tests/gpu/launch_clock.sh OUT
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../../.." && pwd)"
out="$1"; mkdir -p "$out"
carry="${CARRY:-$root/target/launch-carry}"; B="$carry/bpftime-super"; SHIM="$carry/libbpftime_attach.so"
apps=/tmp/bpftime-apps; mkdir -p "$apps"; cd "$root/attach/tests/apps"
G="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
for k in vecadd graph coop tick; do [ -x "$apps/$k" ] || nvcc -O2 $G -o "$apps/$k" "$k.cu" 2>&1 | grep -v warning; done
[ -x "$apps/vecadd_shared" ] || nvcc -O2 $G -cudart shared -o "$apps/vecadd_shared" vecadd.cu
[ -x "$apps/driver_api" ] || nvcc -O2 -arch=sm_90 -o "$apps/driver_api" driver_api.cu -lcuda
nvcc -ptx -arch=compute_90 -o "$apps/vecadd.ptx" vecadd.cu
nvcc -fatbin $G -o "$apps/vecadd.fatbin" vecadd.cu
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; } > "$out/device.txt"
T() { "$B" trace --shim "$SHIM" "$@"; }
if [ "${2:-}" = bench ]; then
	# Cost of numbering and timing launches: launch_loop's ns per launch, plain, under trace
	# with no program, with launchlate (hidden parameters + a probe) and with --timeline,
	# interleaved, 3 rounds.
	[ -x "$apps/launch_loop" ] || nvcc -O2 $G -o "$apps/launch_loop" launch_loop.cu
	for r in 1 2 3; do
		for mode in plain none launchlate timeline; do
			case $mode in
			plain) "$apps/launch_loop" 100000 ;;
			none) T --interval 0 -q -- "$apps/launch_loop" 100000 ;;
			launchlate) T --interval 0 -q "$carry/launchlate.bpf.o" -- "$apps/launch_loop" 100000 ;;
			timeline) T --interval 0 -q --timeline /tmp/tl.json -- "$apps/launch_loop" 100000 ;;
			esac 2>/dev/null | grep -o 'ns_per_launch=[0-9.]*' | sed "s/^/round=$r mode=$mode /"
		done
	done | tee "$out/launch_bench.txt"
	exit 0
fi
run() { name=$1; shift; echo "== $name: $*"; "$@" > "$out/$name.out" 2> "$out/$name.err"; echo "rc=$?" >> "$out/$name.err"; tail -3 "$out/$name.out"; }
run vecadd_plain "$apps/vecadd" 1048576 200
run vecadd_launchlate T --interval 0 --json "$carry/launchlate.bpf.o" -- "$apps/vecadd" 1048576 200
run vecadd_launchlate_text T --interval 0 "$carry/launchlate.bpf.o" -- "$apps/vecadd" 1048576 200
run vecadd_timeline T --interval 0 --json --timeline "$out/vecadd_timeline.json" -- "$apps/vecadd" 1048576 200
run vecadd_profile T --interval 0 "$carry/launch_profile.bpf.o" -- "$apps/vecadd" 1048576 200
run shared_launchlate T --interval 0 --json "$carry/launchlate.bpf.o" -- "$apps/vecadd_shared" 1048576 50
run driver_plain "$apps/driver_api" "$apps/vecadd.ptx" "$apps/vecadd.fatbin"
run driver_launchlate T --interval 0 --json "$carry/launchlate.bpf.o" -- "$apps/driver_api" "$apps/vecadd.ptx" "$apps/vecadd.fatbin"
run driver_timeline T --interval 0 --json --timeline "$out/driver_timeline.json" -- "$apps/driver_api" "$apps/vecadd.ptx" "$apps/vecadd.fatbin"
run graph_plain "$apps/graph" 100000 5
run graph_launchlate T --interval 0 --json "$carry/launchlate.bpf.o" -- "$apps/graph" 100000 5
run graph_timeline T --interval 0 --json --timeline "$out/graph_timeline.json" -- "$apps/graph" 100000 5
run coop_plain "$apps/coop"
run coop_launchlate T --interval 0 --json "$carry/launchlate.bpf.o" -- "$apps/coop"
run tick_plain "$apps/tick" 3 10
run tick_timeline T --interval 1s --json --timeline "$out/tick_timeline.json" "$carry/launchlate.bpf.o" -- "$apps/tick" 12 10
python3 "$here/launch_clock.py" "$out" 2>&1 | tee "$out/summary.txt"
