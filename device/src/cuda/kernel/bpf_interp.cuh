/*
 * bpf_interp.cuh: the eBPF interpreter of the persistent CUDA kernel ("instant tier").
 *
 * A program loaded while the kernel runs serves its first jobs from this interpreter, which
 * reads relocated bytecode (device/src/cuda/bytecode.rs, `relocate`) from device-visible
 * memory, until the JIT's native code (jit/) is linked into the next kernel generation.
 *
 * Pure header, no includes of CUDA headers: it compiles
 *   - under NVRTC and nvcc (device code: `__CUDA_ARCH__`), using only builtins and inline PTX;
 *   - as plain host C or C++ (gcc/g++), with GCC `__atomic` builtins and clock_gettime, so the
 *     host tests (device/tests/interp_host.rs) run the same code differentially against
 *     `ebpf::interp`;
 *   - in nvcc's host pass (device functions are parsed, never called): stubs.
 * Every symbol is prefixed `bpf_` / `BPF_` (the header is included into a larger kernel).
 * GPU requirements: sm_70 or later, PTX ISA 6.2 or later (ld.acquire/st.release/atom with
 * scopes, nanosleep). The interpreter keeps 8 frames of 512 bytes plus registers in local
 * memory (about 4.6 KB per thread, as ptxas reports for sm_90).
 *
 * Semantics (equal to ebpf::interp bit for bit, RFC 9669):
 *   | case                         | result                                              |
 *   |------------------------------|-----------------------------------------------------|
 *   | div by zero (u/s, 32/64)     | 0                                                   |
 *   | mod by zero (u/s, 32/64)     | dst unchanged (32-bit: truncated to 32 bits)        |
 *   | INT_MIN s/ -1, INT_MIN s% -1 | INT_MIN, 0 (wrapping)                               |
 *   | shift counts                 | masked to 63 / 31                                   |
 *   | 32-bit ALU results           | zero-extended                                       |
 *   | le16/le32, be*, bswap*       | truncate / byte swap, upper bits zeroed             |
 *   | atomics                      | SeqCst-like (`atom.acq_rel.sys`), plain RMW on the  |
 *   |                              | interpreter's own stack (PTX atomics on local memory|
 *   |                              | are undefined); misaligned: error                   |
 *   | bpf-to-bpf call              | saves r6-r9, r10 -= frame; at most 8 frames         |
 *   | callx (0x8d)                 | helper call, the id the value of dst (a signed      |
 *   |                              | 64-bit value outside 32 bits: unknown helper)       |
 *   | stack                        | frame = stack_size rounded up to 8 (0: 512), zeroed |
 *   |                              | on entry and on every call                          |
 *
 * The interpreter trusts the verifier like the JIT (no memory bounds checks) but never
 * loops forever and never traps on malformed bytecode: it returns an error code
 * (BPF_INTERP_E*) with the pc, for an unknown opcode, a register out of range, a write to
 * r10, a jump out of the program, an unknown helper, a too deep call, a map pointer that is
 * not one of the program's maps, an unrelocated ld_imm64 or an exhausted budget.
 *
 * Helpers: the ids and observable results of the JIT prelude (jit/src/prelude/mod.rs), on the
 * shm-maps layouts and protocols (shm-maps/src/maps/):
 *   | id      | helper                      | notes                                         |
 *   |---------|-----------------------------|-----------------------------------------------|
 *   | 1, 2, 3 | map lookup/update/delete    | Array, PerThreadArray (value set env->thread),|
 *   |         |                             | Hash (stripe pid lock, state word, seq lock,  |
 *   |         |                             | count), RingBuf (NULL / -EINVAL)              |
 *   | 5, 502  | ktime_get_ns, globaltimer   | %globaltimer (host: MONOTONIC / REALTIME)     |
 *   | 6, 501  | trace_printk, puts          | one 64-byte record in the trace ring; r0 = 0  |
 *   | 7       | get_prandom_u32             | xorshift64, per-thread state (see below)      |
 *   | 130-133 | ringbuf output/reserve/     | producer pid lock, records `len|BUSY|DISCARD` |
 *   |         | submit/discard              |                                               |
 *   | 503-505,| block_idx/dim, thread_idx,  | GPU: %ctaid/%ntid/%tid/%nctaid. Host: derived |
 *   | 508     | grid_dim                    | from the JobCtx index/n with blocks of 256, as|
 *   |         |                             | ebpf::interp does                            |
 *   | 506     | membar                      | membar.sys                                    |
 *   | 521     | membar_gpu                  | fence.acq_rel.gpu (host: as 506)              |
 *   | 507     | exit                        | ends the run, r0 = 0                          |
 *   | 509-511 | sm_id, warp_id, lane_id     | GPU: %smid, tid.x/32, %laneid. Host: as       |
 *   |         |                             | ebpf::interp (env->thread, index%256/32, %32) |
 *   | 520     | wait_until(deadline, flags) | spin on the 502 clock to the deadline (<= 1 s |
 *   |         |                             | ahead), r0 = the time it stopped              |
 *
 * Trace ring record (layout of jit/src/prelude): seq u64 (k+1, release, last), helper u32,
 * fmt_len u32, fmt u64 (address), args[3] u64, thread u64 (= env->thread here; the JIT writes
 * its global thread id), %globaltimer u64.
 */
#ifndef BPF_INTERP_CUH
#define BPF_INTERP_CUH

typedef unsigned long long bpf_u64;
typedef unsigned int bpf_u32;
typedef unsigned short bpf_u16;
typedef unsigned char bpf_u8;
typedef long long bpf_s64;
typedef int bpf_s32;
typedef short bpf_s16;
typedef signed char bpf_s8;

/* ---- Fixed interface (mirrored in device/src/cuda/bytecode.rs) ------------------------ */

/* One map of a program (56 bytes). */
struct bpf_map_desc {
    bpf_u64 base;        /* device-visible address of the map header (shm-maps layout) */
    bpf_u32 kind;        /* MapKind id: BPF_MAP_KIND_* */
    bpf_u32 key_size, value_size, max_entries, threads, flags;
    /* An emulated slower tier every helper access pays (jit::MapTier; 0, 0: local): */
    bpf_u64 tier_ns;     /* latency added to each access */
    bpf_u64 tier_ps;     /* picoseconds per byte at the tier's cap, 0 = no cap */
    bpf_u64 tier_tat;    /* address of the link's next free time (globaltimer ns) */
};

/* One program (32 bytes). */
struct bpf_prog_desc {
    bpf_u64 insns;       /* address of n_insns raw 8-byte eBPF slots, relocated */
    bpf_u64 maps;        /* address of struct bpf_map_desc[n_maps] */
    bpf_u32 n_insns, n_maps;
    bpf_u32 stack_size;  /* bytes per frame, from the verifier (<= 512; 0 means 512) */
    bpf_u32 reserved;
};

/* Per-thread run environment (32 bytes). */
struct bpf_env {
    bpf_u64 trace_buf;   /* trace ring address, 0 = drop trace output */
    bpf_u64 max_insns;   /* instruction budget per run, 0 = unlimited */
    bpf_u32 thread;      /* value-set index of per-thread arrays, NOT reduced: a thread >= the
                            map's `threads` gets NULL / -E2BIG, as the JIT does with its global
                            thread id. Also the trace record's thread, the prandom slot
                            (mod 4096) and, on the host, get_sm_id. */
    bpf_u32 lock_pid;    /* pid written into shared-map lock words (JitOptions::lock_pid) */
    bpf_u64 r2;          /* r2 at entry: 0 for jobs; the block length in --mem mode (then
                            ctx is the block's address) */
};

#define BPF_MAP_KIND_HASH 1u
#define BPF_MAP_KIND_ARRAY 2u
#define BPF_MAP_KIND_PER_THREAD_ARRAY 6u
#define BPF_MAP_KIND_RINGBUF 27u

/* Return codes of bpf_interp_run. */
#define BPF_INTERP_OK 0
#define BPF_INTERP_EBUDGET 1  /* max_insns exhausted */
#define BPF_INTERP_EOPCODE 2  /* unknown opcode byte or bad discriminator (off/imm/src) */
#define BPF_INTERP_EREG 3     /* register > r10, or a write to r10 */
#define BPF_INTERP_EJUMP 4    /* jump/call target outside the program, or fell off the end */
#define BPF_INTERP_EHELPER 5  /* unknown helper id (kfunc calls too) */
#define BPF_INTERP_EDEPTH 6   /* more than BPF_INTERP_MAX_FRAMES frames */
#define BPF_INTERP_EMAP 7     /* map helper: r1 is not a map of the program, or wrong kind */
#define BPF_INTERP_EALIGN 8   /* misaligned atomic access */
#define BPF_INTERP_ELDIMM 9   /* ld_imm64 not relocated (src != 0) or missing second slot */
#define BPF_INTERP_EPROG 10   /* bad descriptor: no instructions */

