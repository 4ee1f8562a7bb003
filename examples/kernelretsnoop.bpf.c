// kernelretsnoop: the exit time of thread 0 of every block, and the spread of exit times
// within each launch, for every kernel.
//   bpftime-super trace examples/kernelretsnoop.bpf.o -- ./app
// `exit_ns` holds, per (kernel, block), the %globaltimer at which its thread 0 exited (the
// last launch wins); `block_exit_hist` is a log2 histogram of (exit - entry) of thread 0, ns.
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
} entry_ns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct key);
	__type(value, __u64);
} exit_ns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} block_exit_hist SEC(".maps");

static __always_inline int key_of(const struct bpftime_probe_ctx *p, struct key *k)
{
	if (p->thread_idx[0] | p->thread_idx[1] | p->thread_idx[2])
		return 0;
	k->kernel_id = p->kernel_id;
	k->block = p->block_idx[0] +
		   (__u64)p->grid_dim[0] * (p->block_idx[1] + (__u64)p->grid_dim[1] * p->block_idx[2]);
	return 1;
}

SEC("kprobe/*")
int block_entry(struct pt_regs *ctx)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	struct key k = {};
	if (!key_of(p, &k))
		return 0;
	__u64 t = p->timer;
	bpf_map_update_elem(&entry_ns, &k, &t, BPF_ANY);
	return 0;
}

SEC("kretprobe/*")
int block_exit(struct pt_regs *ctx)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	struct key k = {};
	if (!key_of(p, &k))
		return 0;
	__u64 t = p->timer;
	bpf_map_update_elem(&exit_ns, &k, &t, BPF_ANY);
	__u64 *start = bpf_map_lookup_elem(&entry_ns, &k);
	if (!start || t < *start)
		return 0;
	__u64 d = t - *start;
	__u32 slot = 0;
#pragma unroll
	for (int i = 32; i > 0; i >>= 1)
		if (d >> i) { d >>= i; slot += i; }
	__u64 *v = bpf_map_lookup_elem(&block_exit_hist, &slot);
	if (v)
		__sync_fetch_and_add(v, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
