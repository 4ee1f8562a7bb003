// ringbuf.bpf.c: ring buffer events. Reserves a struct event, fills it from the ctx and
// submits it when the record index is even, discards it when odd; then also writes a copy
// with bpf_ringbuf_output.
// Maps: events (ring buffer, 4096 bytes; key 0, value 0).
// Expected r0 (zeroed ctx): 0 (reserve succeeded and submitted; output returned 0);
// 1 if the reserve failed.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

struct event {
	__u64 index;
	__u64 arg;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

SEC("offload")
int ringbuf(struct bpftime_job_ctx *ctx)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 1;
	e->index = ctx->index;
	e->arg = ctx->args[0];
	if (ctx->index & 1)
		bpf_ringbuf_discard(e, 0);
	else
		bpf_ringbuf_submit(e, 0);

	struct event copy = { .index = ctx->index, .arg = 7 };
	return (int)bpf_ringbuf_output(&events, &copy, sizeof(copy), 0);
}

char LICENSE[] SEC("license") = "GPL";
