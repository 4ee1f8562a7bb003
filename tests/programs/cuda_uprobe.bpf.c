// Host probes on the CUDA driver, written as for Linux uprobes with libbpf's macros:
// cuMemcpyHtoD's calls and bytes by size, its failed calls (from the return value), and the
// threads of the last cuLaunchKernel (grid x times block x: arguments 2 and 5), and its
// stream: argument 9, on the stack as the x86-64 ABI has it (sp + 8 * (9 - 6)).
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

// The tests swap in a function the shim does not wrap, which must be refused.
#ifndef HTOD_FN
#define HTOD_FN "cuMemcpyHtoD_v2"
#endif

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u64);
} htod_by_size SEC(".maps");

// 0: bytes, 1: calls, 2: failed calls, 3: threads of the last launch, 4: its stream
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 5);
	__type(key, __u32);
	__type(value, __u64);
} totals SEC(".maps");

static __always_inline void add(__u32 k, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(&totals, &k);
	if (p)
		__sync_fetch_and_add(p, v);
}

SEC("uprobe/libcuda.so:" HTOD_FN)
int BPF_KPROBE(on_htod, __u64 dst, const void *src, __u64 n)
{
	__u64 one = 1, *c = bpf_map_lookup_elem(&htod_by_size, &n);
	if (c)
		__sync_fetch_and_add(c, 1);
	else
		bpf_map_update_elem(&htod_by_size, &n, &one, BPF_NOEXIST);
	add(0, n);
	add(1, 1);
	return 0;
}

SEC("uretprobe/libcuda.so:cuMemcpyHtoD")
int BPF_KRETPROBE(on_htod_ret, int rc)
{
	if (rc != 0)
		add(2, 1);
	return 0;
}

SEC("uprobe/libcuda.so:cuLaunchKernel")
int BPF_KPROBE(on_launch, void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx)
{
	__u32 k = 3;
	__u64 v = (__u64)gx * bx;
	bpf_map_update_elem(&totals, &k, &v, BPF_ANY);
	__u64 stream = 0;
	bpf_probe_read_user(&stream, sizeof(stream), (void *)(PT_REGS_SP(ctx) + 8 * (9 - 6)));
	k = 4;
	bpf_map_update_elem(&totals, &k, &stream, BPF_ANY);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
