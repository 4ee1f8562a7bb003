// Reads every field of the probe ctx, at entry and exit of every kernel, into an array
// (slot = field index): exercises each word the attach site fills.
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} fields SEC(".maps");

static __always_inline void put(__u32 k, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(&fields, &k);
	if (p)
		__sync_fetch_and_add(p, v);
}

SEC("kprobe/*")
int BPF_KPROBE(all_entry, __u64 a, __u64 b, __u64 c, __u64 d, __u64 e)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	put(0, a + b + c + d + e);
	put(1, p->params[0] + p->params[7] + p->nparams);
	put(2, p->thread_idx[0] + p->thread_idx[1] + p->thread_idx[2]);
	put(3, p->block_idx[0] + p->block_idx[1] + p->block_idx[2]);
	put(4, p->block_dim[0] * p->block_dim[1] * p->block_dim[2]);
	put(5, p->grid_dim[0] * p->grid_dim[1] * p->grid_dim[2]);
	put(6, p->global_thread_id);
	put(7, p->timer);
	put(8, p->sm_id + p->warp_id + p->lane_id + p->site);
	put(9, p->kernel_id + p->correlation_id + p->launch_time + PT_REGS_RC(ctx));
	return 0;
}

SEC("kretprobe/*")
int all_exit(struct pt_regs *ctx)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	put(10, p->site + p->timer);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
