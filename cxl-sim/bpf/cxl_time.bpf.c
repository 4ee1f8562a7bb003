// cxl-sim's kernel timer: the time of every launch of every kernel with PTX, from its entry
// and exit probes, summed per kernel. Loaded beside cxl.bpf.c by `bpftime-super cxl run`
// (`--no-kernel-time` leaves it out: it costs a call per thread at entry and exit).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"
#include "cxl_abi.h"

/* Kernel time from the entry/exit probes, per kernel (slot = kernel_id % CXL_KERNEL_SLOTS).
 * Thread 0 of every block moves its SM stripe's end forward at its exit (stripes, so that
 * no single word takes every block's store). Block (0,0,0)'s thread 0 opens a launch: it
 * adds the previous launch's latest end - start to the total, clears the ends, tags every
 * stripe with the launch's correlation id and sets start. An exit counts only in a stripe
 * tagged with its own launch: a block of the next launch that ends before that launch's
 * block 0 enters (a short kernel of a few blocks, where block 0 runs the probe's stripe
 * loop) would otherwise stretch the previous launch to the next one's start, the idle gap
 * between them included; dropped, it costs nothing, since block 0 itself ends later. The
 * host adds the last launch's. Launches of one kernel must not overlap (one stream). Where
 * the shim cannot number launches (ids read 0), and for graph nodes (one id for every
 * launch of a node), every exit counts as before. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CXL_KERNEL_SLOTS);
	__type(key, __u32);
	__type(value, struct cxl_kernel);
} cxl_kernels SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CXL_KERNEL_SLOTS * CXL_END_STRIPES);
	__type(key, __u32);
	__type(value, struct cxl_stamp);
} cxl_kernel_end SEC(".maps");

SEC("kprobe/*")
int cxl_kernel_entry(void *ctx)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	if (p->thread_idx[0] | p->thread_idx[1] | p->thread_idx[2] | p->block_idx[0] |
	    p->block_idx[1] | p->block_idx[2])
		return 0;
	__u32 slot = p->kernel_id % CXL_KERNEL_SLOTS;
	struct cxl_kernel *k = bpf_map_lookup_elem(&cxl_kernels, &slot);
	if (!k)
		return 0;
	__u64 end = 0;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < CXL_END_STRIPES; i++) {
		__u32 at = slot * CXL_END_STRIPES + i;
		struct cxl_stamp *e = bpf_map_lookup_elem(&cxl_kernel_end, &at);
		if (!e)
			break;
		if (e->t > end)
			end = e->t;
		e->t = 0;
		e->corr = p->correlation_id;
	}
	/* Not before the first launch: a block that finished before block 0 got here would
	 * count from 1970. */
	if (k->start && end > k->start)
		k->total_ns += end - k->start;
	k->kernel_id = p->kernel_id;
	k->launches += 1;
	k->start = p->timer;
	return 0;
}

SEC("kretprobe/*")
int cxl_kernel_exit(void *ctx)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	if (p->thread_idx[0] | p->thread_idx[1] | p->thread_idx[2])
		return 0;
	__u32 at = (p->kernel_id % CXL_KERNEL_SLOTS) * CXL_END_STRIPES + (p->sm_id % CXL_END_STRIPES);
	struct cxl_stamp *e = bpf_map_lookup_elem(&cxl_kernel_end, &at);
	if (e && e->corr == p->correlation_id && p->timer > e->t)
		e->t = p->timer;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
