// The empty host probe of the symbol-probe overhead benchmark (bench/host_probe/symbol.sh):
// on every call of a library function, nothing; with RET, on every return too.
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

SEC("uprobe/libbpftsym.so:sym_add")
int BPF_KPROBE(on_add)
{
	return 0;
}

#ifdef RET
SEC("uretprobe/libbpftsym.so:sym_add")
int BPF_KRETPROBE(on_add_ret)
{
	return 0;
}
#endif

char LICENSE[] SEC("license") = "GPL";
