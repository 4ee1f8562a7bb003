// The counting host probe of the host-probe benchmark: launches counted by function handle
// (PARM1 of cuLaunchKernel, PARM2 of cuLaunchKernelEx), in a hash map.
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
} launches SEC(".maps");

static __always_inline int count(__u64 f)
{
	__u64 one = 1, *c = bpf_map_lookup_elem(&launches, &f);
	if (c)
		__sync_fetch_and_add(c, 1);
	else
		bpf_map_update_elem(&launches, &f, &one, BPF_NOEXIST);
	return 0;
}

SEC("uprobe/libcuda.so:cuLaunchKernel")
int BPF_KPROBE(on_launch, void *f)
{
	return count((__u64)f);
}

SEC("uprobe/libcuda.so:cuLaunchKernelEx")
int BPF_KPROBE(on_launch_ex, const void *config, void *f)
{
	return count((__u64)f);
}

char LICENSE[] SEC("license") = "GPL";
