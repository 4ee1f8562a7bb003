// filter.bpf.c: a verdict per 64-byte record. The record's first u64 is a key and byte 8 a
// flag; the verdict is written to out[0] as a u32: 1 (keep) when key > args[0] and the
// flag byte is non-zero, else 0. The record index is written to out[1].
// Expected r0: the verdict; -1 (r0 = 0xffffffff, an int) if the input is shorter than 64 bytes or the output shorter
// than 8 bytes (a zeroed ctx gives -1). Record {key = 10, flag = 1}, args[0] = 5 -> r0 = 1.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

#define RECORD_SIZE 64

SEC("offload/filter")
int filter(struct bpftime_job_ctx *ctx)
{
	void *data = (void *)(unsigned long)ctx->data;
	void *data_end = (void *)(unsigned long)ctx->data_end;
	__u32 *out = (__u32 *)(unsigned long)ctx->out;
	__u32 *out_end = (__u32 *)(unsigned long)ctx->out_end;
	int verdict = 0;

	if (data + RECORD_SIZE > data_end)
		return -1;
	if ((void *)(out + 2) > (void *)out_end)
		return -1;
	__u64 key = *(__u64 *)data;
	__u8 flag = *(__u8 *)(data + 8);
	if (key > ctx->args[0] && flag)
		verdict = 1;
	out[0] = verdict;
	out[1] = (__u32)ctx->index;
	return verdict;
}

char LICENSE[] SEC("license") = "GPL";
