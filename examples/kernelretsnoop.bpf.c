// kernelretsnoop: when each block of each kernel finished, from the exit probe of its thread
// 0, and how many threads exited per kernel.
//   bpftime-super trace examples/kernelretsnoop.bpf.o -- ./app
// `exit_ns[kernel, block]` is %globaltimer (ns) at the exit of the block's thread 0 (the last
// launch wins); `exits[kernel]` counts every thread's exit.
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpftime_super.h"

struct key {
	__u64 kernel_id;
	__u64 block; /* linear block id */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct key);
	__type(value, __u64);
} exit_ns SEC(".maps");

SEC("kretprobe/*")
int block_exit(struct pt_regs *ctx)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	if (p->thread_idx[0] | p->thread_idx[1] | p->thread_idx[2])
		return 0;
	struct key k = {
		.kernel_id = p->kernel_id,
		.block = p->block_idx[0] +
			 (__u64)p->grid_dim[0] * (p->block_idx[1] + (__u64)p->grid_dim[1] * p->block_idx[2]),
	};
	__u64 t = p->timer;
	bpf_map_update_elem(&exit_ns, &k, &t, BPF_ANY);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
