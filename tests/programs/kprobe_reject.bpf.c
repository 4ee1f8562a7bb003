// A kprobe the verifier must reject: it reads past the end of the probe ctx (408 bytes).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("kprobe/vectorAdd")
int read_past_ctx(void *ctx)
{
	return *(volatile __u64 *)((char *)ctx + 416);
}

char LICENSE[] SEC("license") = "GPL";
