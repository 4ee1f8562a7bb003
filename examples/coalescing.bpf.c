// coalescing: sectors per request of every memory site, the way Nsight Compute counts
// them: a request is one warp-wide execution of the instruction, its sectors the distinct
// 32-byte sectors the warp's lanes touch (the `warp_sectors` field). 4 sectors per request
// is a perfectly coalesced 4-byte access; 32 is one sector per lane.
//   bpftime-super trace examples/coalescing.bpf.o -- ./app
// trace prints both maps per source line; sectors / requests is the ratio.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

#define SITES 4096

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SITES);
	__type(key, __u32);
	__type(value, __u64);
} requests_by_site SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SITES);
	__type(key, __u32);
	__type(value, __u64);
} sectors_by_site SEC(".maps");

SEC("memprobe/*")
int coalescing(void *ctx)
{
	const struct bpftime_mem_ctx *m = bpftime_mem_ctx(ctx);
	if (!m->leader)
		return 0;
	__u32 site = m->site_id;
	__u64 *r = bpf_map_lookup_elem(&requests_by_site, &site);
	if (r)
		__sync_fetch_and_add(r, 1);
	__u64 *s = bpf_map_lookup_elem(&sectors_by_site, &site);
	if (s)
		__sync_fetch_and_add(s, m->warp_sectors);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
