#!/usr/bin/env bash
# Host-probe cost per intercepted driver call, on any machine (no GPU): `launch_loop` calls
# the fake driver's cuLaunchKernel 1,000,000 times, plain and under `bpftime-super trace`
# with no programs, --api-log, an empty uprobe on cuLaunchKernel and a counting one
# (bench/probes/uprobe_{empty,count}.bpf.c); configurations alternate, 7 repetitions, the
# median of each is printed next to the plain run's. Writes bench/results/host_probe.json.
#   bash bench/host_probe/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -q -p host -p attach-shim
B=target/release/bpftime-super; SHIM=target/release/libbpftime_attach.so
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o "$d/libcuda.so.1" host/tests/fake_cuda/fake_cuda.c
ln -s libcuda.so.1 "$d/libcuda.so"
cc -O2 -o "$d/launch_loop" bench/host_probe/launch_loop.c -L"$d" -lcuda
for p in uprobe_empty uprobe_count; do
	clang -O2 -g -target bpf -Wall -Werror -I/usr/include/x86_64-linux-gnu -Iinclude \
		-c "bench/probes/$p.bpf.c" -o "$d/$p.bpf.o"
done
export LD_LIBRARY_PATH="$d"
T=("$B" trace --interval 0 --json --shim "$SHIM")
names=("plain" "trace, no programs" "trace --api-log" "empty uprobe" "counting uprobe")
run() {
	case "$1" in
	0) "$d/launch_loop" ;;
	1) "${T[@]}" -- "$d/launch_loop" ;;
	2) rm -f "$d/api.log"; "${T[@]}" --api-log "$d/api.log" -- "$d/launch_loop" ;;
	3) "${T[@]}" "$d/uprobe_empty.bpf.o" -- "$d/launch_loop" ;;
	4) "${T[@]}" "$d/uprobe_count.bpf.o" -- "$d/launch_loop" ;;
	esac
}
declare -A s
for rep in 1 2 3 4 5 6 7; do
	for c in 0 1 2 3 4; do
		out=$(run $c)
		v=$(echo "$out" | sed -n 's/.*ns_per_call=\([0-9.]*\).*/\1/p')
		s[$c]="${s[$c]:-} $v"
		if [ "$c" = 4 ] && [ "$rep" = 1 ]; then
			echo "$out" | grep -q '"uprobe_count:launches"' || { echo "counting probe printed no map" >&2; exit 1; }
			echo "$out" | grep '"uprobe_count:launches"' | grep -q '"value":\[1000000\]' ||
				{ echo "counting probe: expected 1000000 launches: $out" >&2; exit 1; }
		fi
	done
done
python3 - "$(uname -m)" "$(nproc)" "$(git rev-parse --short HEAD)" "${s[0]}" "${s[1]}" "${s[2]}" "${s[3]}" "${s[4]}" <<'PY'
import json, statistics, sys, datetime
arch, cores, commit, *cols = sys.argv[1:]
names = ["plain", "trace, no programs", "trace --api-log", "empty uprobe on cuLaunchKernel", "counting uprobe (hash map by function)"]
samples = [[float(x) for x in c.split()] for c in cols]
base = statistics.median(samples[0])
rows = []
for n, s in zip(names, samples):
    m = statistics.median(s)
    rows.append({"config": n, "ns_per_call_median": m, "samples": s, "added_ns": m - base, "ratio": m / base})
    print(f"{n:40} {m:8.1f} ns/call  +{m - base:7.1f} ns  x{m / base:7.2f}")
doc = {"machine": f"{arch}, {cores} cores (the dev/CI machine, no GPU)", "date": datetime.date.today().isoformat(),
       "commit": commit, "driver": "the fake libcuda of host/tests/fake_cuda (its cuLaunchKernel returns at once)",
       "how": "bash bench/host_probe/run.sh", "rows": rows}
json.dump(doc, open("bench/results/host_probe.json", "w"), indent=1)
PY
