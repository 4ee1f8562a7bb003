// Reads every field of the memory-probe ctx at every access of every kernel, into an array
// (slot = field index): exercises each word a memory site fills.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} fields SEC(".maps");

static __always_inline void put(__u32 k, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(&fields, &k);
	if (p)
		__sync_fetch_and_add(p, v);
}

SEC("memprobe/*")
int mem_all(void *ctx)
{
	const struct bpftime_mem_ctx *m = bpftime_mem_ctx(ctx);
	put(0, m->addr);
	put(1, m->value + m->value_hi);
	put(2, m->size + m->op);
	put(3, m->space + m->site_id);
	put(4, m->thread_idx[0] + m->thread_idx[1] + m->thread_idx[2]);
	put(5, m->block_idx[0] + m->block_idx[1] + m->block_idx[2]);
	put(6, m->timer);
	put(7, m->sm_id + m->lane_id);
	put(8, m->warp_active + m->warp_sectors);
	put(9, m->leader + m->flags);
	put(10, m->kernel_id + m->correlation_id);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
