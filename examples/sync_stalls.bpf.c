// sync_stalls: the time the application's threads spend blocked in the driver's
// synchronisation calls, per function (`stall_ns`: 0 cuStreamSynchronize, 1
// cuCtxSynchronize, 2 cuEventSynchronize), and a log2 histogram of single stalls in
// microseconds. Host probes: the entry notes the time under the call's argument (the
// stream or event; 0 for the context), the return adds the wait. Two threads waiting on
// the same stream at once would share that slot.
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

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} stall_ns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} stall_us_hist SEC(".maps");

static __always_inline int enter(__u64 key)
{
	__u64 now = bpf_ktime_get_ns();
	bpf_map_update_elem(&start, &key, &now, BPF_ANY);
	return 0;
}

static __always_inline int leave(__u64 key, __u32 fn)
{
	__u64 *t0 = bpf_map_lookup_elem(&start, &key);
	if (!t0)
		return 0;
	__u64 ns = bpf_ktime_get_ns() - *t0;
	bpf_map_delete_elem(&start, &key);
	__u64 *s = bpf_map_lookup_elem(&stall_ns, &fn);
	if (s)
		__sync_fetch_and_add(s, ns);
	__u64 *c = bpf_map_lookup_elem(&calls, &fn);
	if (c)
		__sync_fetch_and_add(c, 1);
	__u32 k = bpftime_hist_slot(ns / 1000);
	__u64 *h = bpf_map_lookup_elem(&stall_us_hist, &k);
	if (h)
		__sync_fetch_and_add(h, 1);
	return 0;
}

SEC("uprobe/libcuda.so:cuStreamSynchronize")
int BPF_KPROBE(stream_in, void *s) { return enter((__u64)s); }
SEC("uretprobe/libcuda.so:cuStreamSynchronize")
int BPF_KPROBE(stream_out, void *s) { return leave((__u64)s, 0); }
SEC("uprobe/libcuda.so:cuCtxSynchronize")
int BPF_KPROBE(ctx_in) { return enter(0); }
SEC("uretprobe/libcuda.so:cuCtxSynchronize")
int BPF_KPROBE(ctx_out) { return leave(0, 1); }
SEC("uprobe/libcuda.so:cuEventSynchronize")
int BPF_KPROBE(event_in, void *e) { return enter((__u64)e); }
SEC("uretprobe/libcuda.so:cuEventSynchronize")
int BPF_KPROBE(event_out, void *e) { return leave((__u64)e, 2); }

char LICENSE[] SEC("license") = "GPL";
