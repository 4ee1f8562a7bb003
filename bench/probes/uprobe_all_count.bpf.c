// The counting host probe on every CUDA driver call (issue 13's "training-step loop"
// benchmark): one uprobe on every function the shim wraps (`uprobe/libcuda.so:*`), counting
// calls by function (PT_REGS_IP), in a hash map.
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u64);
} calls SEC(".maps");

SEC("uprobe/libcuda.so:*")
int count_call(struct pt_regs *ctx)
{
	__u64 f = PT_REGS_IP(ctx), one = 1;
	__u64 *c = bpf_map_lookup_elem(&calls, &f);
	if (c)
		__sync_fetch_and_add(c, 1);
	else
		bpf_map_update_elem(&calls, &f, &one, BPF_NOEXIST);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
