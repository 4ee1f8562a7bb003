// SPDX-License-Identifier: MIT OR Apache-2.0
/* Must be REJECTED by the verifier: reads the input record without the bounds check
 * against data_end (insn 1 is the unchecked load). Used by the CLI tests. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

SEC("offload")
int unchecked_read(struct bpftime_job_ctx *ctx)
{
	return *(__u32 *)(long)ctx->data;
}

char LICENSE[] SEC("license") = "GPL";
