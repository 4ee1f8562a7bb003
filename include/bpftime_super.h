/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * bpftime_super.h: what an offload program needs beyond <linux/bpf.h> and
 * <bpf/bpf_helpers.h>:
 *
 *   - struct bpftime_job_ctx, the read-only context r1 points to
 *     (data..data_end: the record's input, out..out_end: its output);
 *   - the GPU helpers 501..511 in bpftime's style;
 *   - the map type ids this runtime supports;
 *   - a SEC() fallback for programs that do not include bpf_helpers.h.
 *
 * Include it after <linux/bpf.h> and <bpf/bpf_helpers.h> (or alone).
 */
#ifndef BPFTIME_SUPER_H
#define BPFTIME_SUPER_H

#ifndef __LINUX_BPF_H__
#include <linux/types.h>
#endif

/* The offload job context: 80 bytes, read-only. */
struct bpftime_job_ctx {
	__u64 data;     /* start of this record's input (read-only) */
	__u64 data_end; /* one past its end */
	__u64 out;      /* start of this record's output (writable) */
	__u64 out_end;  /* one past its end */
	__u64 index;    /* record number, 0..n */
	__u64 n;        /* number of records in the job */
	__u64 args[4];  /* job arguments */
};

/* Map types (the Linux BPF_MAP_TYPE_* ids). */
#define BPFTIME_MAP_TYPE_HASH 1
#define BPFTIME_MAP_TYPE_ARRAY 2
#define BPFTIME_MAP_TYPE_PERTHREAD_ARRAY 6 /* = BPF_MAP_TYPE_PERCPU_ARRAY */
#define BPFTIME_MAP_TYPE_RINGBUF 27

#ifndef SEC
#define SEC(name) __attribute__((section(name), used))
#endif

#ifndef __uint
#define __uint(name, val) int (*name)[val]
#endif
#ifndef __type
#define __type(name, val) typeof(val) *name
#endif

#ifndef __noinline
#define __noinline __attribute__((noinline))
#endif

/* GPU helpers (bpftime's ids). Out-parameters are u64 pointers to stack slots. */
static long (*const bpf_puts)(const char *str) = (void *)501;
static __u64 (*const bpf_get_globaltimer)(void) = (void *)502;
static void (*const bpf_get_block_idx)(__u64 *x, __u64 *y, __u64 *z) = (void *)503;
static void (*const bpf_get_block_dim)(__u64 *x, __u64 *y, __u64 *z) = (void *)504;
static void (*const bpf_get_thread_idx)(__u64 *x, __u64 *y, __u64 *z) = (void *)505;
static void (*const bpf_membar)(void) = (void *)506;
static void (*const bpf_exit)(void) = (void *)507;
static void (*const bpf_get_grid_dim)(__u64 *x, __u64 *y, __u64 *z) = (void *)508;
static __u64 (*const bpf_get_sm_id)(void) = (void *)509;
static __u64 (*const bpf_get_warp_id)(void) = (void *)510;
static __u64 (*const bpf_get_lane_id)(void) = (void *)511;

#endif /* BPFTIME_SUPER_H */
