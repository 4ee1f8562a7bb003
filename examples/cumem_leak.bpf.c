// cumem_leak: device memory still allocated when the application exits, by the call stack
// that allocated it. Host probes on the CUDA driver: the return of cuMemAlloc_v2 reads the
// new device pointer (bpf_probe_read_user on its out-parameter) and records the size and
// the user stack (bpf_get_stack with BPF_F_USER_STACK: unwound with the unwind tables by
// the shim); cuMemFree_v2 takes the allocation back. `trace` prints, at exit, the
// outstanding bytes and allocations per stack, each frame as `function+offset` (or
// `module+offset` when the dynamic symbol table has no name for it).
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpftime_super.h"

#define DEPTH 6

struct stack {
	__u64 ip[DEPTH];
};

struct alloc {
	__u64 size;
	struct stack stack;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); // device pointer
	__type(value, struct alloc);
} allocs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct stack);
	__type(value, __u64);
} outstanding_bytes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct stack);
	__type(value, __u64);
} outstanding_allocs SEC(".maps");

static void add(void *map, struct stack *s, __s64 v)
{
	__u64 *n = bpf_map_lookup_elem(map, s);
	if (n) {
		__sync_fetch_and_add(n, v);
	} else {
		__u64 init = v;
		bpf_map_update_elem(map, s, &init, BPF_NOEXIST);
	}
}

SEC("uretprobe/libcuda.so:cuMemAlloc_v2")
int BPF_KRETPROBE(alloc_ret, int rc)
{
	__u64 dptr = 0;
	struct alloc a = {};
	if (rc != 0)
		return 0;
	if (bpf_probe_read_user(&dptr, sizeof(dptr), (void *)PT_REGS_PARM1(ctx)) || !dptr)
		return 0;
	a.size = PT_REGS_PARM2(ctx);
	if (bpf_get_stack(ctx, &a.stack, sizeof(a.stack), BPF_F_USER_STACK) < 0)
		return 0;
	bpf_map_update_elem(&allocs, &dptr, &a, BPF_ANY);
	add(&outstanding_bytes, &a.stack, a.size);
	add(&outstanding_allocs, &a.stack, 1);
	return 0;
}

SEC("uprobe/libcuda.so:cuMemFree_v2")
int BPF_KPROBE(free_entry, __u64 dptr)
{
	struct alloc *a = bpf_map_lookup_elem(&allocs, &dptr);
	if (!a)
		return 0;
	struct stack s = a->stack;
	__u64 size = a->size;
	bpf_map_delete_elem(&allocs, &dptr);
	add(&outstanding_bytes, &s, -(__s64)size);
	add(&outstanding_allocs, &s, -1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
