#!/usr/bin/env bash
# Host-probe cost per intercepted driver call, on any machine (no GPU): `launch_loop` calls
# the fake driver's cuLaunchKernel 1,000,000 times, plain and under `bpftime-super trace`
# with no programs, --api-log, an empty uprobe on cuLaunchKernel and a counting one
# (bench/probes/uprobe_{empty,count}.bpf.c), launches numbered for a uprobe reading the
# correlation id (tests/programs/uprobe_corr.bpf.c), and a kernel `k` loaded from PTX whose
# probe reads the launch fields (examples/launchlate.bpf.c: hidden parameters appended at each
# launch; maps host-mapped: the fake emulates a launch by touching every device allocation)
# next to the same kernel plain; configurations alternate, 7 repetitions, the
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
for p in bench/probes/uprobe_empty bench/probes/uprobe_count tests/programs/uprobe_corr examples/launchlate; do
	clang -O2 -g -target bpf -Wall -Werror -I/usr/include/x86_64-linux-gnu -Iinclude \
		-c "$p.bpf.c" -o "$d/$(basename "$p").bpf.o"
done
printf '.version 8.0\n.target sm_70\n.address_size 64\n\n.visible .entry k(\n\t.param .u64 k_a,\n\t.param .u32 k_b\n)\n{\n\tret;\n}\n' > "$d/k.ptx"
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
	5) "${T[@]}" "$d/uprobe_corr.bpf.o" -- "$d/launch_loop" ;;
	6) "$d/launch_loop" "$d/k.ptx" ;;
	7) "${T[@]}" --maps host "$d/launchlate.bpf.o" -- "$d/launch_loop" "$d/k.ptx" ;;
	esac
}
declare -A s
for rep in 1 2 3 4 5 6 7; do
	for c in 0 1 2 3 4 5 6 7; do
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
python3 - "$(uname -m)" "$(nproc)" "$(git rev-parse --short HEAD)" "${s[0]}" "${s[1]}" "${s[2]}" "${s[3]}" "${s[4]}" "${s[5]}" "${s[6]}" "${s[7]}" <<'PY'
import json, statistics, sys, datetime
arch, cores, commit, *cols = sys.argv[1:]
names = ["plain", "trace, no programs", "trace --api-log", "empty uprobe on cuLaunchKernel", "counting uprobe (hash map by function)",
         "numbered launches (uprobe reading correlation_id)", "plain, kernel k from PTX", "hidden launch parameters (launchlate on k)"]
samples = [[float(x) for x in c.split()] for c in cols]
base = statistics.median(samples[0])
rows = []
for n, s in zip(names, samples):
    m = statistics.median(s)
    # The hidden-parameter row is compared with the same kernel launched plain.
    b = statistics.median(samples[6]) if n.startswith("hidden") else base
    rows.append({"config": n, "ns_per_call_median": m, "samples": s, "added_ns": m - b, "ratio": m / b})
    print(f"{n:52} {m:8.1f} ns/call  +{m - b:7.1f} ns  x{m / b:7.2f}")
doc = {"machine": f"{arch}, {cores} cores (the dev/CI machine, no GPU)", "date": datetime.date.today().isoformat(),
       "commit": commit, "driver": "the fake libcuda of host/tests/fake_cuda (its cuLaunchKernel returns at once)",
       "how": "bash bench/host_probe/run.sh", "rows": rows}
json.dump(doc, open("bench/results/host_probe.json", "w"), indent=1)
PY
