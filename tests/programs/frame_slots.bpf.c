// frame_slots.bpf.c: a program whose values live in its frame, for the JIT's frame slots in
// registers (jit::JitOptions::stack_regs) against the interpreter (gpu_diff):
// - sixteen values live at once, more than eBPF's registers, so clang spills them;
// - narrow `volatile` locals, stored and loaded at their own widths (signed ones too);
// - one store through a pointer that is a map value on some records and a local on the
//   others (`v = lookup() ?: &local`), which must keep that local in memory.
// Input: eight u64 per record. Output: one u64 per record. r0: 0, or 1 / 2 when the input /
// output record is too short.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} slots_seen SEC(".maps");

static __attribute__((always_inline)) inline __u64 mix(__u64 x, __u64 k)
{
	x ^= x >> 29;
	x *= k | 1;
	return x ^ (x >> 32);
}

SEC("offload")
int frame_slots(struct bpftime_job_ctx *ctx)
{
	__u64 *in = (__u64 *)(unsigned long)ctx->data;
	__u64 *in_end = (__u64 *)(unsigned long)ctx->data_end;
	__u64 *out = (__u64 *)(unsigned long)ctx->out;
	__u64 *out_end = (__u64 *)(unsigned long)ctx->out_end;
	if ((void *)(in + 8) > (void *)in_end)
		return 1;
	if ((void *)(out + 1) > (void *)out_end)
		return 2;
	__u64 a[16];
#pragma clang loop unroll(full)
	for (int i = 0; i < 16; i++)
		a[i] = mix(in[i & 7] + i, 0x9e3779b97f4a7c15ull * (i + 1));
	__u64 s = 0;
#pragma clang loop unroll(full)
	for (int i = 0; i < 16; i++)
		s += mix(a[i] ^ a[(i + 5) & 15], a[(i + 11) & 15]) * (a[(i + 3) & 15] | 1);

	volatile __s8 n8 = (__s8)in[1];
	volatile __s16 n16 = (__s16)(in[2] >> 3);
	volatile __s32 n32 = (__s32)(in[3] >> 5);
	volatile __u32 u32 = (__u32)(in[4] * 7);
	s += (__s64)n8 + (__s64)n16 + (__s64)n32 + u32;

	__u64 local = s & 0xff;
	__u32 key = (__u32)(in[5] & 7); /* keys 4..7 miss: v is the local */
	__u64 *v = bpf_map_lookup_elem(&slots_seen, &key);
	if (!v)
		v = &local;
	*v += s;
	out[0] = s ^ local ^ *v;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