#define BPF_INTERP_MAX_FRAMES 8
#define BPF_INTERP_FRAME_MAX 512
#ifndef BPF_PRANDOM_SLOTS
#define BPF_PRANDOM_SLOTS 4096 /* per-thread prandom states (a module global: 32 KB) */
#endif

/* ---- Portability layer ---------------------------------------------------------------- */

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define BPF_DEV __device__
#else
#define BPF_DEV
#endif
#define BPF_FN static inline BPF_DEV
/* Linkage of bpf_interp_run: internal by default (include the header in the kernel's one
 * translation unit); define BPF_INTERP_API before including to change it. */
#ifndef BPF_INTERP_API
#define BPF_INTERP_API BPF_FN
#endif

#if defined(__CUDA_ARCH__)
#define BPF_GPU 1
#elif !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#define BPF_HOST 1
#include <time.h>
#else
#define BPF_STUB 1 /* nvcc host pass: parsed, never run */
#endif

/* get_prandom_u32 state, one slot per env->thread mod 4096 (separate from the JIT's bpf_prandom_state, so both can live in one module). */
#if defined(BPF_HOST)
static __thread bpf_u64 bpf_interp_prandom_state[BPF_PRANDOM_SLOTS];
#else
__device__ bpf_u64 bpf_interp_prandom_state[BPF_PRANDOM_SLOTS];
#endif

#define BPF_P8(a) ((bpf_u8 *)(a))

#if defined(BPF_GPU)
BPF_FN bpf_u64 bpf_ld_acq64(bpf_u64 a) { bpf_u64 v; asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(a) : "memory"); return v; }
BPF_FN bpf_u64 bpf_ld_rlx64(bpf_u64 a) { bpf_u64 v; asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(a) : "memory"); return v; }
BPF_FN bpf_u32 bpf_ld_rlx32(bpf_u64 a) { bpf_u32 v; asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(a) : "memory"); return v; }
BPF_FN void bpf_st_rel64(bpf_u64 a, bpf_u64 v) { asm volatile("st.release.sys.u64 [%0], %1;" :: "l"(a), "l"(v) : "memory"); }
BPF_FN void bpf_st_rel32(bpf_u64 a, bpf_u32 v) { asm volatile("st.release.sys.u32 [%0], %1;" :: "l"(a), "r"(v) : "memory"); }
BPF_FN void bpf_st_rlx64(bpf_u64 a, bpf_u64 v) { asm volatile("st.relaxed.sys.u64 [%0], %1;" :: "l"(a), "l"(v) : "memory"); }
BPF_FN void bpf_st_rlx32(bpf_u64 a, bpf_u32 v) { asm volatile("st.relaxed.sys.u32 [%0], %1;" :: "l"(a), "r"(v) : "memory"); }
BPF_FN bpf_u64 bpf_cas_acq64(bpf_u64 a, bpf_u64 cmp, bpf_u64 v) { bpf_u64 o; asm volatile("atom.acquire.sys.cas.b64 %0, [%1], %2, %3;" : "=l"(o) : "l"(a), "l"(cmp), "l"(v) : "memory"); return o; }
BPF_FN bpf_u32 bpf_cas_acq32(bpf_u64 a, bpf_u32 cmp, bpf_u32 v) { bpf_u32 o; asm volatile("atom.acquire.sys.cas.b32 %0, [%1], %2, %3;" : "=r"(o) : "l"(a), "r"(cmp), "r"(v) : "memory"); return o; }
BPF_FN bpf_u64 bpf_cas_rlx64(bpf_u64 a, bpf_u64 cmp, bpf_u64 v) { bpf_u64 o; asm volatile("atom.relaxed.sys.cas.b64 %0, [%1], %2, %3;" : "=l"(o) : "l"(a), "l"(cmp), "l"(v) : "memory"); return o; }
BPF_FN bpf_u64 bpf_add_rlx64(bpf_u64 a, bpf_u64 v) { bpf_u64 o; asm volatile("atom.relaxed.sys.add.u64 %0, [%1], %2;" : "=l"(o) : "l"(a), "l"(v) : "memory"); return o; }
BPF_FN void bpf_fence(void) { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
BPF_FN void bpf_membar(void) { asm volatile("membar.sys;" ::: "memory"); }
BPF_FN void bpf_membar_gpu(void) { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
BPF_FN void bpf_pause(void) { asm volatile("nanosleep.u32 64;" ::: "memory"); }
BPF_FN bpf_u64 bpf_globaltimer(void) { bpf_u64 v; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v)); return v; }
#define BPF_ATOM64(NAME, OP) \
    BPF_FN bpf_u64 NAME(bpf_u64 a, bpf_u64 v) { bpf_u64 o; asm volatile("atom.acq_rel.sys." OP " %0, [%1], %2;" : "=l"(o) : "l"(a), "l"(v) : "memory"); return o; }
#define BPF_ATOM32(NAME, OP) \
    BPF_FN bpf_u32 NAME(bpf_u64 a, bpf_u32 v) { bpf_u32 o; asm volatile("atom.acq_rel.sys." OP " %0, [%1], %2;" : "=r"(o) : "l"(a), "r"(v) : "memory"); return o; }
BPF_ATOM64(bpf_atom_add64, "add.u64")
BPF_ATOM64(bpf_atom_or64, "or.b64")
BPF_ATOM64(bpf_atom_and64, "and.b64")
BPF_ATOM64(bpf_atom_xor64, "xor.b64")
BPF_ATOM64(bpf_atom_xchg64, "exch.b64")
BPF_ATOM32(bpf_atom_add32, "add.u32")
BPF_ATOM32(bpf_atom_or32, "or.b32")
BPF_ATOM32(bpf_atom_and32, "and.b32")
BPF_ATOM32(bpf_atom_xor32, "xor.b32")
BPF_ATOM32(bpf_atom_xchg32, "exch.b32")
BPF_FN bpf_u64 bpf_atom_cas64(bpf_u64 a, bpf_u64 cmp, bpf_u64 v) { bpf_u64 o; asm volatile("atom.acq_rel.sys.cas.b64 %0, [%1], %2, %3;" : "=l"(o) : "l"(a), "l"(cmp), "l"(v) : "memory"); return o; }
BPF_FN bpf_u32 bpf_atom_cas32(bpf_u64 a, bpf_u32 cmp, bpf_u32 v) { bpf_u32 o; asm volatile("atom.acq_rel.sys.cas.b32 %0, [%1], %2, %3;" : "=r"(o) : "l"(a), "r"(cmp), "r"(v) : "memory"); return o; }
/* Plain memory accesses. The CPU reference allows misaligned data, and a misaligned access
 * kills a GPU context, so one whose address is not a multiple of its size goes byte by byte
 * (little-endian, as eBPF on x86 and the GPU). */
BPF_FN bpf_u64 bpf_ld_bytes(bpf_u64 a, int n) {
    bpf_u64 v = 0;
    for (int i = 0; i < n; i++) v |= (bpf_u64)(*(const volatile unsigned char *)(a + i)) << (8 * i);
    return v;
}
BPF_FN void bpf_st_bytes(bpf_u64 a, bpf_u64 v, int n) {
    for (int i = 0; i < n; i++) *(volatile unsigned char *)(a + i) = (unsigned char)(v >> (8 * i));
}
#define BPF_LD(T, a)                                                                        \
    ((((bpf_u64)(a)) & (sizeof(T) - 1)) ? (T)bpf_ld_bytes((bpf_u64)(a), (int)sizeof(T))     \
                                        : *(const volatile T *)(a))
#define BPF_ST(T, a, v)                                                                     \
    do {                                                                                    \
        const bpf_u64 bpf_a_ = (bpf_u64)(a);                                                \
        if (bpf_a_ & (sizeof(T) - 1)) bpf_st_bytes(bpf_a_, (bpf_u64)(T)(v), (int)sizeof(T)); \
        else *(T *)bpf_a_ = (T)(v);                                                         \
    } while (0)
