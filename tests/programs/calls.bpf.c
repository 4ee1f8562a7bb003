// calls.bpf.c: bpf-to-bpf calls. `calls` -> square() and sum_sq(), sum_sq() -> square();
// square() and sum_sq() are static __noinline functions in .text. A second program in the
// same file, `calls2`, calls cube() -> square(), so each link must append only what it
// uses, each callee once.
// Expected r0 (zeroed ctx, args all 0): calls: square(0 + 3) + sum_sq(1, 2) = 9 + 5 = 14;
// calls2: cube(2) = 8.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

static __noinline __u64 square(__u64 x)
{
	return x * x;
}

static __noinline __u64 sum_sq(__u64 a, __u64 b)
{
	return square(a) + square(b);
}

static __noinline __u64 cube(__u64 x)
{
	return square(x) * x;
}

SEC("offload")
int calls(struct bpftime_job_ctx *ctx)
{
	__u64 a = ctx->args[0] + 3;
	return (int)(square(a) + sum_sq(ctx->args[1] + 1, ctx->args[2] + 2));
}

SEC("offload/cube")
int calls2(struct bpftime_job_ctx *ctx)
{
	return (int)cube(ctx->args[0] + 2);
}

char LICENSE[] SEC("license") = "GPL";
