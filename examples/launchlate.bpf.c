// launchlate: how long after the host's launch call each kernel launch started on the GPU.
//   bpftime-super trace examples/launchlate.bpf.o -- ./app
// The probe reads the launch's time (ctx->launch_time: the host's CLOCK_MONOTONIC at the
// launch call, moved onto %globaltimer by trace's clock calibration) and the time the kernel
// entered (ctx->timer), in block (0,0,0)'s thread 0: the first block the GPU schedules.
// A probe that reads launch_time makes the shim pass it (two hidden kernel parameters).
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);   /* log2 slot of the latency in ns */
	__type(value, __u64); /* launches */
} launch_ns_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);   /* kernel_id: trace prints the kernel's name */
	__type(value, __u64); /* sum of the latencies, ns */
} latency_ns_total SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u64);
} launches SEC(".maps");

/* Launches that started before their launch call by the calibrated clocks (a clock
 * error larger than its stated uncertainty), and launches without a launch time (no
 * calibration, or a graph node: a node's launch call is the graph's). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} early SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} untimed SEC(".maps");

static __always_inline void add(void *map, __u64 key, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(map, &key);
	if (v)
		__sync_fetch_and_add(v, n);
	else if (bpf_map_update_elem(map, &key, &n, BPF_NOEXIST))
		if ((v = bpf_map_lookup_elem(map, &key)))
			__sync_fetch_and_add(v, n);
}

static __always_inline void bump(void *map)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(map, &zero);
	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("kprobe/*")
int launch_start(struct pt_regs *ctx)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	if (p->global_thread_id != 0)
		return 0;
	if (!p->launch_time) {
		bump(&untimed);
		return 0;
	}
	if (p->timer < p->launch_time) {
		bump(&early);
		return 0;
	}
	__u64 d = p->timer - p->launch_time;
	__u32 k = bpftime_hist_slot(d);
	__u64 *c = bpf_map_lookup_elem(&launch_ns_hist, &k);
	if (c)
		__sync_fetch_and_add(c, 1);
	add(&latency_ns_total, p->kernel_id, d);
	add(&launches, p->kernel_id, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
