// llm-cache's live mode: an LRU cache of CAPACITY bytes, kept in eBPF maps and driven by
// host probes on the driver's host-to-device copies while the model runs. An object is a
// (host address, bytes) pair, as `llm-cache observe` groups them; a copy is a lookup: a hit
// when the object is resident, else a miss that moves its bytes and makes it resident
// (evicting least recently used objects until it fits; an object larger than CAPACITY is
// never kept). These are the rules of `llm-cache simulate --policy lru`, so the live
// counts equal the simulator's on the same run.
//
//   clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu \
//       -DCAPACITY='(512ULL << 20)' -c live_lru.bpf.c -o live_lru.bpf.o
//   bpftime-super trace --interval 1s live_lru.bpf.o -- python3 offload_llama.py names.csv
//
// `lru` holds [0] lookups, [1] hits, [2] bytes moved by misses, [3] evictions, [4] copies
// not simulated (more than SLOTS objects, or an eviction chain longer than MAX_EVICT).
// Copies from several threads at once would race on the list (no lock): PyTorch and
// accelerate copy from one thread.
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#ifndef CAPACITY
#define CAPACITY (512ULL << 20)
#endif
#define SLOTS 8192
#define MAX_EVICT 64

struct object {
	__u64 addr;
	__u64 bytes;
};

struct node {
	__u64 bytes;
	__u32 prev, next; // slots; 0 = none
	__u32 resident, pad;
};

struct state {
	__u64 used;
	__u32 head, tail; // most and least recently used; 0 = empty
	__u32 next_slot, pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SLOTS);
	__type(key, struct object);
	__type(value, __u32);
} slot_of SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLOTS + 1);
	__type(key, __u32);
	__type(value, struct node);
} nodes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct state);
} st SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 5);
	__type(key, __u32);
	__type(value, __u64);
} lru SEC(".maps");

static __always_inline void count(__u32 k, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(&lru, &k);
	if (p)
		*p += v;
}

static __always_inline struct node *node(__u32 slot)
{
	return bpf_map_lookup_elem(&nodes, &slot);
}

static __always_inline void unlink(struct state *s, __u32 slot, struct node *n)
{
	struct node *p = node(n->prev), *q = node(n->next);
	if (n->prev && p)
		p->next = n->next;
	else
		s->head = n->next;
	if (n->next && q)
		q->prev = n->prev;
	else
		s->tail = n->prev;
	n->prev = n->next = 0;
}

static __always_inline void push_front(struct state *s, __u32 slot, struct node *n)
{
	struct node *h = node(s->head);
	n->prev = 0;
	n->next = s->head;
	if (s->head && h)
		h->prev = slot;
	s->head = slot;
	if (!s->tail)
		s->tail = slot;
}

static __always_inline int lookup(__u64 addr, __u64 bytes)
{
	__u32 zero = 0;
	struct state *s = bpf_map_lookup_elem(&st, &zero);
	if (!s || bytes == 0)
		return 0;
	count(0, 1);
	struct object o = {.addr = addr, .bytes = bytes};
	__u32 *found = bpf_map_lookup_elem(&slot_of, &o);
	__u32 slot = found ? *found : 0;
	struct node *n = node(slot);
	if (slot && n && n->resident) {
		count(1, 1);
		if (s->head != slot) {
			unlink(s, slot, n);
			push_front(s, slot, n);
		}
		return 0;
	}
	count(2, bytes);
	if (bytes > CAPACITY)
		return 0;
	if (!slot) {
		if (s->next_slot >= SLOTS) {
			count(4, 1);
			return 0;
		}
		slot = ++s->next_slot;
		bpf_map_update_elem(&slot_of, &o, &slot, BPF_ANY);
	}
	n = node(slot);
	if (!n)
		return 0;
	for (int i = 0; i < MAX_EVICT && s->used + bytes > CAPACITY; i++) {
		__u32 t = s->tail;
		struct node *v = node(t);
		if (!t || !v)
			break;
		unlink(s, t, v);
		v->resident = 0;
		s->used -= v->bytes;
		count(3, 1);
	}
	if (s->used + bytes > CAPACITY) {
		count(4, 1);
		return 0;
	}
	n->bytes = bytes;
	n->resident = 1;
	push_front(s, slot, n);
	s->used += bytes;
	return 0;
}

SEC("uprobe/libcuda.so:cuMemcpyHtoDAsync_v2")
int BPF_KPROBE(htod_async, __u64 dst, const void *src, __u64 n)
{
	return lookup((__u64)src, n);
}

SEC("uprobe/libcuda.so:cuMemcpyHtoDAsync_v2_ptsz")
int BPF_KPROBE(htod_async_ptsz, __u64 dst, const void *src, __u64 n)
{
	return lookup((__u64)src, n);
}

SEC("uprobe/libcuda.so:cuMemcpyHtoD_v2")
int BPF_KPROBE(htod, __u64 dst, const void *src, __u64 n)
{
	return lookup((__u64)src, n);
}

SEC("uprobe/libcuda.so:cuMemcpyHtoD_v2_ptds")
int BPF_KPROBE(htod_ptds, __u64 dst, const void *src, __u64 n)
{
	return lookup((__u64)src, n);
}

char LICENSE[] SEC("license") = "GPL";
