#!/usr/bin/env bash
set -u
. cxl-sim/examples/device_lib.sh
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
