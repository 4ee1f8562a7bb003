// kernel_count: launches and threads per kernel name, for every kernel with PTX.
//   bpftime-super trace examples/kernel_count.bpf.o -- ./app
// `launches` counts thread 0 of each launch; `threads` counts every thread (one update per
// thread: expect a cost on kernels with millions of threads).
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

static __always_inline void bump(void *map, __u64 key)
{
	__u64 one = 1, *v = bpf_map_lookup_elem(map, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
	else if (bpf_map_update_elem(map, &key, &one, BPF_NOEXIST))
		if ((v = bpf_map_lookup_elem(map, &key)))
			__sync_fetch_and_add(v, 1);
}

SEC("kprobe/*")
int count_kernel(struct pt_regs *ctx)
{
	const struct bpftime_probe_ctx *p = bpftime_probe_ctx(ctx);
	if (p->global_thread_id == 0)
		bump(&launches, p->kernel_id);
	bump(&threads, p->kernel_id);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
