// threadhist: how many times each threadIdx.x ran a kernel, across all launches.
//   bpftime-super trace examples/threadhist.bpf.o -- ./app
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);   /* threadIdx.x */
	__type(value, __u64); /* exits of threads with that index */
} thread_exits SEC(".maps");

SEC("kretprobe/*")
int on_exit(struct pt_regs *ctx)
{
	__u32 x = bpftime_probe_ctx(ctx)->thread_idx[0];
	__u64 *v = bpf_map_lookup_elem(&thread_exits, &x);
	if (v)
		__sync_fetch_and_add(v, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
