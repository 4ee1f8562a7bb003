// api_errors: every CUDA driver call that returns an error, counted by function and
// CUresult. One host probe on the return of every driver function the shim wraps
// (`uretprobe/libcuda.so:*`): a non-zero result is counted under (the function's address,
// the result). `trace` prints the address as the function's name.
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpftime_super.h"

struct err_key {
	__u64 func; // PT_REGS_IP: the driver function
	__u64 rc;   // the CUresult
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct err_key);
	__type(value, __u64);
} errors SEC(".maps");

SEC("uretprobe/libcuda.so:*")
int BPF_KRETPROBE(api_error, int rc)
{
	if (rc == 0)
		return 0;
	struct err_key k = { .func = PT_REGS_IP(ctx), .rc = (__u32)rc };
	__u64 one = 1;
	__u64 *n = bpf_map_lookup_elem(&errors, &k);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&errors, &k, &one, BPF_NOEXIST);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
