// kernel_count: launches and threads per kernel name, for every kernel with PTX.
//   bpftime-super trace examples/kernel_count.bpf.o -- ./app
// Thread 0 of each launch adds 1 to `launches` and the launch's thread count (grid size ×
// block size, from the probe ctx) to `threads`: two map updates per launch, whatever its
// size. (One update per thread would work too, but millions of threads updating one key of
// a map in host-mapped memory serialise on PCIe atomics.)
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);   /* kernel_id: trace prints the kernel's name */
	__type(value, __u64);
} launches SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u64);
} threads SEC(".maps");

static __always_inline void add(void *map, __u64 key, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(map, &key);
	if (v)
		__sync_fetch_and_add(v, n);
	else if (bpf_map_update_elem(map, &key, &n, BPF_NOEXIST))
		if ((v = bpf_map_lookup_elem(map, &key)))
			__sync_fetch_and_add(v, n);
}

SEC("kprobe/*")
int count_kernel(struct pt_regs *ctx)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	if (p->global_thread_id != 0)
		return 0;
	__u64 n = (__u64)p->grid_dim[0] * p->grid_dim[1] * p->grid_dim[2] * p->block_dim[0] *
		  p->block_dim[1] * p->block_dim[2];
	add(&launches, p->kernel_id, 1);
	add(&threads, p->kernel_id, n);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
