// The empty host probe of the host-probe overhead benchmark: on every launch, nothing.
#define __TARGET_ARCH_x86
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

SEC("uprobe/libcuda.so:cuLaunchKernel")
int BPF_KPROBE(on_launch)
{
	return 0;
}

SEC("uprobe/libcuda.so:cuLaunchKernelEx")
int BPF_KPROBE(on_launch_ex)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
