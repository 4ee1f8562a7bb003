// The counting probe of the attach benchmark: every thread adds 1 to one counter at entry.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} entries SEC(".maps");

SEC("kprobe/*")
int count_entry(void *ctx)
{
	__u32 k = 0;
	__u64 *v = bpf_map_lookup_elem(&entries, &k);
	if (v)
		__sync_fetch_and_add(v, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
