// A memory probe that decides on its configuration before it reads the ctx: with `gate`
// 0 it returns at once; else the warp's leader adds the warp's sectors and the value it
// loaded or stored. The memory pass computes the ctx words (warp collectives among them)
// at the body's ctx point, after the gate (attach/tests/instrument.rs checks where they
// land).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

__u64 gate = 1;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sectors SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} values SEC(".maps");

SEC("memprobe/*")
int mem_gated(void *ctx)
{
	const struct bpftime_mem_ctx *m = bpftime_mem_ctx(ctx);
	if (!gate)
		return 0;
	if (!m->leader)
		return 0;
	__u32 k = 0;
	__u64 *v = bpf_map_lookup_elem(&sectors, &k);
	if (v)
		__sync_fetch_and_add(v, m->warp_sectors);
	__u64 *s = bpf_map_lookup_elem(&values, &k);
	if (s)
		__sync_fetch_and_add(s, m->value);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
