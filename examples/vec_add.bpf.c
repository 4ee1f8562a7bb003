// SPDX-License-Identifier: MIT OR Apache-2.0
/* An offload job: each 8-byte input record holds two little-endian u32s; the program writes
 * their sum to the record's 4-byte output and returns it. It also counts records per worker
 * in a per-thread array.
 *
 *   bpftime-super load examples/vec_add.bpf.o
 *   bpftime-super submit --prog vec_add --input pairs.bin --record-size 8 \
 *       --out sums.bin --out-record-size 4 --results
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} records SEC(".maps");

SEC("offload/vec_add")
__u32 vec_add(struct bpftime_job_ctx *ctx)
{
	__u32 *in = (__u32 *)(unsigned long)ctx->data;
	__u32 *in_end = (__u32 *)(unsigned long)ctx->data_end;
	__u32 *out = (__u32 *)(unsigned long)ctx->out;
	__u32 *out_end = (__u32 *)(unsigned long)ctx->out_end;
	__u32 key = 0;
	__u64 *count;

	if ((void *)(in + 2) > (void *)in_end || (void *)(out + 1) > (void *)out_end)
		return 0;
	out[0] = in[0] + in[1];
	count = bpf_map_lookup_elem(&records, &key);
	if (count)
		*count += 1;
	return out[0];
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
