// memcpy_bw: the bandwidth of every synchronous host<->device copy the application makes
// through the CUDA driver, as log2 histograms of MB/s by direction and size class, and of
// the copies' sizes. Host probes (uprobes on the driver, run by `bpftime-super trace`):
// the entry notes the time under the copy's destination, the return computes bytes/time.
// The return probe sees the arguments too (the shim's ctx keeps them).
// Asynchronous copies (`cuMemcpy*Async`, PyTorch's) return when queued, so their call time
// is not a transfer time: they are not measured here.
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpftime_super.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u64);
} start SEC(".maps");

#define HIST(name)                                                                                 \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                                  \
		__uint(max_entries, 64);                                                           \
		__type(key, __u32);                                                                \
		__type(value, __u64);                                                              \
	} name SEC(".maps")

HIST(htod_mbps_small_hist); // host to device, copies under 1 MiB: MB/s
HIST(htod_mbps_large_hist); // host to device, 1 MiB and more
HIST(dtoh_mbps_small_hist);
HIST(dtoh_mbps_large_hist);
HIST(htod_bytes_hist);      // sizes
HIST(dtoh_bytes_hist);

static __always_inline void bump(void *hist, __u64 v)
{
	__u32 k = bpftime_hist_slot(v);
	__u64 *c = bpf_map_lookup_elem(hist, &k);
	if (c)
		__sync_fetch_and_add(c, 1);
}

static __always_inline int enter(__u64 key)
{
	__u64 now = bpf_ktime_get_ns();
	bpf_map_update_elem(&start, &key, &now, BPF_ANY);
	return 0;
}

static __always_inline int leave(__u64 key, __u64 n, int rc, void *small, void *large, void *sizes)
{
	__u64 *t0 = bpf_map_lookup_elem(&start, &key);
	if (!t0)
		return 0;
	__u64 ns = bpf_ktime_get_ns() - *t0;
	bpf_map_delete_elem(&start, &key);
	if (rc != 0)
		return 0;
	bump(sizes, n);
	bump(n < (1 << 20) ? small : large, ns ? n * 1000 / ns : n * 1000);
	return 0;
}

SEC("uprobe/libcuda.so:cuMemcpyHtoD_v2")
int BPF_KPROBE(htod_in, __u64 dst)
{
	return enter(dst);
}

SEC("uretprobe/libcuda.so:cuMemcpyHtoD_v2")
int BPF_KPROBE(htod_out, __u64 dst, const void *src, __u64 n)
{
	return leave(dst, n, PT_REGS_RC(ctx), &htod_mbps_small_hist, &htod_mbps_large_hist, &htod_bytes_hist);
}

SEC("uprobe/libcuda.so:cuMemcpyDtoH_v2")
int BPF_KPROBE(dtoh_in, void *dst)
{
	return enter((__u64)dst);
}

SEC("uretprobe/libcuda.so:cuMemcpyDtoH_v2")
int BPF_KPROBE(dtoh_out, void *dst, __u64 src, __u64 n)
{
	return leave((__u64)dst, n, PT_REGS_RC(ctx), &dtoh_mbps_small_hist, &dtoh_mbps_large_hist, &dtoh_bytes_hist);
}

char LICENSE[] SEC("license") = "GPL";
