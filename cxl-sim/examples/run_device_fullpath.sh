#!/usr/bin/env bash
# Run 39 of bench/results/cxl_gpu.md: four builds of the delay probe side by side (objects in
# $CARRY, by `cxl run --object`): base (the committed source), v3 (the same, clang
# -mcpu=v3: 32-bit ALU and jumps), hash (v3 and a 32-bit multiply-xor history hash),
# nodiv (hash, and the queueing term without its three divisions; not the model's integers,
# a measurement only). The variants are patches on the source of b823f2b in
# bench/results/cxl_gpu/run39/ (build each as scripts/build-builtin-probes does, with -mcpu=v3).
# The chase under direct-x8, with --count-only, and at Δt 400 / 1,600 without a cap; SGEMM
# under direct-x8. One `R …` line per measurement in $OUT/cxl39/log.txt.
#   CARRY=target/s37 OUT=/tmp/o bash cxl-sim/examples/run_device_fullpath.sh
set -u
. "$(dirname "$0")/device_lib.sh"
cxl_device_setup cxl39 cxl-sim/examples/chase.cu attach/tests/apps/sgemm.cu
q="--no-stats --no-kernel-time"
chase() { "$@" $b/chase 1024 50000 random | val ns_per_step; }
for rep in 1 2; do
	v=$(chase); r chase obj=none rep=$rep cfg=plain ns=$v
	for o in base v3 hash nodiv; do
		ob="--object $carry/$o.o"
		v=$(chase $cxl run $q $ob --preset direct-x8 --); r chase obj=$o rep=$rep cfg=x8 ns=$v
		v=$(chase $cxl run $q $ob --preset direct-x8 --count-only --); r chase obj=$o rep=$rep cfg=x8count ns=$v
		v=$(chase $cxl run $q $ob --latency-ns 400 --no-cap --); r chase obj=$o rep=$rep cfg=l400 ns=$v
		v=$(chase $cxl run $q $ob --latency-ns 1600 --no-cap --); r chase obj=$o rep=$rep cfg=l1600 ns=$v
	done
done
v=$($b/sgemm 4096 3 | val kernel_us); r sgemm obj=none cfg=plain us=$v
for o in base v3 hash nodiv; do
	v=$($cxl run $q --object $carry/$o.o --preset direct-x8 -- $b/sgemm 4096 3 | val kernel_us); r sgemm obj=$o cfg=x8 us=$v
done
echo done >> "$log"
