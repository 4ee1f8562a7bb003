// vec_add.bpf.c: reads two u32 from the record's input (bounds-checked against data_end),
// writes their sum as a u32 to out (bounds-checked against out_end).
// Expected r0: 0 on success (input {3, 4} -> out {7}); 1 if the input is shorter than
// 8 bytes (a zeroed ctx gives 1); 2 if the output is shorter than 4 bytes.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

SEC("offload")
int vec_add(struct bpftime_job_ctx *ctx)
{
	__u32 *in = (__u32 *)(unsigned long)ctx->data;
	__u32 *in_end = (__u32 *)(unsigned long)ctx->data_end;
	__u32 *out = (__u32 *)(unsigned long)ctx->out;
	__u32 *out_end = (__u32 *)(unsigned long)ctx->out_end;

	if ((void *)(in + 2) > (void *)in_end)
		return 1;
	if ((void *)(out + 1) > (void *)out_end)
		return 2;
	out[0] = in[0] + in[1];
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
