#!/bin/bash
# Row a of bench/src/bin/gpu_service.rs under several runtime variants (preludes), round
# robin, in one device call: each run's round trip, the bare mailbox of the same run, the
# hops, and with `#define BPFT_HOP_SPLIT 3` where the GPU's run of the job goes.
#
#   BIN=dir-with-bpftime-super-and-gpu_service bench/gpu/row_a_variants.sh ROUNDS NAME=PRELUDE...
#
# e.g. ... 2 default= split="#define BPFT_HOP_SPLIT 3" d1="#define BPFT_DISPATCHERS 1"
# A variant's environment: ENV_<name>="VAR=VALUE ..." (e.g. ENV_log="RUST_LOG=debug" ...
# log=) is set for its runs only.
# Writes $OUT/row_a_variants.json (a list: variant, round, prelude, row a) and
# $OUT/row_a_variants.txt (a line a run); the runs' own directories stay in $WORK.
set -u -o pipefail
BIN=${BIN:-target/release}
OUT=${OUT:-/tmp/row_a}
WORK=${WORK:-/tmp/row_a_work}
mkdir -p "$OUT" "$WORK"
ROUNDS=${1:?rounds}
shift
here=$(dirname "$0")
export BPFTIME_BENCH_HOP_FIELDS=${BPFTIME_BENCH_HOP_FIELDS:-1}  # field names: gpu_service.rs
rc=0
for r in $(seq 1 "$ROUNDS"); do
    for v in "$@"; do
        name=${v%%=*}
        pre=${v#*=}
        o="$WORK/${name}_$r"
        mkdir -p "$o"
        envs="ENV_${name}"
        # shellcheck disable=SC2086 # the variant's VAR=VALUE words, split on purpose
        env ${!envs:-} BIN="$BIN" OUT="$o" bash "$here/service.sh" a "$pre" > "$o/table.txt" 2>&1 || rc=1
        python3 - "$o/gpu_service.json" "$name" "$r" "$pre" >> "$OUT/row_a_variants.jsonl" <<'PY'
import json, os, sys
path, name, rnd, pre = sys.argv[1:]
try:
    a = json.load(open(path))["a_round_trip"]
except Exception as e:
    a = {"error": str(e)}
print(json.dumps({"variant": name, "round": int(rnd), "prelude": pre, "env": os.environ.get("ENV_" + name, ""), "a": a}))
PY
        python3 - "$OUT/row_a_variants.jsonl" <<'PY' | tail -1 | tee -a "$OUT/row_a_variants.txt"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
a, p = r["a"], r["a"].get("persistent", {})
print(f'{r["variant"]:>10} round {r["round"]}: p50 {p.get("p50_us", 0):.2f} us, mailbox {a.get("bare_mailbox_p50_us", 0):.2f} us '
      f'({a.get("vs_mailbox", 0):.3f}x), one-load mailbox {a.get("one_load_mailbox_p50_us", 0):.2f} us, '
      f'graph {a.get("graph_sync_p50_us", 0):.2f} us, GPU run {p.get("gpu_run_p50_us", 0):.3f} us, split {p.get("gpu_run_split_p50_us", "-")}, '
      f'hops {p.get("hops_p50_us", {})}')
PY
    done
done
python3 -c 'import json,sys; json.dump([json.loads(l) for l in open(sys.argv[1])], open(sys.argv[2], "w"), indent=1)' \
    "$OUT/row_a_variants.jsonl" "$OUT/row_a_variants.json" && rm "$OUT/row_a_variants.jsonl"
exit $rc
