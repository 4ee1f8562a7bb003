// The memory benchmark's counting probe: every global access adds 1 to its site's counter.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} accesses_by_site SEC(".maps");

SEC("memprobe/*")
int mem_sites(void *ctx)
{
	__u32 site = bpftime_mem_ctx(ctx)->site_id;
	__u64 *n = bpf_map_lookup_elem(&accesses_by_site, &site);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
