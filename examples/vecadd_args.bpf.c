// vecadd_args: BPF_KPROBE reading the kernel's parameters, as libbpf programs read a
// function's arguments. Sums n over launches and counts entries of thread 0.
//   bpftime-super trace examples/vecadd_args.bpf.o -- ./vecadd
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} vecadd_n SEC(".maps"); /* [0]: launches, [1]: sum of n */

SEC("kprobe/vectorAdd")
int BPF_KPROBE(vecadd_entry, const float *a, const float *b, float *c, int n)
{
	if (bpftime_probe_ctx(ctx)->global_thread_id != 0)
		return 0;
	__u32 k0 = 0, k1 = 1;
	__u64 *launches = bpf_map_lookup_elem(&vecadd_n, &k0);
	__u64 *sum = bpf_map_lookup_elem(&vecadd_n, &k1);
	if (launches && sum) {
		__sync_fetch_and_add(launches, 1);
		__sync_fetch_and_add(sum, (__u64)n);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
