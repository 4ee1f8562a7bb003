// The probe behind `bpftime-super trace --timeline FILE`: each kernel launch's span on the
// GPU, by correlation id. Block (0,0,0)'s thread 0 opens the launch's slot at its entry
// (start = its %globaltimer); thread 0 of every block moves the slot's end to its exit time
// with a compare-and-swap. trace joins the spans with the API log's launches (the same
// correlation ids) and the clock calibrations at exit.
//
// The object next to this file is what trace embeds; rebuild it after a change with
//   scripts/build-builtin-probes
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

/* Must match TIMELINE_SLOTS in timeline.rs: a launch's slot is its correlation id modulo
 * this, so the map holds the latest TIMELINE_SLOTS launches at each copy-out. */
#define SLOTS 65536

struct span {
	__u64 corr;
	__u64 kernel_id;
	__u64 start;
	__u64 end;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLOTS);
	__type(key, __u32);
	__type(value, struct span);
} spans SEC(".maps");

SEC("kprobe/*")
int timeline_begin(void *ctx)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	if (p->global_thread_id != 0 || !p->correlation_id)
		return 0;
	__u32 slot = p->correlation_id % SLOTS;
	struct span *s = bpf_map_lookup_elem(&spans, &slot);
	if (!s)
		return 0;
	s->kernel_id = p->kernel_id;
	s->start = p->timer;
	if (s->end < p->timer || s->corr != p->correlation_id)
		s->end = p->timer;
	s->corr = p->correlation_id;
	return 0;
}

SEC("kretprobe/*")
int timeline_end(void *ctx)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	if (p->thread_idx[0] | p->thread_idx[1] | p->thread_idx[2] || !p->correlation_id)
		return 0;
	__u32 slot = p->correlation_id % SLOTS;
	struct span *s = bpf_map_lookup_elem(&spans, &slot);
	if (!s || s->corr != p->correlation_id)
		return 0;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u64 end = *(volatile __u64 *)&s->end;
		if (p->timer <= end)
			return 0;
		if (__sync_val_compare_and_swap(&s->end, end, p->timer) == end)
			return 0;
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
