// legacy_map.bpf.c: maps declared the pre-BTF way, as struct bpf_map_def in section "maps".
// Maps: legacy_array (array, key 4, value 8, 8 entries), legacy_hash (hash, key 4,
// value 4, 64 entries, flags 0).
// Expected r0: 1 on the first run with a zeroed ctx (slot 0 of legacy_array incremented).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

struct bpf_map_def {
	unsigned int type;
	unsigned int key_size;
	unsigned int value_size;
	unsigned int max_entries;
	unsigned int map_flags;
};

struct bpf_map_def SEC("maps") legacy_array = {
	.type = BPFTIME_MAP_TYPE_ARRAY,
	.key_size = sizeof(__u32),
	.value_size = sizeof(__u64),
	.max_entries = 8,
};

struct bpf_map_def SEC("maps") legacy_hash = {
	.type = BPFTIME_MAP_TYPE_HASH,
	.key_size = sizeof(__u32),
	.value_size = sizeof(__u32),
	.max_entries = 64,
	.map_flags = 0,
};

SEC("offload")
int legacy(struct bpftime_job_ctx *ctx)
{
	__u32 key = ctx->index & 7;
	__u64 *v = bpf_map_lookup_elem(&legacy_array, &key);
	if (!v)
		return -1;
	*v += 1;
	__u32 val = (__u32)*v;
	bpf_map_update_elem(&legacy_hash, &key, &val, BPF_ANY);
	return (int)*v;
}

char LICENSE[] SEC("license") = "GPL";
