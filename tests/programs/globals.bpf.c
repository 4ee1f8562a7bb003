// globals.bpf.c: global data. `table` is a const table in .rodata, `calls` a counter in
// .data (initialized to 100), `total` a counter in .bss.
// Maps: .rodata (16 bytes, read-only), .data (8 bytes, init 100), .bss (8 bytes).
// Expected r0 with a zeroed ctx, first run: table[0] + calls = 3 + 101 = 104;
// for index i: table[i % 4] + 100 + runs so far (table = {3, 5, 7, 11}).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

const volatile __u32 table[4] = { 3, 5, 7, 11 };
__u64 calls = 100;
__u64 total;

SEC("offload")
int globals(struct bpftime_job_ctx *ctx)
{
	__u32 i = ctx->index & 3;
	__u32 t = table[i];
	calls += 1;
	total += t;
	return (int)(t + calls);
}

char LICENSE[] SEC("license") = "GPL";
