// multi.bpf.c: several programs in several sections: kprobe/vecadd, kretprobe/vecadd,
// uprobe/foo, xdp (an unknown kind, only loadable by name) and two functions in one
// section "offload/pair", where pair_b calls pair_a (a bpf-to-bpf call within one program
// section, relocated against the global symbol pair_a).
// Expected r0 (zeroed ctx): on_entry 1, on_exit 2, on_foo 3, xdp_pass 2, pair_a 10,
// pair_b 30 (20 + args[1] + pair_a = 20 + 0 + 10).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

SEC("kprobe/vecadd")
int on_entry(struct bpftime_job_ctx *ctx)
{
	return 1;
}

SEC("kretprobe/vecadd")
int on_exit(struct bpftime_job_ctx *ctx)
{
	return 2;
}

SEC("uprobe/foo")
int on_foo(void *ctx)
{
	return 3;
}

SEC("xdp")
int xdp_pass(void *ctx)
{
	return 2; /* XDP_PASS */
}

SEC("offload/pair")
__noinline int pair_a(struct bpftime_job_ctx *ctx)
{
	return 10 + (int)ctx->args[0];
}

SEC("offload/pair")
int pair_b(struct bpftime_job_ctx *ctx)
{
	return 20 + (int)ctx->args[1] + pair_a(ctx);
}

char LICENSE[] SEC("license") = "GPL";
