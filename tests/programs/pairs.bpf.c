// SPDX-License-Identifier: MIT OR Apache-2.0
/* pairs.bpf.c: writes {args[0], args[0]} into slot index % 4 of the array map `pairs` with
 * bpf_map_update_elem, so a reader that ever sees two different halves saw a torn value.
 * Built three ways for the hot-swap tests:
 *   default          array map, r0 = 1
 *   -DPAIRS_V2       same map, r0 = 2 (a compatible replace: the map carries over)
 *   -DPAIRS_HASH     `pairs` is a hash map (an incompatible replace: refused)
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

struct pair {
	__u64 a;
	__u64 b;
};

struct {
#ifdef PAIRS_HASH
	__uint(type, BPF_MAP_TYPE_HASH);
#else
	__uint(type, BPF_MAP_TYPE_ARRAY);
#endif
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, struct pair);
} pairs SEC(".maps");

SEC("offload")
int write_pair(struct bpftime_job_ctx *ctx)
{
	__u32 key = ctx->index & 3;
	struct pair p = { ctx->args[0], ctx->args[0] };

	bpf_map_update_elem(&pairs, &key, &p, BPF_ANY);
#ifdef PAIRS_V2
	return 2;
#else
	return 1;
#endif
}

char LICENSE[] SEC("license") = "GPL";
