// printk.bpf.c: bpf_printk (trace_printk, helper 6) with a format string in .rodata and
// 0..3 arguments.
// Expected r0 (zeroed ctx): 0. Output: "index 0 of 0", "args 0 0 0".
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

SEC("offload")
int printk(struct bpftime_job_ctx *ctx)
{
	bpf_printk("hello");
	bpf_printk("index %llu of %llu", ctx->index, ctx->n);
	bpf_printk("args %llu %llu %llu", ctx->args[0], ctx->args[1], ctx->args[2]);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
