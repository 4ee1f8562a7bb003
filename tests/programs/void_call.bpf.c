// void_call.bpf.c: bpf-to-bpf calls of `static void __noinline` functions. clang leaves r0
// unset at their exits; as in Linux, only the main program's exit needs r0, so this loads.
// Expected r0: (args[0] + 5) * 2 + args[1] + 1; the output record holds the same value at
// offset 0 when it has 8 bytes.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

static __noinline void add_to(__u64 *acc, __u64 by)
{
	*acc += by;
}

static __noinline void twice(__u64 *acc)
{
	add_to(acc, *acc);
}

static __noinline void emit(struct bpftime_job_ctx *ctx, __u64 v)
{
	__u64 *out = (__u64 *)(long)ctx->out;
	if ((__u64)(long)(out + 1) <= ctx->out_end)
		*out = v;
}

SEC("offload")
int void_call(struct bpftime_job_ctx *ctx)
{
	__u64 acc = ctx->args[0];
	add_to(&acc, 5);
	twice(&acc);
	add_to(&acc, ctx->args[1] + 1);
	emit(ctx, acc);
	return (int)acc;
}

char LICENSE[] SEC("license") = "GPL";
