#!/usr/bin/env bash
# Host-probe cost per call of an ordinary library function, on any machine (no GPU):
# `sym_loop` calls libbpftsym.so's sym_add 1,000,000 times through the PLT, plain and under
# `bpftime-super trace` with no programs, an empty uprobe on sym_add (the call goes through
# the patched GOT slot to the shim's stub), and an empty uprobe plus an empty uretprobe (the
# return goes through the return stub). Configurations alternate, 7 repetitions, the median
# of each is printed next to the plain run's. Writes bench/results/host_probe_symbols.json.
#   bash bench/host_probe/symbol.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -q -p host -p attach-shim
B=target/release/bpftime-super; SHIM=target/release/libbpftime_attach.so
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cc -shared -fPIC -O2 -Wl,-soname,libbpftsym.so.1 -o "$d/libbpftsym.so.1" host/tests/fake_cuda/libbpftsym.c
ln -s libbpftsym.so.1 "$d/libbpftsym.so"
cc -O2 -o "$d/sym_loop" bench/host_probe/sym_loop.c -L"$d" -lbpftsym
clang -O2 -g -target bpf -Wall -Werror -I/usr/include/x86_64-linux-gnu -Iinclude \
	-c bench/probes/uprobe_sym_empty.bpf.c -o "$d/entry.bpf.o"
clang -O2 -g -target bpf -Wall -Werror -I/usr/include/x86_64-linux-gnu -Iinclude -DRET \
	-c bench/probes/uprobe_sym_empty.bpf.c -o "$d/both.bpf.o"
export LD_LIBRARY_PATH="$d"
T=("$B" trace --interval 0 --json --shim "$SHIM")
run() {
	case "$1" in
	0) "$d/sym_loop" ;;
	1) "${T[@]}" -- "$d/sym_loop" ;;
	2) "${T[@]}" "$d/entry.bpf.o" -- "$d/sym_loop" ;;
	3) "${T[@]}" "$d/both.bpf.o" -- "$d/sym_loop" ;;
	esac
}
declare -A s
want=""
for rep in 1 2 3 4 5 6 7; do
	for c in 0 1 2 3; do
		out=$(run $c)
		v=$(echo "$out" | sed -n 's/.*ns_per_call=\([0-9.]*\).*/\1/p')
		sum=$(echo "$out" | sed -n 's/.*sum=\([0-9-]*\).*/\1/p')
		[ -n "$v" ] || { echo "config $c printed no time: $out" >&2; exit 1; }
		# The probes must not change what the function returns.
		[ -z "$want" ] && want=$sum
		[ "$sum" = "$want" ] || { echo "config $c: sum $sum, plain $want" >&2; exit 1; }
		s[$c]="${s[$c]:-} $v"
	done
done
python3 - "$(uname -m)" "$(nproc)" "$(git rev-parse --short HEAD)" "${s[0]}" "${s[1]}" "${s[2]}" "${s[3]}" <<'PY'
import json, statistics, sys, datetime
arch, cores, commit, *cols = sys.argv[1:]
names = ["plain", "trace, no programs", "empty uprobe on sym_add (patched GOT slot, stub)",
         "empty uprobe + empty uretprobe (return stub, shadow stack)"]
samples = [[float(x) for x in c.split()] for c in cols]
base = statistics.median(samples[0])
rows = []
for n, s in zip(names, samples):
    m = statistics.median(s)
    rows.append({"config": n, "ns_per_call_median": m, "samples": s, "added_ns": m - base, "ratio": m / base})
    print(f"{n:60} {m:8.1f} ns/call  +{m - base:7.1f} ns  x{m / base:7.2f}")
doc = {"machine": f"{arch}, {cores} cores (the dev/CI machine, no GPU)", "date": datetime.date.today().isoformat(),
       "commit": commit, "function": "sym_add of host/tests/fake_cuda/libbpftsym.c (eight arguments, two on the stack)",
       "how": "bash bench/host_probe/symbol.sh", "rows": rows}
json.dump(doc, open("bench/results/host_probe_symbols.json", "w"), indent=1)
PY
