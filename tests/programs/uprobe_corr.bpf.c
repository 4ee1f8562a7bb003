// A host probe on cuLaunchKernel that reads the launch's correlation id from its ctx (the
// same field the kernel's probes read): the sum and the count of the ids it saw.
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} corr_sum SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} corr_max SEC(".maps");

SEC("uprobe/libcuda.so:cuLaunchKernel")
int BPF_KPROBE(launch_corr)
{
	__u64 id = bpftime_probe_ctx(ctx)->correlation_id;
	__u32 zero = 0;
	__u64 *s = bpf_map_lookup_elem(&corr_sum, &zero);
	if (s)
		__sync_fetch_and_add(s, id);
	__u64 *m = bpf_map_lookup_elem(&corr_max, &zero);
	if (m && id > *m)
		*m = id;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
