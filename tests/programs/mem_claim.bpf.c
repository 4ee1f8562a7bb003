// A memory probe and a kernel entry probe whose atomics return values: a compare-and-swap
// claim and a fetch-and-add ticket (attach/tests/instrument.rs: they stay fully ordered
// unless the object asks otherwise; mem_claim_relaxed.bpf.c asks).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpftime_super.h"

/* Names (mem_claim_relaxed.bpf.c gives its copies a suffix). */
#ifndef NAME
#define NAME(x) x
#endif

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} NAME(claims) SEC(".maps");

SEC("memprobe/*")
int NAME(mem_claim)(void *ctx)
{
	const struct bpftime_mem_ctx *m = bpftime_mem_ctx(ctx);
	__u32 k = 0;
	__u64 *c = bpf_map_lookup_elem(&NAME(claims), &k);
	if (!c)
		return 0;
	/* The first access claims the word; later ones see who did. */
	if (__sync_val_compare_and_swap(c, 0, m->addr) != 0)
		return 1;
	return 0;
}

SEC("kprobe/*")
int NAME(entry_ticket)(void *ctx)
{
	__u32 k = 1;
	__u64 *t = bpf_map_lookup_elem(&NAME(claims), &k);
	if (t && __sync_fetch_and_add(t, 1) > 1000000)
		*t = 0;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
