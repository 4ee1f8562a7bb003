// The empty probe of the attach benchmark: entry and exit of every kernel, doing nothing.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("kprobe/*")
int empty_entry(void *ctx) { return 0; }

SEC("kretprobe/*")
int empty_exit(void *ctx) { return 0; }

char LICENSE[] SEC("license") = "GPL";
