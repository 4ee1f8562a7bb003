/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * bpftime_super.h: what an offload program needs beyond <linux/bpf.h> and
 * <bpf/bpf_helpers.h>:
 *
 *   - struct bpftime_job_ctx, the read-only context r1 points to
 *     (data..data_end: the record's input, out..out_end: its output);
 *   - struct bpftime_probe_ctx, what r1 points to in GPU kernel probes
 *     (SEC("kprobe/<kernel>"), SEC("kretprobe/<kernel>"));
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

/*
 * The ctx of GPU kernel probes, one per thread and site (entry or exit). It starts with
 * the x86-64 user-space struct pt_regs, the kernel's parameters 1..6 in rdi, rsi, rdx, rcx,
 * r8, r9 (rax = 0), so libbpf's BPF_KPROBE / PT_REGS_PARMn (built with -D__TARGET_ARCH_x86)
 * read them. The rest is reached with bpftime_probe_ctx(ctx). One definition, in Rust:
 * ebpf::ProbeCtx; a test checks these offsets against it.
 */
#if !defined(__VMLINUX_H__) && !defined(BPFTIME_NO_PT_REGS)
#include <asm/ptrace.h>
#endif

struct bpftime_probe_ctx {
	struct pt_regs regs;     /*   0: parameters 1..6 in rdi, rsi, rdx, rcx, r8, r9 */
	__u64 params[16];        /* 168: parameters 1..16, zero-extended (0 if over 8 bytes) */
	__u64 nparams;           /* 296: number of kernel parameters */
	__u32 thread_idx[3];     /* 304: %tid.x, .y, .z */
	__u32 block_idx[3];      /* 316: %ctaid */
	__u32 block_dim[3];      /* 328: %ntid */
	__u32 grid_dim[3];       /* 340: %nctaid */
	__u64 global_thread_id;  /* 352: linear block id * threads per block + linear tid */
	__u64 timer;             /* 360: %globaltimer at the probe, ns */
	__u32 sm_id;             /* 368: %smid */
	__u32 warp_id;           /* 372: %warpid */
	__u32 lane_id;           /* 376: %laneid */
	__u32 site;              /* 380: 0 at entry, 1 at exit */
	__u64 kernel_id;         /* 384: FNV-1a 64 of the mangled kernel name */
	__u64 correlation_id;    /* 392: launch number from the shim (0 when not passed) */
	__u64 launch_time;       /* 400: host launch time on the %globaltimer clock (0 when not passed) */
};                               /* 408 bytes */

#define bpftime_probe_ctx(ctx) ((const struct bpftime_probe_ctx *)(ctx))

/*
 * The ctx of GPU memory-access probes (SEC("memprobe/<kernel>"), "memprobe.load/<kernel>",
 * "memprobe.store/<kernel>"), one per thread and access. Only the fields a program reads
 * are computed at the site. One definition, in Rust: ebpf::MemCtx.
 */
struct bpftime_mem_ctx {
	__u64 addr;              /*   0: address, in the instruction's state space */
	__u64 value;             /*   8: low 8 bytes: after a load, before a store; atomics: the operand */
	__u64 value_hi;          /*  16: bytes 8..16 of a 16-byte access, else 0 */
	__u32 size;              /*  24: bytes accessed */
	__u32 op;                /*  28: BPFTIME_MEM_LOAD, _STORE, _ATOMIC, _COPY */
	__u32 space;             /*  32: BPFTIME_MEM_GLOBAL, _SHARED, _LOCAL (generic: classified) */
	__u32 site_id;           /*  36: index into the session's site table (PTX and source line) */
	__u32 thread_idx[3];     /*  40: %tid */
	__u32 block_idx[3];      /*  52: %ctaid */
	__u64 timer;             /*  64: %globaltimer, ns */
	__u32 sm_id;             /*  72: %smid */
	__u32 lane_id;           /*  76: %laneid */
	__u32 warp_active;       /*  80: lanes of the warp making this access */
	__u32 warp_sectors;      /*  84: distinct 32-byte sectors of the warp's request */
	__u32 leader;            /*  88: 1 in the lowest lane of warp_active */
	__u32 flags;             /*  92: bit 0: generic address */
	__u64 kernel_id;         /*  96: FNV-1a 64 of the mangled kernel name */
	__u64 correlation_id;    /* 104: launch number from the shim (0 when not passed) */
};                               /* 112 bytes */
/* timer, warp_active, warp_sectors and leader are taken where the probe first reads the ctx
 * when every path to a ctx read passes that read once: a probe that filters lanes by
 * themselves before it sees them counted only among the lanes that went on (see
 * ebpf::MemCtx). */

#define BPFTIME_MEM_LOAD 0
#define BPFTIME_MEM_STORE 1
#define BPFTIME_MEM_ATOMIC 2
#define BPFTIME_MEM_COPY 3
#define BPFTIME_MEM_OTHER 0
#define BPFTIME_MEM_GLOBAL 1
#define BPFTIME_MEM_SHARED 2
#define BPFTIME_MEM_LOCAL 3

#define bpftime_mem_ctx(ctx) ((const struct bpftime_mem_ctx *)(ctx))

/*
 * BPFTIME_RELAXED_ATOMICS; at file scope: the object's GPU probes lower their fetching
 * atomics (fetch-and-add, xchg, cmpxchg) as relaxed ones. They stay atomic but order no
 * other memory access, where eBPF's are fully ordered (a fence at each on a GPU). For
 * counters, token buckets and claims that publish nothing; not for locks or for a flag
 * that publishes data (use bpf_spin_lock, or bpf_membar_gpu around it).
 * BPFTIME_RELAXED_ATOMICS=0 in the environment turns it off for comparisons.
 */
#define BPFTIME_RELAXED_ATOMICS \
	char __bpftime_relaxed_atomics[1] __attribute__((section(".bpftime.relaxed_atomics"), used))

/*
 * Map printing in `bpftime-super trace` follows the map's name, as bpftrace follows its
 * functions: a name ending in "_hist" prints as a log2 histogram (array slot k counts
 * values in [2^k, 2^(k+1)), slot 0 counts 0 and 1), "_lhist" as a linear histogram
 * (slot k = [k*step, (k+1)*step) with step from a "_lhist_<step>" suffix, default 1);
 * every other map prints one line per key. 8-byte keys equal to a kernel_id print as the
 * kernel's demangled name. In a map whose name contains "site", 4-byte keys print as the
 * memory site they name (source file:line, or the PTX line, and the kernel).
 */

/* The slot of v in a "_hist" map: floor(log2(v)), 0 for 0 and 1. */
static __attribute__((always_inline)) inline __u32 bpftime_hist_slot(__u64 v)
{
	__u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

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
/* Wait until bpf_get_globaltimer() reaches deadline_ns (at most 1 s ahead); returns the time
 * it stopped. flags bit 0: spin on %globaltimer only (else nanosleep while > 1 us is left). */
static __u64 (*const bpf_wait_until)(__u64 deadline_ns, __u64 flags) = (void *)520;
/* A GPU-scope fence (fence.acq_rel.gpu) that also drops the SM's L1 cache: loads after it
 * see what reached the GPU's L2, a host upload included. Far cheaper than bpf_membar. */
static void (*const bpf_membar_gpu)(void) = (void *)521;

#endif /* BPFTIME_SUPER_H */
