// counter.bpf.c: BTF-defined maps. `counts` is an array of 16 u64 counters indexed by
// record index % 16; `seen` is a hash from the u64 record index to a struct stats.
// Maps: counts (array, key 4, value 8, 16 entries), seen (hash, key 8, value 16,
// 1024 entries, flags 1 = BPF_F_NO_PREALLOC), per_thread (per-thread array, key 4,
// value 8, 4 entries).
// Expected r0: the new count of slot index % 16 (1 on the first run with a zeroed ctx).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

struct stats {
	__u64 hits;
	__u32 last;
	__u32 pad;
};

typedef __u64 counter_t;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, counter_t);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct stats);
} seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u64));
} per_thread SEC(".maps");

SEC("offload")
int counter(struct bpftime_job_ctx *ctx)
{
	__u32 slot = ctx->index % 16;
	__u64 idx = ctx->index;
	__u32 zero = 0;
	counter_t *c = bpf_map_lookup_elem(&counts, &slot);
	if (!c)
		return -1;
	*c += 1;

	struct stats *s = bpf_map_lookup_elem(&seen, &idx);
	if (s) {
		s->hits += 1;
		s->last = slot;
	} else {
		struct stats init = { .hits = 1, .last = slot, .pad = 0 };
		bpf_map_update_elem(&seen, &idx, &init, BPF_ANY);
	}

	__u64 *t = bpf_map_lookup_elem(&per_thread, &zero);
	if (t)
		*t += 1;
	return *c;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
