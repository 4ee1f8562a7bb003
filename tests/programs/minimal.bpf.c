// minimal.bpf.c: includes only bpftime_super.h (no libbpf headers), so SEC() and the
// GPU helper declarations come from the fallback definitions there.
// Expected r0 (CPU reference interpreter: lane 0, zeroed ctx): lane id + 5 + ctx->n = 5.
#include "bpftime_super.h"

SEC("offload/minimal")
int minimal(struct bpftime_job_ctx *ctx)
{
	return (int)(bpf_get_lane_id() + 5 + ctx->n);
}

char LICENSE[] SEC("license") = "MIT";
