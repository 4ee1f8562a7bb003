// The probe behind `bpftime-super trace --mem-report`: per memory site, accesses and bytes,
// and, in each warp's leader, requests and the warp's distinct 32-byte sectors (Nsight
// Compute's sectors per request). trace joins the counts with the site table (kernel,
// source line, load or store) at exit.
//
// The object next to this file is what trace embeds; rebuild it after a change with
//   scripts/build-builtin-probes
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

#define SITE_MAP(name)                            \
	struct {                                  \
		__uint(type, BPF_MAP_TYPE_ARRAY); \
		__uint(max_entries, 16384);       \
		__type(key, __u32);               \
		__type(value, __u64);             \
	} name SEC(".maps")

SITE_MAP(accesses_site);
SITE_MAP(bytes_site);
SITE_MAP(requests_site);
SITE_MAP(sectors_site);

static __always_inline void add(void *map, __u32 k, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(map, &k);
	if (p)
		__sync_fetch_and_add(p, v);
}

SEC("memprobe/*")
int mem_report(void *ctx)
{
	const struct bpftime_mem_ctx *m = bpftime_mem_ctx(ctx);
	__u32 s = m->site_id;
	add(&accesses_site, s, 1);
	add(&bytes_site, s, m->size);
	if (m->leader) {
		add(&requests_site, s, 1);
		add(&sectors_site, s, m->warp_sectors);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
