// Per memory site: how many accesses, and the sums of their addresses, values, sizes,
// spaces and ops, plus requests and sectors from each warp's leader. The device tests
// (attach/tests/gpu/mem.py) compare these with what the test kernels must have done.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

#define SITE_MAP(name)                          \
	struct {                                \
		__uint(type, BPF_MAP_TYPE_ARRAY); \
		__uint(max_entries, 1024);      \
		__type(key, __u32);             \
		__type(value, __u64);           \
	} name SEC(".maps")

SITE_MAP(n_site);
SITE_MAP(bytes_site);
SITE_MAP(addr_site);
SITE_MAP(value_site);
SITE_MAP(hi_site);
SITE_MAP(space_site);
SITE_MAP(op_site);
SITE_MAP(req_site);
SITE_MAP(sect_site);
SITE_MAP(tid_site);

static __always_inline void add(void *map, __u32 k, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(map, &k);
	if (p)
		__sync_fetch_and_add(p, v);
}

SEC("memprobe/*")
int mem_exact(void *ctx)
{
	const struct bpftime_mem_ctx *m = bpftime_mem_ctx(ctx);
	__u32 s = m->site_id;
	add(&n_site, s, 1);
	add(&bytes_site, s, m->size);
	add(&addr_site, s, m->addr);
	add(&value_site, s, m->value);
	add(&hi_site, s, m->value_hi);
	add(&space_site, s, m->space);
	add(&op_site, s, m->op);
	add(&tid_site, s, m->thread_idx[0] + 256 * m->block_idx[0]);
	if (m->leader) {
		add(&req_site, s, 1);
		add(&sect_site, s, m->warp_sectors);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
