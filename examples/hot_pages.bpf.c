// hot_pages: bytes accessed per 64 KB page of global memory, over every kernel with PTX.
//   bpftime-super trace examples/hot_pages.bpf.o -- ./app
// The key is the page's address (addr >> 16 << 16); define PAGE_SHIFT=12 for 4 KB pages.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

#ifndef PAGE_SHIFT
#define PAGE_SHIFT 16
#endif

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
} bytes_by_page SEC(".maps");

SEC("memprobe/*")
int hot_pages(void *ctx)
{
	const struct bpftime_mem_ctx *m = bpftime_mem_ctx(ctx);
	if (m->space != BPFTIME_MEM_GLOBAL)
		return 0;
	__u64 page = m->addr >> PAGE_SHIFT << PAGE_SHIFT;
	__u64 *b = bpf_map_lookup_elem(&bytes_by_page, &page);
	if (!b) {
		__u64 zero = 0;
		bpf_map_update_elem(&bytes_by_page, &page, &zero, BPF_NOEXIST);
		b = bpf_map_lookup_elem(&bytes_by_page, &page);
	}
	if (b)
		__sync_fetch_and_add(b, m->size);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
