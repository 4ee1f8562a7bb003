// sched.bpf.c: the kernel half of `trace --kernel-events`. A Linux tracepoint program (run
// by the kernel, loaded with aya) that reports every context switch of the traced
// application's threads: when one leaves a CPU (the switch runs in its context, so its
// tgid is the current one) and when one comes back (its thread id was seen leaving).
// Ids are those of trace's pid namespace (bpf_get_ns_current_pid_tgid), so a container's
// application matches the pid trace knows; the tracepoint's own pids are the kernel's.
// Times are bpf_ktime_get_ns(): CLOCK_MONOTONIC, the clock of the API log and the timeline.
// The field offsets are the stable sched_switch layout; the loader checks them against the
// tracepoint's format file first.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// What to follow: the application's tgid (0: nothing yet) in the pid namespace given by
// the device and inode of its nsfs file (trace's /proc/self/ns/pid).
struct sched_target {
	__u32 tgid;
	__u32 pad;
	__u64 ns_dev;
	__u64 ns_ino;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sched_target);
} sched_target SEC(".maps");

// Threads of the application seen leaving a CPU, by the kernel's pid, with their id in
// trace's namespace: their return is reported too. LRU: old threads make room.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} sched_tids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} sched_events SEC(".maps");

// One switch, as the loader reads it (32 bytes).
struct sched_event {
	__u64 ts;	  // CLOCK_MONOTONIC ns
	__s64 prev_state; // the state bits (0xff): 0 preempted (still runnable), else asleep
	__u32 tid;	  // the application's thread
	__u32 cpu;
	__u32 out;	  // 1: it left the CPU, 0: it came back
	__u32 pad;
};

struct sched_switch_args {
	__u64 common;
	char prev_comm[16];
	__s32 prev_pid;
	__s32 prev_prio;
	__s64 prev_state;
	char next_comm[16];
	__s32 next_pid;
	__s32 next_prio;
};

static __always_inline void emit(__u32 tid, __u32 out, __s64 state)
{
	struct sched_event *e = bpf_ringbuf_reserve(&sched_events, sizeof(*e), 0);
	if (!e)
		return;
	e->ts = bpf_ktime_get_ns();
	e->prev_state = state;
	e->tid = tid;
	e->cpu = bpf_get_smp_processor_id();
	e->out = out;
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
}

SEC("tracepoint/sched/sched_switch")
int sched_switch(struct sched_switch_args *ctx)
{
	__u32 zero = 0;
	struct sched_target *t = bpf_map_lookup_elem(&sched_target, &zero);
	if (!t || t->tgid == 0)
		return 0;
	struct bpf_pidns_info ns = {};
	if (bpf_get_ns_current_pid_tgid(t->ns_dev, t->ns_ino, &ns, sizeof(ns)) == 0 &&
	    ns.tgid == t->tgid) {
		__u32 prev = ctx->prev_pid, tid = ns.pid;
		bpf_map_update_elem(&sched_tids, &prev, &tid, BPF_ANY);
		emit(tid, 1, ctx->prev_state);
	}
	__u32 next = ctx->next_pid;
	__u32 *tid = bpf_map_lookup_elem(&sched_tids, &next);
	if (tid)
		emit(*tid, 0, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
