// SPDX-License-Identifier: MIT OR Apache-2.0
/* Sums the little-endian 32-bit words of the block given with `bpftime-super exec --mem`
 * and counts calls in an array map.
 *
 *   bpftime-super exec examples/sum.bpf.o --mem 01000000020000000300000004000000
 *   0xa
 *
 * With --mem, r1 points to the block and r2 holds its length.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} calls SEC(".maps");

#define MAX_WORDS 256

SEC("offload/sum")
__u64 sum_words(void *mem, __u64 len)
{
	__u64 sum = 0;
	__u32 key = 0;
	__u64 *n = bpf_map_lookup_elem(&calls, &key);

	if (n)
		__sync_fetch_and_add(n, 1);
	for (__u32 i = 0; i < MAX_WORDS; i++) {
		if ((__u64)(i + 1) * 4 > len)
			break;
		sum += *(__u32 *)(mem + i * 4);
	}
	return sum;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
