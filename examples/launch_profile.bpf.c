// launch_profile: per kernel name, how often it is launched, how long each launch waits
// between the host's launch call and its start on the GPU (the queue delay), and how long
// it runs.
//   bpftime-super trace --interval 1s examples/launch_profile.bpf.o -- ./app
// Host side: a uprobe on cuLaunchKernel counts launch calls (the launch rate is their
// growth per --interval). GPU side: block (0,0,0)'s thread 0 opens the launch's slot (by
// correlation id) at its start; thread 0 of every block moves the slot's end forward at its
// exit with a compare-and-swap, adding each advance to the kernel's run time, so run_ns_total
// is the sum over launches of (last block exit − first block entry).
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpftime_super.h"

#define SLOTS 4096

struct launch {
	__u64 kernel_id;
	__u64 corr;
	__u64 start;
	__u64 end;
};

/* One slot per launch in flight, by correlation id (`_`: trace does not print it). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLOTS);
	__type(key, __u32);
	__type(value, struct launch);
} _inflight SEC(".maps");

#define PER_KERNEL(name)                                                                           \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_HASH);                                                   \
		__uint(max_entries, 1024);                                                         \
		__type(key, __u64);   /* kernel_id: trace prints the kernel's name */              \
		__type(value, __u64);                                                              \
	} name SEC(".maps")

PER_KERNEL(launches);       /* launches that started on the GPU */
PER_KERNEL(queue_ns_total); /* sum of launch call → GPU start, ns */
PER_KERNEL(run_ns_total);   /* sum of start → last block's exit, ns */

/* Launch calls the host made (every kernel, probes or not). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} launch_calls SEC(".maps");

static __always_inline void add(void *map, __u64 key, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(map, &key);
	if (v)
		__sync_fetch_and_add(v, n);
	else if (bpf_map_update_elem(map, &key, &n, BPF_NOEXIST))
		if ((v = bpf_map_lookup_elem(map, &key)))
			__sync_fetch_and_add(v, n);
}

SEC("uprobe/libcuda.so:cuLaunchKernel")
int BPF_KPROBE(launch_call)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&launch_calls, &zero);
	if (v)
		__sync_fetch_and_add(v, 1);
	return 0;
}

SEC("kprobe/*")
int launch_begin(struct pt_regs *ctx)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	if (p->global_thread_id != 0 || !p->correlation_id)
		return 0;
	__u32 slot = p->correlation_id % SLOTS;
	struct launch *l = bpf_map_lookup_elem(&_inflight, &slot);
	if (!l)
		return 0;
	l->kernel_id = p->kernel_id;
	l->corr = p->correlation_id;
	l->start = p->timer;
	l->end = p->timer;
	add(&launches, p->kernel_id, 1);
	if (p->launch_time && p->timer > p->launch_time)
		add(&queue_ns_total, p->kernel_id, p->timer - p->launch_time);
	return 0;
}

SEC("kretprobe/*")
int launch_end(struct pt_regs *ctx)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	if (p->thread_idx[0] | p->thread_idx[1] | p->thread_idx[2] || !p->correlation_id)
		return 0;
	__u32 slot = p->correlation_id % SLOTS;
	struct launch *l = bpf_map_lookup_elem(&_inflight, &slot);
	if (!l || l->corr != p->correlation_id)
		return 0;
	/* Blocks exit together: a few tries of compare-and-swap move the end to the latest. */
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u64 end = *(volatile __u64 *)&l->end;
		if (p->timer <= end)
			return 0;
		if (__sync_val_compare_and_swap(&l->end, end, p->timer) == end) {
			add(&run_ns_total, p->kernel_id, p->timer - end);
			return 0;
		}
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