#elif defined(BPF_HOST)
#define BPF_MO_RLX __ATOMIC_RELAXED
#define BPF_MO_ACQ __ATOMIC_ACQUIRE
#define BPF_MO_REL __ATOMIC_RELEASE
#define BPF_MO_SC __ATOMIC_SEQ_CST
BPF_FN bpf_u64 bpf_ld_acq64(bpf_u64 a) { return __atomic_load_n((bpf_u64 *)a, BPF_MO_ACQ); }
BPF_FN bpf_u64 bpf_ld_rlx64(bpf_u64 a) { return __atomic_load_n((bpf_u64 *)a, BPF_MO_RLX); }
BPF_FN bpf_u32 bpf_ld_rlx32(bpf_u64 a) { return __atomic_load_n((bpf_u32 *)a, BPF_MO_RLX); }
BPF_FN void bpf_st_rel64(bpf_u64 a, bpf_u64 v) { __atomic_store_n((bpf_u64 *)a, v, BPF_MO_REL); }
BPF_FN void bpf_st_rel32(bpf_u64 a, bpf_u32 v) { __atomic_store_n((bpf_u32 *)a, v, BPF_MO_REL); }
BPF_FN void bpf_st_rlx64(bpf_u64 a, bpf_u64 v) { __atomic_store_n((bpf_u64 *)a, v, BPF_MO_RLX); }
BPF_FN void bpf_st_rlx32(bpf_u64 a, bpf_u32 v) { __atomic_store_n((bpf_u32 *)a, v, BPF_MO_RLX); }
BPF_FN bpf_u64 bpf_cas_acq64(bpf_u64 a, bpf_u64 cmp, bpf_u64 v) { __atomic_compare_exchange_n((bpf_u64 *)a, &cmp, v, 0, BPF_MO_ACQ, BPF_MO_ACQ); return cmp; }
BPF_FN bpf_u32 bpf_cas_acq32(bpf_u64 a, bpf_u32 cmp, bpf_u32 v) { __atomic_compare_exchange_n((bpf_u32 *)a, &cmp, v, 0, BPF_MO_ACQ, BPF_MO_ACQ); return cmp; }
BPF_FN bpf_u64 bpf_cas_rlx64(bpf_u64 a, bpf_u64 cmp, bpf_u64 v) { __atomic_compare_exchange_n((bpf_u64 *)a, &cmp, v, 0, BPF_MO_RLX, BPF_MO_RLX); return cmp; }
BPF_FN bpf_u64 bpf_add_rlx64(bpf_u64 a, bpf_u64 v) { return __atomic_fetch_add((bpf_u64 *)a, v, BPF_MO_RLX); }
BPF_FN void bpf_fence(void) { __atomic_thread_fence(BPF_MO_SC); }
BPF_FN void bpf_membar(void) { __atomic_thread_fence(BPF_MO_SC); }
BPF_FN void bpf_membar_gpu(void) { __atomic_thread_fence(BPF_MO_SC); }
BPF_FN void bpf_pause(void) { }
BPF_FN bpf_u64 bpf_clock(int realtime) {
    struct timespec ts;
    clock_gettime(realtime ? CLOCK_REALTIME : CLOCK_MONOTONIC, &ts);
    return (bpf_u64)ts.tv_sec * 1000000000ull + (bpf_u64)ts.tv_nsec;
}
BPF_FN bpf_u64 bpf_globaltimer(void) { return bpf_clock(1); }
BPF_FN bpf_u64 bpf_atom_add64(bpf_u64 a, bpf_u64 v) { return __atomic_fetch_add((bpf_u64 *)a, v, BPF_MO_SC); }
BPF_FN bpf_u64 bpf_atom_or64(bpf_u64 a, bpf_u64 v) { return __atomic_fetch_or((bpf_u64 *)a, v, BPF_MO_SC); }
BPF_FN bpf_u64 bpf_atom_and64(bpf_u64 a, bpf_u64 v) { return __atomic_fetch_and((bpf_u64 *)a, v, BPF_MO_SC); }
BPF_FN bpf_u64 bpf_atom_xor64(bpf_u64 a, bpf_u64 v) { return __atomic_fetch_xor((bpf_u64 *)a, v, BPF_MO_SC); }
BPF_FN bpf_u64 bpf_atom_xchg64(bpf_u64 a, bpf_u64 v) { return __atomic_exchange_n((bpf_u64 *)a, v, BPF_MO_SC); }
BPF_FN bpf_u32 bpf_atom_add32(bpf_u64 a, bpf_u32 v) { return __atomic_fetch_add((bpf_u32 *)a, v, BPF_MO_SC); }
BPF_FN bpf_u32 bpf_atom_or32(bpf_u64 a, bpf_u32 v) { return __atomic_fetch_or((bpf_u32 *)a, v, BPF_MO_SC); }
BPF_FN bpf_u32 bpf_atom_and32(bpf_u64 a, bpf_u32 v) { return __atomic_fetch_and((bpf_u32 *)a, v, BPF_MO_SC); }
BPF_FN bpf_u32 bpf_atom_xor32(bpf_u64 a, bpf_u32 v) { return __atomic_fetch_xor((bpf_u32 *)a, v, BPF_MO_SC); }
BPF_FN bpf_u32 bpf_atom_xchg32(bpf_u64 a, bpf_u32 v) { return __atomic_exchange_n((bpf_u32 *)a, v, BPF_MO_SC); }
BPF_FN bpf_u64 bpf_atom_cas64(bpf_u64 a, bpf_u64 cmp, bpf_u64 v) { __atomic_compare_exchange_n((bpf_u64 *)a, &cmp, v, 0, BPF_MO_SC, BPF_MO_SC); return cmp; }
BPF_FN bpf_u32 bpf_atom_cas32(bpf_u64 a, bpf_u32 cmp, bpf_u32 v) { __atomic_compare_exchange_n((bpf_u32 *)a, &cmp, v, 0, BPF_MO_SC, BPF_MO_SC); return cmp; }
/* Unaligned-safe plain accesses (the reference interpreter allows unaligned data). */
#define BPF_LD(T, a) ({ T bpf_t_; __builtin_memcpy(&bpf_t_, (const void *)(a), sizeof(T)); bpf_t_; })
#define BPF_ST(T, a, v) do { T bpf_t_ = (T)(v); __builtin_memcpy((void *)(a), &bpf_t_, sizeof(T)); } while (0)
#else /* BPF_STUB */
BPF_FN bpf_u64 bpf_ld_acq64(bpf_u64 a) { return *(volatile bpf_u64 *)a; }
BPF_FN bpf_u64 bpf_ld_rlx64(bpf_u64 a) { return *(volatile bpf_u64 *)a; }
BPF_FN bpf_u32 bpf_ld_rlx32(bpf_u64 a) { return *(volatile bpf_u32 *)a; }
BPF_FN void bpf_st_rel64(bpf_u64 a, bpf_u64 v) { *(volatile bpf_u64 *)a = v; }
BPF_FN void bpf_st_rel32(bpf_u64 a, bpf_u32 v) { *(volatile bpf_u32 *)a = v; }
BPF_FN void bpf_st_rlx64(bpf_u64 a, bpf_u64 v) { *(volatile bpf_u64 *)a = v; }
BPF_FN void bpf_st_rlx32(bpf_u64 a, bpf_u32 v) { *(volatile bpf_u32 *)a = v; }
BPF_FN bpf_u64 bpf_cas_acq64(bpf_u64 a, bpf_u64 c, bpf_u64 v) { bpf_u64 o = *(bpf_u64 *)a; if (o == c) *(bpf_u64 *)a = v; return o; }
BPF_FN bpf_u32 bpf_cas_acq32(bpf_u64 a, bpf_u32 c, bpf_u32 v) { bpf_u32 o = *(bpf_u32 *)a; if (o == c) *(bpf_u32 *)a = v; return o; }
BPF_FN bpf_u64 bpf_cas_rlx64(bpf_u64 a, bpf_u64 c, bpf_u64 v) { return bpf_cas_acq64(a, c, v); }
BPF_FN bpf_u64 bpf_add_rlx64(bpf_u64 a, bpf_u64 v) { bpf_u64 o = *(bpf_u64 *)a; *(bpf_u64 *)a = o + v; return o; }
BPF_FN void bpf_fence(void) { }
BPF_FN void bpf_membar(void) { }
BPF_FN void bpf_membar_gpu(void) { }
BPF_FN void bpf_pause(void) { }
BPF_FN bpf_u64 bpf_globaltimer(void) { return 0; }
BPF_FN bpf_u64 bpf_atom_add64(bpf_u64 a, bpf_u64 v) { bpf_u64 o = *(bpf_u64 *)a; *(bpf_u64 *)a = o + v; return o; }
BPF_FN bpf_u64 bpf_atom_or64(bpf_u64 a, bpf_u64 v) { bpf_u64 o = *(bpf_u64 *)a; *(bpf_u64 *)a = o | v; return o; }
BPF_FN bpf_u64 bpf_atom_and64(bpf_u64 a, bpf_u64 v) { bpf_u64 o = *(bpf_u64 *)a; *(bpf_u64 *)a = o & v; return o; }
BPF_FN bpf_u64 bpf_atom_xor64(bpf_u64 a, bpf_u64 v) { bpf_u64 o = *(bpf_u64 *)a; *(bpf_u64 *)a = o ^ v; return o; }
BPF_FN bpf_u64 bpf_atom_xchg64(bpf_u64 a, bpf_u64 v) { bpf_u64 o = *(bpf_u64 *)a; *(bpf_u64 *)a = v; return o; }
BPF_FN bpf_u32 bpf_atom_add32(bpf_u64 a, bpf_u32 v) { bpf_u32 o = *(bpf_u32 *)a; *(bpf_u32 *)a = o + v; return o; }
BPF_FN bpf_u32 bpf_atom_or32(bpf_u64 a, bpf_u32 v) { bpf_u32 o = *(bpf_u32 *)a; *(bpf_u32 *)a = o | v; return o; }
BPF_FN bpf_u32 bpf_atom_and32(bpf_u64 a, bpf_u32 v) { bpf_u32 o = *(bpf_u32 *)a; *(bpf_u32 *)a = o & v; return o; }
BPF_FN bpf_u32 bpf_atom_xor32(bpf_u64 a, bpf_u32 v) { bpf_u32 o = *(bpf_u32 *)a; *(bpf_u32 *)a = o ^ v; return o; }
BPF_FN bpf_u32 bpf_atom_xchg32(bpf_u64 a, bpf_u32 v) { bpf_u32 o = *(bpf_u32 *)a; *(bpf_u32 *)a = v; return o; }
BPF_FN bpf_u64 bpf_atom_cas64(bpf_u64 a, bpf_u64 c, bpf_u64 v) { return bpf_cas_acq64(a, c, v); }
BPF_FN bpf_u32 bpf_atom_cas32(bpf_u64 a, bpf_u32 c, bpf_u32 v) { return bpf_cas_acq32(a, c, v); }
#define BPF_LD(T, a) (*(const volatile T *)(a))
#define BPF_ST(T, a, v) (*(T *)(a) = (T)(v))
#endif

