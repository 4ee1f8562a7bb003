// add.bpf.c: the smallest offload program; no maps, no memory access.
// Expected r0: 42 for any ctx (6 * 7, computed from volatile-free constants).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

SEC("offload")
int add(struct bpftime_job_ctx *ctx)
{
	int a = 6, b = 7;
	return a * b;
}

char LICENSE[] SEC("license") = "GPL";
