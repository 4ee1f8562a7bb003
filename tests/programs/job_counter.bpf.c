// job_counter.bpf.c: counts the records it runs, with an atomic add, so that concurrent
// workers lose no update (the crash test of issue 18 compares it with the jobs that
// completed). Maps: counts (array, key 4, value 8, 1 entry), per_worker (per-thread
// array, key 4, value 8, 1 entry: the records each worker ran).
// Expected r0: the count before this record's add, plus one.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} per_worker SEC(".maps");

SEC("offload")
int job_counter(struct bpftime_job_ctx *ctx)
{
	__u32 zero = 0;
	__u64 *c = bpf_map_lookup_elem(&counts, &zero);
	if (!c)
		return -1;
	__u64 before = __sync_fetch_and_add(c, 1);
	__u64 *w = bpf_map_lookup_elem(&per_worker, &zero);
	if (w)
		*w += 1;
	return before + 1;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