/* ---- Helpers -------------------------------------------------------------------------- */

#define BPF_ENOENT ((bpf_u64)(bpf_s64)-2)
#define BPF_E2BIG ((bpf_u64)(bpf_s64)-7)
#define BPF_EAGAIN ((bpf_u64)(bpf_s64)-11)
#define BPF_EEXIST ((bpf_u64)(bpf_s64)-17)
#define BPF_EINVAL ((bpf_u64)(bpf_s64)-22)
#define BPF_RB_BUSY 0x80000000u
#define BPF_RB_DISCARD 0x40000000u
#define BPF_RB_LEN_MASK 0x3fffffffu

BPF_FN bpf_u64 bpf_round_up(bpf_u64 n, bpf_u64 a) { return (n + a - 1) / a * a; }

/* Spin-takes the u32 pid lock at `a` (CAS 0 -> pid). Never steals from a dead holder. */
BPF_FN void bpf_pid_lock(bpf_u64 a, bpf_u32 pid) {
    while (bpf_cas_acq32(a, 0, pid) != 0) bpf_pause();
}
BPF_FN void bpf_pid_unlock(bpf_u64 a) { bpf_st_rel32(a, 0); }

/* Seq lock of an entry: even -> odd | pid << 32; returns the odd sequence. */
BPF_FN bpf_u64 bpf_seq_lock(bpf_u64 a, bpf_u32 pid, int owned) {
    bpf_u64 pidw = (bpf_u64)pid << 32;
    if (owned) {
        bpf_u64 s = bpf_ld_rlx64(a) & 0xffffffffull;
        s = (s + ((s & 1) ^ 1)) & 0xffffffffull;
        bpf_st_rlx64(a, s | pidw);
        bpf_fence();
        return s;
    }
    for (;;) {
        bpf_u64 w = bpf_ld_rlx64(a);
        bpf_u64 s = w & 0xffffffffull;
        if (s & 1) { bpf_pause(); continue; }
        s = (s + 1) & 0xffffffffull;
        if (bpf_cas_acq64(a, w, s | pidw) == w) { bpf_fence(); return s; }
    }
}
BPF_FN void bpf_seq_unlock(bpf_u64 a, bpf_u64 odd) { bpf_st_rel64(a, (odd + 1) & 0xffffffffull); }

BPF_FN void bpf_copy(bpf_u64 dst, bpf_u64 src, bpf_u64 n) {
    for (bpf_u64 i = 0; i < n; i++) BPF_P8(dst)[i] = BPF_LD(bpf_u8, src + i);
}

/* Array geometry. */
BPF_FN bpf_u64 bpf_array_values(const struct bpf_map_desc *m) {
    bpf_u64 t = m->threads ? m->threads : 1;
    return m->base + bpf_round_up(64 + 8 * t * (bpf_u64)m->max_entries, 64);
}
/* Flat index of key `*(u32 *)key` for `thread`, or -1 when out of range. */
BPF_FN bpf_s64 bpf_array_index(const struct bpf_map_desc *m, bpf_u64 key, bpf_u32 thread) {
    bpf_u32 i = BPF_LD(bpf_u32, key);
    if (i >= m->max_entries) return -1;
    bpf_u64 idx = i;
    if (m->kind == BPF_MAP_KIND_PER_THREAD_ARRAY) {
        bpf_u64 t = m->threads ? m->threads : 1;
        if ((bpf_u64)thread >= t) return -1;
        idx += (bpf_u64)thread * m->max_entries;
    }
    return (bpf_s64)idx;
}

