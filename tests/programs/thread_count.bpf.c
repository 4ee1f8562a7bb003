// thread_count.bpf.c: counts the records each GPU (or CPU worker) thread runs, in a
// per-thread array with a plain add: no atomics, so it is exact on any number of GPUs
// (a multi-GPU service places it per GPU and `map dump` lists every GPU's value sets).
// Maps: per_thread (per-thread array, key 4, value 8, 1 entry).
// Expected r0: this thread's count after the record.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} per_thread SEC(".maps");

SEC("offload")
int thread_count(struct bpftime_job_ctx *ctx)
{
	__u32 zero = 0;
	__u64 *w = bpf_map_lookup_elem(&per_thread, &zero);
	if (!w)
		return -1;
	*w += 1;
	return *w;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
