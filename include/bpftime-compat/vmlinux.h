/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * A stand-in for the vmlinux.h that bpftime's GPU example programs include: the kernel
 * integer types and struct pt_regs they use, without a kernel BTF dump. Build such a
 * program unchanged with
 *   clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -Iinclude/bpftime-compat \
 *         -I/usr/include/x86_64-linux-gnu -c prog.bpf.c
 * (bpftime's map type 1502, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP, is this runtime's per-thread
 * array; its helpers 501-511 have the same ids here.)
 */
#ifndef BPFTIME_COMPAT_VMLINUX_H
#define BPFTIME_COMPAT_VMLINUX_H
#define __VMLINUX_H__

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u8 u8;
typedef __s8 s8;
typedef __u16 u16;
typedef __s16 s16;
typedef __u32 u32;
typedef __s32 s32;
typedef __u64 u64;
typedef __s64 s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;
typedef _Bool bool;
enum { false = 0, true = 1 };

/* The x86-64 pt_regs as the kernel names its fields (PT_REGS_PARMn with vmlinux.h). */
struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip, cs,
		flags, sp, ss;
};

enum bpf_map_type {
	BPF_MAP_TYPE_UNSPEC = 0,
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

#endif
