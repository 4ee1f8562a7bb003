#!/usr/bin/env bash
# On the GPU machine: the clock calibration's uncertainty under variants of the clock
# kernel's launch, alternating, in one run (issue 13's "≤ 1 µs calibration error").
# $CARRY (default target/clock-carry) holds bpftime-super, libbpftime_attach.so and
# launchlate.bpf.o. Each run is `tick` (a launch every 10 ms for 5 s) under
# `trace --interval 1s --json`, which calibrates at start, every second and at exit.
#   bash attach/tests/gpu/clock_ab.sh OUT [REPEATS] [WARPS:ROUNDS...]   (default: 1:64 1:256)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../../.." && pwd)"
out="$1"; rounds="${2:-3}"; shift 2 2>/dev/null; variants="${*:-1:64 1:256}"; mkdir -p "$out"
carry="${CARRY:-$root/target/clock-carry}"; B="$carry/bpftime-super"
apps=/tmp/bpftime-apps; mkdir -p "$apps"
G="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
[ -x "$apps/tick" ] || nvcc -O2 $G -o "$apps/tick" "$root/attach/tests/apps/tick.cu"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/device.txt"
: > "$out/clocks.txt"
for r in $(seq 1 "$rounds"); do
	for v in $variants; do
		w=${v%%:*}; n=${v##*:}
		BPFTIME_CLOCK_WARPS=$w BPFTIME_CLOCK_ROUNDS=$n "$B" trace --shim "$carry/libbpftime_attach.so" --interval 1s --json \
			"$carry/launchlate.bpf.o" -- "$apps/tick" 5 10 2>>"$out/stderr.txt" \
			| grep '"event":"clock"' | sed "s/^/warps=$w,rounds=$n $r /" >> "$out/clocks.txt"
	done
done
python3 - "$out/clocks.txt" <<'PY' | tee "$out/summary.txt"
import json, sys, statistics
by = {}
for line in open(sys.argv[1]):
    which, r, js = line.split(" ", 2)
    by.setdefault(which, []).append(json.loads(js)["uncertainty_ns"])
for which, u in sorted(by.items()):
    u.sort()
    print(f"{which}: {len(u)} calibrations, uncertainty ns min {u[0]} median {statistics.median(u)} max {u[-1]}; <= 1000 ns: {sum(x <= 1000 for x in u)}")
PY
