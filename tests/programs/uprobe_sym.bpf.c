// Host probes on a function of an ordinary shared library (not the CUDA driver), written
// as for Linux uprobes with libbpf's macros. sym_add takes eight arguments: the first six
// in registers (PT_REGS_PARM*), the seventh and eighth on the stack at PT_REGS_SP + 8 and
// + 16, as the x86-64 ABI has them at the function's entry.
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

// The tests swap in a function the library does not have, and an executable function too
// short to patch, each of which must stop the app.
#ifndef SYM_FN
#define SYM_FN "sym_add"
#endif
#ifndef APP_FN
#define APP_FN "app_mul"
#endif

// 0: calls, 1: sum of argument 1, 2: sum of argument 7 (stack), 3: sum of the results,
// 4: returns seen; the executable's own app_mul: 5 calls, 6 sum of argument 2, 7 sum of
// the results; 8: calls of cudaFakeSync, which the executable links statically
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 9);
	__type(key, __u32);
	__type(value, __u64);
} sym_totals SEC(".maps");

static __always_inline void add(__u32 k, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(&sym_totals, &k);
	if (p)
		__sync_fetch_and_add(p, v);
}

SEC("uprobe/libbpftsym.so:" SYM_FN)
int BPF_KPROBE(on_add, long a)
{
	long g = 0;
	bpf_probe_read_user(&g, sizeof(g), (void *)(PT_REGS_SP(ctx) + 8));
	add(0, 1);
	add(1, a);
	add(2, g);
	return 0;
}

SEC("uretprobe/libbpftsym.so:sym_add")
int BPF_KRETPROBE(on_add_ret, long rc)
{
	add(3, rc);
	add(4, 1);
	return 0;
}

// A function of the application itself (not exported, called directly).
SEC("uprobe/app_sym:" APP_FN)
int BPF_KPROBE(on_mul, long a, long b)
{
	add(5, 1);
	add(6, b);
	return 0;
}

SEC("uretprobe/app_sym:app_mul")
int BPF_KRETPROBE(on_mul_ret, long rc)
{
	add(7, rc);
	return 0;
}

// Named as in libcudart.so; with no libcudart.so loaded, the executable's own copy (cudart
// is linked statically by default).
SEC("uprobe/libcudart.so:cudaFakeSync")
int BPF_KPROBE(on_fake_sync)
{
	add(8, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