/* Hash geometry (shm-maps/src/maps/hash.rs). */
struct bpf_hash_geo { bpf_u64 slots, locks, slot_base, slot_size, voff; };
BPF_FN struct bpf_hash_geo bpf_hash_geometry(const struct bpf_map_desc *m) {
    struct bpf_hash_geo g;
    bpf_u64 want = 2 * (bpf_u64)m->max_entries;
    bpf_u64 s = 1;
    if (want < 1) want = 1;
    while (s < want) s <<= 1;
    g.slots = s;
    g.locks = s < 1024 ? s : 1024;
    g.slot_base = m->base + bpf_round_up(64 + 4 * g.locks, 64);
    g.voff = 16 + bpf_round_up(m->key_size, 8);
    g.slot_size = g.voff + bpf_round_up(m->value_size, 8);
    return g;
}
BPF_FN bpf_u64 bpf_hash_key(bpf_u64 key, bpf_u32 n) {
    bpf_u64 h = 0xcbf29ce484222325ull;
    for (bpf_u32 i = 0; i < n; i++) {
        h ^= BPF_LD(bpf_u8, key + i);
        h *= 0x00000100000001b3ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}
/* Lock-free probe: the state address of the live slot holding the key, or 0. */
BPF_FN bpf_u64 bpf_hash_find(const struct bpf_map_desc *m, const struct bpf_hash_geo *g, bpf_u64 h, bpf_u64 key) {
    for (bpf_u64 i = 0; i < g->slots; i++) {
        bpf_u64 st = g->slot_base + ((h + i) & (g->slots - 1)) * g->slot_size;
        for (;;) {
            bpf_u64 s = bpf_ld_acq64(st);
            bpf_u64 tag = s & 3;
            if (tag == 0) return 0;
            if (tag != 2) break;
            int eq = 1;
            for (bpf_u32 k = 0; k < m->key_size; k++) {
                if (BPF_LD(bpf_u8, key + k) != BPF_LD(bpf_u8, st + 16 + k)) { eq = 0; break; }
            }
            bpf_fence();
            if (bpf_ld_rlx64(st) != s) continue; /* changed under us: look again */
            if (eq) return st;
            break;
        }
    }
    return 0;
}
BPF_FN bpf_u64 bpf_hash_lock_addr(const struct bpf_map_desc *m, const struct bpf_hash_geo *g, bpf_u64 h) {
    return m->base + 64 + 4 * ((h & (g->slots - 1)) & (g->locks - 1));
}

/* An access of `bytes` to a map in an emulated tier waits until the clock passes
 * max(start + tier_ns, end), `end` being when the tier's link has carried the bytes behind
 * every earlier access: its next free time is raised to now if the link was idle, then
 * the bytes are added to it. Both only ever raise it, so concurrent accesses queue behind
 * each other and none is lost. The JIT's map helpers do the same (jit/src/prelude,
 * tier_wait, with atom.max). */
BPF_FN void bpf_tier_wait_at(bpf_u64 ns, bpf_u64 ps, bpf_u64 tat, bpf_u64 bytes) {
    if (!ns && !ps) return;
    bpf_u64 start = bpf_globaltimer(), deadline = start + ns;
    if (ps) {
        bpf_u64 cost = (bytes * ps + 999) / 1000;
        bpf_u64 cur = bpf_ld_rlx64(tat);
        while (cur < start) {
            bpf_u64 o = bpf_cas_rlx64(tat, cur, start);
            if (o == cur) break;
            cur = o;
        }
        bpf_u64 end = bpf_add_rlx64(tat, cost) + cost;
        if (end > deadline) deadline = end;
    }
    while (bpf_globaltimer() < deadline) {}
}
/* The same for job buffers in a tier (runtime.cu, job_tier). */
BPF_FN void bpf_tier_wait(const struct bpf_map_desc *m, bpf_u64 bytes) {
    bpf_tier_wait_at(m->tier_ns, m->tier_ps, m->tier_tat, bytes);
}

BPF_FN bpf_u64 bpf_map_lookup(const struct bpf_map_desc *m, bpf_u64 key, const struct bpf_env *env) {
    if (m->kind == BPF_MAP_KIND_ARRAY || m->kind == BPF_MAP_KIND_PER_THREAD_ARRAY) {
        bpf_s64 idx = bpf_array_index(m, key, env->thread);
        if (idx < 0) return 0;
        return bpf_array_values(m) + (bpf_u64)idx * bpf_round_up(m->value_size, 8);
    }
    if (m->kind == BPF_MAP_KIND_HASH) {
        struct bpf_hash_geo g = bpf_hash_geometry(m);
        bpf_u64 st = bpf_hash_find(m, &g, bpf_hash_key(key, m->key_size), key);
        return st ? st + g.voff : 0;
    }
    return 0;
}

/* Inserts a new key (its stripe lock held): reserve a unit of `count`, claim an empty or
 * deleted slot, fill it, publish it live. */
BPF_FN bpf_u64 bpf_hash_insert(const struct bpf_map_desc *m, const struct bpf_hash_geo *g, bpf_u64 h, bpf_u64 key, bpf_u64 val, bpf_u32 pid) {
    bpf_u64 count = m->base + 48;
    for (;;) {
        bpf_u64 c = bpf_ld_rlx64(count);
        if (c >= m->max_entries) return BPF_E2BIG;
        if (bpf_cas_rlx64(count, c, c + 1) == c) break;
    }
    bpf_u64 claimed = 0, nstate = 0;
    for (bpf_u64 i = 0; i < g->slots && !claimed; i++) {
        bpf_u64 cand = g->slot_base + ((h + i) & (g->slots - 1)) * g->slot_size;
        bpf_u64 s = bpf_ld_rlx64(cand);
        for (;;) {
            bpf_u64 tag = s & 3;
            if (tag != 0 && tag != 3) break;
            nstate = (((s & 0xfffffffcull) + 4) & 0xfffffffcull) | ((bpf_u64)pid << 32) | 1;
            bpf_u64 o = bpf_cas_acq64(cand, s, nstate);
            if (o == s) { claimed = cand; break; }
            s = o;
        }
    }
    if (!claimed) {
        bpf_add_rlx64(count, (bpf_u64)-1);
        return BPF_E2BIG;
    }
    bpf_fence();
    bpf_u64 sq = bpf_ld_rlx64(claimed + 8) & 0xffffffffull;
    sq = (sq + (sq & 1)) & 0xffffffffull;
    bpf_st_rlx64(claimed + 8, sq);
    bpf_copy(claimed + 16, key, m->key_size);
    bpf_copy(claimed + g->voff, val, m->value_size);
    bpf_st_rel64(claimed, (nstate & 0xfffffffcull) | 2);
    return 0;
}

BPF_FN bpf_u64 bpf_map_update(const struct bpf_map_desc *m, bpf_u64 key, bpf_u64 val, bpf_u64 flags, const struct bpf_env *env) {
    if (m->kind == BPF_MAP_KIND_RINGBUF) return BPF_EINVAL;
    if (flags > 2) return BPF_EINVAL;
    if (m->kind == BPF_MAP_KIND_ARRAY || m->kind == BPF_MAP_KIND_PER_THREAD_ARRAY) {
        if (flags == 1) return BPF_EEXIST;
        bpf_s64 idx = bpf_array_index(m, key, env->thread);
        if (idx < 0) return BPF_E2BIG;
        bpf_u64 seq = m->base + 64 + 8 * (bpf_u64)idx;
        bpf_u64 dst = bpf_array_values(m) + (bpf_u64)idx * bpf_round_up(m->value_size, 8);
        bpf_u64 odd = bpf_seq_lock(seq, env->lock_pid, m->kind == BPF_MAP_KIND_PER_THREAD_ARRAY);
        bpf_copy(dst, val, m->value_size);
        bpf_seq_unlock(seq, odd);
        return 0;
    }
    /* Hash */
    struct bpf_hash_geo g = bpf_hash_geometry(m);
    bpf_u64 h = bpf_hash_key(key, m->key_size);
    bpf_u64 lock = bpf_hash_lock_addr(m, &g, h);
    bpf_u64 r0;
    bpf_pid_lock(lock, env->lock_pid);
    bpf_u64 st = bpf_hash_find(m, &g, h, key);
    if (st) {
        if (flags == 1) {
            r0 = BPF_EEXIST;
        } else {
            bpf_u64 odd = bpf_seq_lock(st + 8, env->lock_pid, 0);
            bpf_copy(st + g.voff, val, m->value_size);
            bpf_seq_unlock(st + 8, odd);
            r0 = 0;
        }
    } else if (flags == 2) {
        r0 = BPF_ENOENT;
    } else {
        r0 = bpf_hash_insert(m, &g, h, key, val, env->lock_pid);
    }
    bpf_pid_unlock(lock);
    return r0;
}

BPF_FN bpf_u64 bpf_map_delete(const struct bpf_map_desc *m, bpf_u64 key, const struct bpf_env *env) {
    if (m->kind != BPF_MAP_KIND_HASH) return BPF_EINVAL;
    struct bpf_hash_geo g = bpf_hash_geometry(m);
    bpf_u64 h = bpf_hash_key(key, m->key_size);
    bpf_u64 lock = bpf_hash_lock_addr(m, &g, h);
    bpf_u64 r0 = BPF_ENOENT;
    bpf_pid_lock(lock, env->lock_pid);
    bpf_u64 st = bpf_hash_find(m, &g, h, key);
    if (st) {
        bpf_u64 s = bpf_ld_rlx64(st);
        bpf_st_rel64(st, (s & 0xfffffffcull) | 3);
        bpf_add_rlx64(m->base + 48, (bpf_u64)-1);
        r0 = 0;
    }
    bpf_pid_unlock(lock);
    return r0;
}

/* Ring buffer reservation of `size` bytes: the record's data address, 0 when the record is
 * too large (*big = 1) or there is no room (*big = 0). */
BPF_FN bpf_u64 bpf_rb_reserve(const struct bpf_map_desc *m, bpf_u64 size, bpf_u32 pid, int *big) {
    bpf_u64 ring = m->max_entries;
    *big = 1;
    if (size >= (1ull << 30)) return 0;
    bpf_u64 total = (size + 15) & ~7ull;
    if (total > ring / 2) return 0;
    *big = 0;
    bpf_u64 lock = m->base + 128, data = m->base + 384;
    bpf_pid_lock(lock, pid);
    bpf_u64 prod = bpf_ld_rlx64(m->base + 136);
    bpf_u64 cons = bpf_ld_acq64(m->base + 264);
    bpf_u64 off = prod & (ring - 1);
    bpf_u64 pad = off + total > ring ? ring - off : 0;
    if (prod - cons + pad + total > ring) {
        bpf_pid_unlock(lock);
        return 0;
    }
    if (pad) {
        bpf_st_rlx32(data + off + 4, 0);
        bpf_st_rlx32(data + off, (bpf_u32)(pad - 8) | BPF_RB_DISCARD);
        prod += pad;
    }
    off = prod & (ring - 1);
    bpf_st_rlx32(data + off + 4, pid);
    bpf_st_rlx32(data + off, (bpf_u32)size | BPF_RB_BUSY);
    bpf_st_rel64(m->base + 136, prod + total);
    bpf_pid_unlock(lock);
    return data + off + 8;
}
BPF_FN void bpf_rb_commit(bpf_u64 rec, int discard) {
    bpf_u32 v = bpf_ld_rlx32(rec - 8) & BPF_RB_LEN_MASK;
    if (discard) v |= BPF_RB_DISCARD;
    bpf_st_rel32(rec - 8, v);
}

/* One trace ring record (dropped when env->trace_buf is 0 or the ring has no capacity). */
BPF_FN void bpf_trace(const struct bpf_env *env, bpf_u32 id, bpf_u64 fmt, bpf_u64 len, bpf_u64 a0, bpf_u64 a1, bpf_u64 a2) {
    bpf_u64 tb = env->trace_buf;
    if (!tb) return;
    bpf_u64 k = bpf_add_rlx64(tb, 1);
    bpf_u64 cap = bpf_ld_rlx64(tb + 8);
    if (cap == 0) return;
    bpf_u64 rec = tb + 64 + ((k & (cap - 1)) << 6);
    bpf_st_rlx32(rec + 8, id);
    bpf_st_rlx32(rec + 12, (bpf_u32)len);
    bpf_st_rlx64(rec + 16, fmt);
    bpf_st_rlx64(rec + 24, a0);
    bpf_st_rlx64(rec + 32, a1);
    bpf_st_rlx64(rec + 40, a2);
    bpf_st_rlx64(rec + 48, env->thread);
    bpf_st_rlx64(rec + 56, bpf_globaltimer());
    bpf_st_rel64(rec, k + 1);
}

BPF_FN bpf_u32 bpf_prandom(const struct bpf_env *env) {
    bpf_u64 *st = &bpf_interp_prandom_state[env->thread & (BPF_PRANDOM_SLOTS - 1)];
    bpf_u64 x = *st;
    if (x == 0) x = (bpf_globaltimer() ^ ((bpf_u64)env->thread * 0x9e3779b97f4a7c15ull)) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *st = x;
    return (bpf_u32)(x >> 32);
}

/* Writes x, y, z to the non-NULL pointers among r1..r3. */
BPF_FN void bpf_write3(const bpf_u64 *regs, bpf_u64 x, bpf_u64 y, bpf_u64 z) {
    if (regs[1]) BPF_ST(bpf_u64, regs[1], x);
    if (regs[2]) BPF_ST(bpf_u64, regs[2], y);
    if (regs[3]) BPF_ST(bpf_u64, regs[3], z);
}

/* The descriptor whose base is `addr`, or 0. */
BPF_FN const struct bpf_map_desc *bpf_find_map(const struct bpf_prog_desc *p, bpf_u64 addr) {
    const struct bpf_map_desc *maps = (const struct bpf_map_desc *)p->maps;
    for (bpf_u32 i = 0; i < p->n_maps; i++)
        if (maps[i].base == addr) return &maps[i];
    return 0;
}

#define BPF_HELPER_CONTINUE 0
#define BPF_HELPER_EXIT 1

/* Calls helper `id` on regs r1..r5, sets r0. BPF_HELPER_CONTINUE / BPF_HELPER_EXIT, or a
 * negative error code (-BPF_INTERP_E*). */
BPF_FN int bpf_call_helper(const struct bpf_prog_desc *p, bpf_s32 id, bpf_u64 *regs, bpf_u64 ctx, const struct bpf_env *env) {
    const struct bpf_map_desc *m = 0;
    bpf_u64 r0 = 0;
#if defined(BPF_HOST)
    /* Geometry as ebpf::interp: job index/n from the ctx, blocks of 256. */
    bpf_u64 gi = env->r2 ? 0 : BPF_LD(bpf_u64, ctx + 32);
    bpf_u64 gn = env->r2 ? 1 : BPF_LD(bpf_u64, ctx + 40);
#else
    (void)ctx;
#endif
    switch (id) {
    case 1: case 2: case 3: case 130: case 131:
        m = bpf_find_map(p, regs[1]);
        if (!m) return -BPF_INTERP_EMAP;
        if (id >= 130 && m->kind != BPF_MAP_KIND_RINGBUF) return -BPF_INTERP_EMAP;
        break;
    default:
        break;
    }
    switch (id) {
    case 1: bpf_tier_wait(m, m->value_size); r0 = bpf_map_lookup(m, regs[2], env); break;
    case 2: bpf_tier_wait(m, m->value_size); r0 = bpf_map_update(m, regs[2], regs[3], regs[4], env); break;
    case 3: bpf_tier_wait(m, m->key_size); r0 = bpf_map_delete(m, regs[2], env); break;
    case 5:
#if defined(BPF_HOST)
        r0 = bpf_clock(0);
#else
        r0 = bpf_globaltimer();
#endif
        break;
    case 6: bpf_trace(env, 6, regs[1], regs[2], regs[3], regs[4], regs[5]); r0 = 0; break;
    case 7: r0 = bpf_prandom(env); break;
    case 130: {
        if (regs[4] & ~3ull) { r0 = BPF_EINVAL; break; }
        int big;
        bpf_u64 rec = bpf_rb_reserve(m, regs[3], env->lock_pid, &big);
        if (!rec) { r0 = big ? BPF_E2BIG : BPF_EAGAIN; break; }
        bpf_copy(rec, regs[2], regs[3]);
        bpf_rb_commit(rec, 0);
        r0 = 0;
        break;
    }
    case 131: {
        int big;
        r0 = regs[3] ? 0 : bpf_rb_reserve(m, regs[2], env->lock_pid, &big);
        break;
    }
    case 132: bpf_rb_commit(regs[1], 0); r0 = 0; break;
    case 133: bpf_rb_commit(regs[1], 1); r0 = 0; break;
    case 501: bpf_trace(env, 501, regs[1], 0, 0, 0, 0); r0 = 0; break;
    case 502: r0 = bpf_globaltimer(); break;
    case 520: {
        bpf_u64 t = bpf_globaltimer(), d = regs[1];
        if (d > t + 1000000000ull) d = t + 1000000000ull;
        while (t < d) t = bpf_globaltimer();
        r0 = t;
        break;
    }
#if defined(BPF_GPU)
    case 503: bpf_write3(regs, blockIdx.x, blockIdx.y, blockIdx.z); break;
    case 504: bpf_write3(regs, blockDim.x, blockDim.y, blockDim.z); break;
    case 505: bpf_write3(regs, threadIdx.x, threadIdx.y, threadIdx.z); break;
    case 508: bpf_write3(regs, gridDim.x, gridDim.y, gridDim.z); break;
    case 509: { bpf_u32 v; asm volatile("mov.u32 %0, %%smid;" : "=r"(v)); r0 = v; break; }
    case 510: r0 = threadIdx.x / 32; break;
    case 511: { bpf_u32 v; asm volatile("mov.u32 %0, %%laneid;" : "=r"(v)); r0 = v; break; }
#elif defined(BPF_HOST)
    case 503: bpf_write3(regs, gi / 256, 0, 0); break;
    case 504: bpf_write3(regs, 256, 1, 1); break;
    case 505: bpf_write3(regs, gi % 256, 0, 0); break;
    case 508: bpf_write3(regs, (gn + 255) / 256, 1, 1); break;
    case 509: r0 = env->thread; break;
    case 510: r0 = (gi % 256) / 32; break;
    case 511: r0 = gi % 32; break;
#else
    case 503: case 504: case 505: case 508: case 509: case 510: case 511: break;
#endif
    case 506: bpf_membar(); break;
    case 521: bpf_membar_gpu(); break;
    case 507: regs[0] = 0; return BPF_HELPER_EXIT;
    default: return -BPF_INTERP_EHELPER;
    }
    regs[0] = r0;
    return BPF_HELPER_CONTINUE;
}

/* ---- The interpreter ------------------------------------------------------------------ */

BPF_FN bpf_u64 bpf_bswap16(bpf_u64 x) { return ((x & 0xff) << 8) | ((x >> 8) & 0xff); }
BPF_FN bpf_u64 bpf_bswap32(bpf_u64 x) {
    bpf_u32 v = (bpf_u32)x;
    return (bpf_u64)(((v & 0xffu) << 24) | ((v & 0xff00u) << 8) | ((v >> 8) & 0xff00u) | (v >> 24));
}
BPF_FN bpf_u64 bpf_bswap64(bpf_u64 x) { return (bpf_bswap32(x) << 32) | bpf_bswap32(x >> 32); }

/* Signed 64-bit division and modulo with eBPF's zero and overflow rules. */
BPF_FN bpf_u64 bpf_sdiv64(bpf_u64 x, bpf_u64 y) {
    if (y == 0) return 0;
    if (y == (bpf_u64)-1) return 0 - x;
    return (bpf_u64)((bpf_s64)x / (bpf_s64)y);
}
BPF_FN bpf_u64 bpf_smod64(bpf_u64 x, bpf_u64 y) {
    if (y == 0) return x;
    if (y == (bpf_u64)-1) return 0;
    return (bpf_u64)((bpf_s64)x % (bpf_s64)y);
}
BPF_FN bpf_u64 bpf_sdiv32(bpf_u64 x, bpf_u64 y) {
    bpf_u32 a = (bpf_u32)x, b = (bpf_u32)y;
    if (b == 0) return 0;
    if (b == 0xffffffffu) return (bpf_u32)(0u - a);
    return (bpf_u32)((bpf_s32)a / (bpf_s32)b);
}
BPF_FN bpf_u64 bpf_smod32(bpf_u64 x, bpf_u64 y) {
    bpf_u32 a = (bpf_u32)x, b = (bpf_u32)y;
    if (b == 0) return a;
    if (b == 0xffffffffu) return 0;
    return (bpf_u32)((bpf_s32)a % (bpf_s32)b);
}

/* Whether the 64-bit ALU op byte `op` (code & 0xf0) accepts `off` (its discriminator). */
BPF_FN int bpf_alu_off_ok(bpf_u32 op, bpf_u32 x, bpf_s16 off, int is64) {
    if (op == 0x30 || op == 0x90) return off == 0 || off == 1;
    if (op == 0xb0) {
        if (off == 0) return 1;
        if (!x) return 0;
        return off == 8 || off == 16 || (is64 && off == 32);
    }
    return 1;
}

/* Runs program `p` once with r1 = ctx (r2 = env->r2). Returns BPF_INTERP_OK with the result
 * in *r0, or an error code with the pc of the failing instruction in *err_pc. */
BPF_INTERP_API int bpf_interp_run(const struct bpf_prog_desc *p, bpf_u64 ctx, const struct bpf_env *env, bpf_u64 *r0, bpf_u32 *err_pc) {
    bpf_u64 stack[BPF_INTERP_MAX_FRAMES * BPF_INTERP_FRAME_MAX / 8];
    bpf_u64 saved[BPF_INTERP_MAX_FRAMES][5]; /* r6..r9, return pc */
    bpf_u64 regs[11];
    const bpf_u64 *code = (const bpf_u64 *)p->insns;
    const bpf_u32 n = p->n_insns;
    bpf_u32 fs = p->stack_size ? (bpf_u32)bpf_round_up(p->stack_size, 8) : BPF_INTERP_FRAME_MAX;
    if (fs > BPF_INTERP_FRAME_MAX) fs = BPF_INTERP_FRAME_MAX;
    const bpf_u64 stack_lo = (bpf_u64)stack;
    const bpf_u64 stack_hi = stack_lo + sizeof(stack);
    bpf_u64 budget = env->max_insns;
    bpf_u32 pc = 0, depth = 0;
    int err = BPF_INTERP_OK;

    if (n == 0) { *err_pc = 0; return BPF_INTERP_EPROG; }
    for (int i = 0; i < 11; i++) regs[i] = 0;
    regs[1] = ctx;
    regs[2] = env->r2;
    regs[10] = stack_hi;
    for (bpf_u32 i = 0; i < fs / 8; i++) stack[sizeof(stack) / 8 - 1 - i] = 0;

#define BPF_FAIL(e) do { err = (e); goto fail; } while (0)
#define BPF_JUMP_TO(t) do { bpf_s64 t_ = (t); if (t_ < 0 || t_ >= (bpf_s64)n) BPF_FAIL(BPF_INTERP_EJUMP); next = (bpf_u32)t_; } while (0)

    for (;;) {
        if (pc >= n) { err = BPF_INTERP_EJUMP; goto fail; }
        if (env->max_insns) {
            if (budget == 0) BPF_FAIL(BPF_INTERP_EBUDGET);
            budget--;
        }
        const bpf_u64 raw = code[pc];
        const bpf_u32 opc = (bpf_u32)(raw & 0xff);
        const bpf_u32 dst = (bpf_u32)((raw >> 8) & 0xf);
        const bpf_u32 src = (bpf_u32)((raw >> 12) & 0xf);
        const bpf_s16 off = (bpf_s16)(bpf_u16)(raw >> 16);
        const bpf_s32 imm32 = (bpf_s32)(bpf_u32)(raw >> 32);
        const bpf_u64 imm = (bpf_u64)(bpf_s64)imm32;
        bpf_u32 next = pc + 1;
        if (dst > 10 || src > 10) BPF_FAIL(BPF_INTERP_EREG);
        const bpf_u32 cls = opc & 7;

        switch (cls) {
        case 4: /* ALU */
        case 7: { /* ALU64 */
            const int is64 = cls == 7;
            const bpf_u32 op = opc & 0xf0;
            const bpf_u32 x = opc & 0x08;
            if (dst == 10) BPF_FAIL(BPF_INTERP_EREG);
            if (op == 0xd0) { /* byte order */
                if (imm32 != 16 && imm32 != 32 && imm32 != 64) BPF_FAIL(BPF_INTERP_EOPCODE);
                bpf_u64 v = regs[dst];
                if (!is64 && !x) { /* le */
                    regs[dst] = imm32 == 16 ? (v & 0xffff) : imm32 == 32 ? (v & 0xffffffffull) : v;
                } else if (is64 && x) {
                    BPF_FAIL(BPF_INTERP_EOPCODE);
                } else { /* be, bswap */
                    regs[dst] = imm32 == 16 ? bpf_bswap16(v) : imm32 == 32 ? bpf_bswap32(v) : bpf_bswap64(v);
                }
                break;
            }
            if (op > 0xc0) BPF_FAIL(BPF_INTERP_EOPCODE);
            if (op == 0x80 && x) BPF_FAIL(BPF_INTERP_EOPCODE);
            if (!bpf_alu_off_ok(op, x, off, is64)) BPF_FAIL(BPF_INTERP_EOPCODE);
            const bpf_u64 s = x ? regs[src] : imm;
            const bpf_u64 d = regs[dst];
            bpf_u64 r;
            if (is64) {
                switch (op) {
                case 0x00: r = d + s; break;
                case 0x10: r = d - s; break;
                case 0x20: r = d * s; break;
                case 0x30: r = off ? bpf_sdiv64(d, s) : (s ? d / s : 0); break;
                case 0x40: r = d | s; break;
                case 0x50: r = d & s; break;
                case 0x60: r = d << (s & 63); break;
                case 0x70: r = d >> (s & 63); break;
                case 0x80: r = 0 - d; break;
                case 0x90: r = off ? bpf_smod64(d, s) : (s ? d % s : d); break;
                case 0xa0: r = d ^ s; break;
                case 0xb0:
                    r = off == 8 ? (bpf_u64)(bpf_s64)(bpf_s8)s : off == 16 ? (bpf_u64)(bpf_s64)(bpf_s16)s
                      : off == 32 ? (bpf_u64)(bpf_s64)(bpf_s32)s : s;
                    break;
                default: r = (bpf_u64)((bpf_s64)d >> (s & 63)); break; /* 0xc0 arsh */
                }
            } else {
                const bpf_u32 a = (bpf_u32)d, b = (bpf_u32)s;
                bpf_u32 w;
                switch (op) {
                case 0x00: w = a + b; break;
                case 0x10: w = a - b; break;
                case 0x20: w = a * b; break;
                case 0x30: w = off ? (bpf_u32)bpf_sdiv32(a, b) : (b ? a / b : 0); break;
                case 0x40: w = a | b; break;
                case 0x50: w = a & b; break;
                case 0x60: w = a << (b & 31); break;
                case 0x70: w = a >> (b & 31); break;
                case 0x80: w = 0u - a; break;
                case 0x90: w = off ? (bpf_u32)bpf_smod32(a, b) : (b ? a % b : a); break;
                case 0xa0: w = a ^ b; break;
                case 0xb0:
                    w = off == 8 ? (bpf_u32)(bpf_s32)(bpf_s8)b : off == 16 ? (bpf_u32)(bpf_s32)(bpf_s16)b : b;
                    break;
                default: w = (bpf_u32)((bpf_s32)a >> (b & 31)); break;
                }
                r = w;
            }
            regs[dst] = r;
            break;
        }
        case 5: /* JMP */
        case 6: { /* JMP32 */
            const bpf_u32 op = opc & 0xf0;
            const bpf_u32 x = opc & 0x08;
            if (cls == 5 && op == 0x80) { /* call, callx */
                if (x || src == 0) {
                    /* callx: the helper id is the value of dst (ebpf::helpers::callx_id) */
                    const bpf_s64 id = x ? (bpf_s64)regs[dst] : (bpf_s64)imm32;
                    if (id < -2147483647LL - 1 || id > 2147483647LL) BPF_FAIL(BPF_INTERP_EHELPER);
                    int rc = bpf_call_helper(p, (bpf_s32)id, regs, ctx, env);
                    if (rc < 0) BPF_FAIL(-rc);
                    if (rc == BPF_HELPER_EXIT) { *r0 = regs[0]; return BPF_INTERP_OK; }
                    break;
                }
                if (src != 1) BPF_FAIL(BPF_INTERP_EHELPER); /* kfunc */
                if (depth + 1 >= BPF_INTERP_MAX_FRAMES) BPF_FAIL(BPF_INTERP_EDEPTH);
                BPF_JUMP_TO((bpf_s64)pc + 1 + imm32);
                saved[depth][0] = regs[6];
                saved[depth][1] = regs[7];
                saved[depth][2] = regs[8];
                saved[depth][3] = regs[9];
                saved[depth][4] = pc + 1;
                depth++;
                regs[10] -= fs;
                for (bpf_u32 i = 0; i < fs; i += 8) BPF_ST(bpf_u64, regs[10] - fs + i, 0);
                break;
            }
            if (cls == 5 && op == 0x90) { /* exit */
                if (x) BPF_FAIL(BPF_INTERP_EOPCODE);
                if (depth == 0) { *r0 = regs[0]; return BPF_INTERP_OK; }
                depth--;
                regs[6] = saved[depth][0];
                regs[7] = saved[depth][1];
                regs[8] = saved[depth][2];
                regs[9] = saved[depth][3];
                regs[10] += fs;
                next = (bpf_u32)saved[depth][4];
                break;
            }
            if (op == 0x00) { /* ja / gotol */
                if (x) BPF_FAIL(BPF_INTERP_EOPCODE);
                BPF_JUMP_TO((bpf_s64)pc + 1 + (cls == 5 ? (bpf_s64)off : (bpf_s64)imm32));
                break;
            }
            if (op == 0xe0 || op == 0xf0 || op == 0x80 || op == 0x90) BPF_FAIL(BPF_INTERP_EOPCODE);
            int t;
            if (cls == 5) {
                const bpf_u64 a = regs[dst], b = x ? regs[src] : imm;
                switch (op) {
                case 0x10: t = a == b; break;
                case 0x20: t = a > b; break;
                case 0x30: t = a >= b; break;
                case 0x40: t = (a & b) != 0; break;
                case 0x50: t = a != b; break;
                case 0x60: t = (bpf_s64)a > (bpf_s64)b; break;
                case 0x70: t = (bpf_s64)a >= (bpf_s64)b; break;
                case 0xa0: t = a < b; break;
                case 0xb0: t = a <= b; break;
                case 0xc0: t = (bpf_s64)a < (bpf_s64)b; break;
                default: t = (bpf_s64)a <= (bpf_s64)b; break;
                }
            } else {
                const bpf_u32 a = (bpf_u32)regs[dst], b = x ? (bpf_u32)regs[src] : (bpf_u32)imm32;
                switch (op) {
                case 0x10: t = a == b; break;
                case 0x20: t = a > b; break;
                case 0x30: t = a >= b; break;
                case 0x40: t = (a & b) != 0; break;
                case 0x50: t = a != b; break;
                case 0x60: t = (bpf_s32)a > (bpf_s32)b; break;
                case 0x70: t = (bpf_s32)a >= (bpf_s32)b; break;
                case 0xa0: t = a < b; break;
                case 0xb0: t = a <= b; break;
                case 0xc0: t = (bpf_s32)a < (bpf_s32)b; break;
                default: t = (bpf_s32)a <= (bpf_s32)b; break;
                }
            }
            if (t) BPF_JUMP_TO((bpf_s64)pc + 1 + off);
            break;
        }
        case 0: { /* LD: only lddw (0x18), relocated (src 0) */
            if (opc != 0x18) BPF_FAIL(BPF_INTERP_EOPCODE);
            if (dst == 10) BPF_FAIL(BPF_INTERP_EREG);
            if (src > 6) BPF_FAIL(BPF_INTERP_EOPCODE);
            if (src != 0 || pc + 1 >= n) BPF_FAIL(BPF_INTERP_ELDIMM);
            const bpf_u64 hi = code[pc + 1];
            if ((hi & 0xffffffffull) != 0) BPF_FAIL(BPF_INTERP_ELDIMM);
            regs[dst] = (bpf_u64)(bpf_u32)imm32 | (hi & 0xffffffff00000000ull);
            next = pc + 2;
            break;
        }
        case 1: { /* LDX */
            const bpf_u32 mode = opc & 0xe0;
            const bpf_u32 sz = opc & 0x18;
            if (dst == 10) BPF_FAIL(BPF_INTERP_EREG);
            const bpf_u64 a = regs[src] + (bpf_u64)(bpf_s64)off;
            if (mode == 0x60) {
                regs[dst] = sz == 0x10 ? (bpf_u64)BPF_LD(bpf_u8, a) : sz == 0x08 ? (bpf_u64)BPF_LD(bpf_u16, a)
                          : sz == 0x00 ? (bpf_u64)BPF_LD(bpf_u32, a) : BPF_LD(bpf_u64, a);
            } else if (mode == 0x80 && sz != 0x18) {
                regs[dst] = sz == 0x10 ? (bpf_u64)(bpf_s64)BPF_LD(bpf_s8, a) : sz == 0x08 ? (bpf_u64)(bpf_s64)BPF_LD(bpf_s16, a)
                          : (bpf_u64)(bpf_s64)BPF_LD(bpf_s32, a);
            } else {
                BPF_FAIL(BPF_INTERP_EOPCODE);
            }
            break;
        }
        case 2: /* ST */
        case 3: { /* STX */
            const bpf_u32 mode = opc & 0xe0;
            const bpf_u32 sz = opc & 0x18;
            const bpf_u64 a = regs[dst] + (bpf_u64)(bpf_s64)off;
            if (mode == 0x60) {
                const bpf_u64 v = cls == 2 ? imm : regs[src];
                switch (sz) {
                case 0x10: BPF_ST(bpf_u8, a, v); break;
                case 0x08: BPF_ST(bpf_u16, a, v); break;
                case 0x00: BPF_ST(bpf_u32, a, v); break;
                default: BPF_ST(bpf_u64, a, v); break;
                }
                break;
            }
            if (cls != 3 || mode != 0xc0 || (sz != 0x00 && sz != 0x18)) BPF_FAIL(BPF_INTERP_EOPCODE);
            /* atomics */
            const bpf_u32 aop = (bpf_u32)imm32;
            if (aop != 0x00 && aop != 0x01 && aop != 0x40 && aop != 0x41 && aop != 0x50 && aop != 0x51
                && aop != 0xa0 && aop != 0xa1 && aop != 0xe1 && aop != 0xf1)
                BPF_FAIL(BPF_INTERP_EOPCODE);
            const int fetch = aop & 1;
            if (fetch && aop != 0xf1 && src == 10) BPF_FAIL(BPF_INTERP_EREG);
            const int local = a >= stack_lo && a < stack_hi;
            if (sz == 0x18) {
                if (a & 7) BPF_FAIL(BPF_INTERP_EALIGN);
                const bpf_u64 v = regs[src];
                bpf_u64 old;
                if (local) {
                    old = BPF_LD(bpf_u64, a);
                    bpf_u64 nv = old;
                    switch (aop & ~1u) {
                    case 0x00: nv = old + v; break;
                    case 0x40: nv = old | v; break;
                    case 0x50: nv = old & v; break;
                    case 0xa0: nv = old ^ v; break;
                    case 0xe0: nv = v; break;
                    default: nv = old == regs[0] ? v : old; break;
                    }
                    BPF_ST(bpf_u64, a, nv);
                } else {
                    switch (aop & ~1u) {
                    case 0x00: old = bpf_atom_add64(a, v); break;
                    case 0x40: old = bpf_atom_or64(a, v); break;
                    case 0x50: old = bpf_atom_and64(a, v); break;
                    case 0xa0: old = bpf_atom_xor64(a, v); break;
                    case 0xe0: old = bpf_atom_xchg64(a, v); break;
                    default: old = bpf_atom_cas64(a, regs[0], v); break;
                    }
                }
                if (aop == 0xf1) regs[0] = old;
                else if (fetch) regs[src] = old;
            } else {
                if (a & 3) BPF_FAIL(BPF_INTERP_EALIGN);
                const bpf_u32 v = (bpf_u32)regs[src];
                bpf_u32 old;
                if (local) {
                    old = BPF_LD(bpf_u32, a);
                    bpf_u32 nv = old;
                    switch (aop & ~1u) {
                    case 0x00: nv = old + v; break;
                    case 0x40: nv = old | v; break;
                    case 0x50: nv = old & v; break;
                    case 0xa0: nv = old ^ v; break;
                    case 0xe0: nv = v; break;
                    default: nv = old == (bpf_u32)regs[0] ? v : old; break;
                    }
                    BPF_ST(bpf_u32, a, nv);
                } else {
                    switch (aop & ~1u) {
                    case 0x00: old = bpf_atom_add32(a, v); break;
                    case 0x40: old = bpf_atom_or32(a, v); break;
                    case 0x50: old = bpf_atom_and32(a, v); break;
                    case 0xa0: old = bpf_atom_xor32(a, v); break;
                    case 0xe0: old = bpf_atom_xchg32(a, v); break;
                    default: old = bpf_atom_cas32(a, (bpf_u32)regs[0], v); break;
                    }
                }
                if (aop == 0xf1) regs[0] = old;
                else if (fetch) regs[src] = old;
            }
            break;
        }
        }
        pc = next;
    }
fail:
    *err_pc = pc;
    return err;
#undef BPF_FAIL
#undef BPF_JUMP_TO
}

#endif /* BPF_INTERP_CUH */
