// mem_count: accesses and bytes per memory site (source line) of every kernel with PTX.
//   bpftime-super trace examples/mem_count.bpf.o -- ./app
// Both maps are arrays indexed by the site id and only ever added to, so each warp makes
// one atomic per map (the JIT aggregates across the warp) into per-SM stripes that the
// host sums: the cheapest possible counting probe.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

#define SITES 4096

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SITES);
	__type(key, __u32);   /* site id: trace prints the site's source line */
	__type(value, __u64);
} accesses_by_site SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SITES);
	__type(key, __u32);
	__type(value, __u64);
} bytes_by_site SEC(".maps");

SEC("memprobe/*")
int mem_count(void *ctx)
{
	const struct bpftime_mem_ctx *m = bpftime_mem_ctx(ctx);
	__u32 site = m->site_id;
	__u64 *n = bpf_map_lookup_elem(&accesses_by_site, &site);
	if (n)
		__sync_fetch_and_add(n, 1);
	__u64 *b = bpf_map_lookup_elem(&bytes_by_site, &site);
	if (b)
		__sync_fetch_and_add(b, m->size);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
