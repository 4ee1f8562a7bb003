// loop.bpf.c: bounded loops the compiler must not unroll: sum = sum * 3 + i for i in
// 0..=args[0] % 64 (a recurrence with no closed form), then the first min(32, len) input
// bytes are added.
// Expected r0 (zeroed ctx): 0; args[0] = 3 -> ((0*3+1)*3+2)*3+3 = 18; args[0] = 3 with
// input {1, 2, 3} -> 24.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

SEC("offload")
int loop(struct bpftime_job_ctx *ctx)
{
	__u64 n = ctx->args[0] % 64;
	__u64 sum = 0;
#pragma clang loop unroll(disable)
	for (__u64 i = 0; i <= n; i++)
		sum = sum * 3 + i;

	__u8 *data = (__u8 *)(unsigned long)ctx->data;
	__u8 *end = (__u8 *)(unsigned long)ctx->data_end;
#pragma clang loop unroll(disable)
	for (int i = 0; i < 32; i++) {
		if (data + i + 1 > end)
			break;
		sum += data[i];
	}
	return (int)sum;
}

char LICENSE[] SEC("license") = "GPL";
