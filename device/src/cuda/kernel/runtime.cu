// bpftime-super persistent GPU runtime.
//
// Compiled by NVRTC (-rdc) when the CUDA backend starts. The host prepends, in order:
// the layout macros and the slot check generated from shm-maps' layout (device/src/cuda/source.rs) and the
// eBPF interpreter (bpf_interp.cuh). Each generation links this module with the JIT's PTX
// of every native program and a generated `bpft_native` dispatch function.
//
// Roles inside one launch (grid = one or two blocks per SM, BPFT_THREADS threads a block):
//   warp 0 of blocks 0 .. D-1   the dispatchers (D = BPFT_DISPATCHERS): dispatcher d owns
//                     every D-th stripe of 32 queue positions and polls its own slots (seq
//                     and check words, one 16-byte load a lane), takes up to 32 ready jobs
//                     at once (one per lane), reads their bodies after one acquire fence,
//                     runs one-record jobs itself (short path) and publishes larger ones to
//                     the device job ring;
//   every other warp  a worker: walks the job ring in order, claims record chunks with
//                     atomicAdd, runs them; the warp finishing a job's last chunk writes its
//                     completion.
//
// Completions are written with plain paired stores, a system fence, then DONE; a
// record of each finished job goes to the done log (pinned host memory) first, where a host
// thread keeps the counters. A job that the GPU cannot or must not run (bad descriptor,
// unknown program, host-tier program, variable-length records) goes to the forward ring,
// where a host thread runs the shared CPU job runner on it, so every error gets the same
// completion and message on every backend.
//
// The queue head in shared memory is a lower bound of every position not yet taken: the
// dispatcher's position (D = 1), else the least of the dispatchers' positions. Positions at
// or past it that were taken have a seq past pos + 1, or a RUNNING completion while the
// job runs, which is how recovery and a new worker's dispatchers tell them apart.
//
// Generation swap: the host sets ctl->stop. Every dispatcher takes no new jobs and records
// its position; dispatcher 0 waits for them, then until every published ring job has
// retired, sets the drain flag, stores the head back into shared memory, and the kernel
// exits. The next launch of the same worker resumes each dispatcher where it stopped; a
// new worker starts from the head.

typedef unsigned long long u64;
typedef long long s64;
typedef unsigned int u32;
typedef int s32;
typedef unsigned char u8;

#define FULL_MASK 0xffffffffu

// How the dispatcher reads the queue's slots. Its poll reads the seq and check words only;
// once a job is ready, after the acquire fence, 1: each ready lane reads its descriptor
// with strong loads; 2: up to BPFT_COOP_MAX ready slots are read by the whole warp with
// plain loads (which coalesce, where strong system-scope loads are served one at a time),
// more as in 1. A tuning knob, compared in bench/results/gpu_service.md.
#ifndef BPFT_TWO_PHASE
#define BPFT_TWO_PHASE 2
#endif
#if BPFT_TWO_PHASE != 1 && BPFT_TWO_PHASE != 2
#error "BPFT_TWO_PHASE is 1 or 2 (the one-burst poll, 0, was measured slower and removed)"
#endif
// How many dispatcher warps poll the queue: warp 0 of blocks 0 .. D-1. Dispatcher d owns
// the stripes of BPFT_STRIPE positions whose number is d modulo D, and takes its jobs in
// order; each polls its own host lines, so they take jobs side by side. Fewer when the
// grid or the queue is too small (dispatcher_count). A tuning knob.
#ifndef BPFT_DISPATCHERS
#define BPFT_DISPATCHERS 4
#endif
// A diagnostic: the dispatchers are warp 0 of blocks BPFT_FIRST_BLOCK .. + D-1 (modulo the
// grid) instead of 0 .. D-1, to tell an SM's placement from the number of dispatchers.
#ifndef BPFT_FIRST_BLOCK
#define BPFT_FIRST_BLOCK 0
#endif

// This block's number counted from the first dispatcher's block (BPFT_FIRST_BLOCK).
static __device__ __forceinline__ u32 role_block() {
    return (blockIdx.x + gridDim.x - BPFT_FIRST_BLOCK % gridDim.x) % gridDim.x;
}
#define BPFT_STRIPE 32
#ifndef BPFT_COOP_MAX
#define BPFT_COOP_MAX 8
#endif
// 1: while the poll looks at one or two slots (an idle or lightly loaded queue), it reads
// them whole, and a ready job's check word vouches for its body: one PCIe round trip less
// on a lone job's path, 240 bytes more a poll. A tuning knob.
#ifndef BPFT_POLL_WHOLE
#define BPFT_POLL_WHOLE 1
#endif
// 1: in such a whole-slot poll, the seq and check words are read with acquire loads, and a
// job found ready needs no fence.acq_rel.sys (which measured 1.4-2 µs on an H200): the warp
// barrier after them orders every lane's later loads. A tuning knob.
#ifndef BPFT_POLL_ACQUIRE
#define BPFT_POLL_ACQUIRE 0
#endif
// 1: a job found by a whole-slot poll gets the acquire fence (fence.acq_rel.sys, 1-2 µs on
// an H200) only when it reads memory the client may have written outside its slot: its
// check word already vouches for the descriptor and the inline input. A one-record job
// with inline input, no output buffer and no maps (self_contained) reads nothing else the
// client wrote (program entries are device memory, read from L2), so it runs without one. 0: every
// job fences before it is read (the old way, to compare). A tuning knob.
#ifndef BPFT_LAZY_FENCE
#define BPFT_LAZY_FENCE 1
#endif
// 1: a self-contained one-record job's completion is published before its done-log entry,
// with no fence: its fields, a check word over them (shm_maps::layout::completion_check)
// and DONE_CHECKED go out together, and the client takes them only when the check matches
// the fields it read, so it need not wait for the log's atomic and fence. 0: DONE after
// the log's fence (the old way, to compare). A tuning knob.
#ifndef BPFT_DONE_EARLY
#define BPFT_DONE_EARLY 1
#endif
// 1: the slot check of a whole-slot poll is computed by the whole warp, a chunk a lane
// (bpft_slot_chunk_check); 0: by each ready lane alone. A tuning knob.
#ifndef BPFT_WHOLE_CHECK
#define BPFT_WHOLE_CHECK 1
#endif
// 1: a whole-slot poll's job loads its program's index word as soon as the poll returns
// (lookup_prog's `pre`); 0: in the lookup, after the check and the RUNNING store. A tuning
// knob.
#ifndef BPFT_EARLY_INDEX
#define BPFT_EARLY_INDEX 1
#endif
// With several dispatchers (D > 1), each publishes its position after a batch and stores
// the queue head as the least of all of them. 1: that happens after the next poll is
// issued, while its loads are in flight (a device-memory round trip and a host store off a
// lone client's path); 0: right after the batch, with a fence first. A tuning knob.
#ifndef BPFT_HEAD_SHADOW
#define BPFT_HEAD_SHADOW 1
#endif
// With several dispatchers, the queue head is stored in a poll's shadow only when the poll
// before it found nothing, every BPFT_HEAD_EVERY-th batch, or once the position has moved
// a quarter of the queue past the head last stored (1: after every batch). A head that
// lags is still a lower bound of the positions not taken, and recovery looks a lap behind
// it. The head store in a poll's shadow held that poll back (a device-memory round trip
// and a host store; bench/gpu/poll_ring.cu); 8 took 0.1-0.2 us off row a and left row b as
// it was (bench/results/gpu_service.md). A tuning knob.
#ifndef BPFT_HEAD_EVERY
#define BPFT_HEAD_EVERY 8
#endif
// Dispatcher 0 reads the host's stop word with every BPFT_STOP_EVERY-th poll, its copy in
// device memory otherwise (the others always read the copy). The host line in the poll
// made dispatcher 0's poll 0.8-1 us longer (row a with one dispatcher: 6.1-6.6 us with
// every poll, 5.4-5.6 us with every 8th); a stop is seen 8 polls (about 10-15 us) later
// at most. A tuning knob.
#ifndef BPFT_STOP_EVERY
#define BPFT_STOP_EVERY 8
#endif
// A native one-record job's inline input is read where the poll staged its slot (the
// lane's row of shared memory; the JIT's one-record `.func` loads through generic
// addresses, jit::emit), not copied to the lane's scratch line in device memory first
// (a store, then the program's load of it from L2). 0: the copy. A tuning knob.
#ifndef BPFT_SHARED_INPUT
#define BPFT_SHARED_INPUT 1
#endif
// A diagnostic: 1 makes a one-record job's two hop words (Completion::gpu_hops) say where
// its run goes instead: [0] from `started` to just before the program (lookup, checks,
// input), [1] from `started` to just after it; 2: [0] to after the RUNNING and head
// stores, [1] to after the program lookup and checks; 3: both words hold five 12-bit fields
// (ns from `started`, at most 4095): after the RUNNING and head stores, after the program
// lookup, after the checks, after the inline input's copy, after the program
// (hop_split_field); 4: four such fields from the start of the short run: before the input
// tier and the record's ctx, just before the native program's call, just after it, and
// before the completion (native programs; the program step of 3 split up). 5 and 6 count
// SM cycles (clock64, marks in shared memory, `bpft_cyc`) from the moment the poll's loads
// returned (t_seen): 5: five fields in units of 2 cycles, to after the slot check, after
// the program lookup, after the checks and the job's kind, just before the native call,
// just after it; 6: five fields in units of 4 cycles: to the start of the completion, then
// the previous job's tail (from its completion's start to its slot's release), the gap
// from there to the issue of the poll that found this job, the polls issued in between,
// and that poll's round trip; 7 and 8: 5's steps finer, in units of 2 cycles, 7: the
// whole-slot check's shuffles, the slot check, RUNNING stored, the program found, the
// descriptor validated; 8: the job's kind known, its input set, before the native call,
// after it, the completion's start; 9: the previous job's completion, from its start to its
// DONE store and to its slot's release, then this job's poll return to its completion's
// start, its native call, and its poll's round trip.
#ifndef BPFT_HOP_SPLIT
#define BPFT_HOP_SPLIT 0
#endif
// The load that phase two of BPFT_TWO_PHASE 2 reads slots with (a tuning knob: e.g.
// "ld.global.cv", which fetches the line again instead of trusting a cached copy).
#ifndef BPFT_SLOT_LD
#define BPFT_SLOT_LD "ld.global"
#endif
// The fence between a completion's fields and its DONE word (a tuning knob: the host may
// define it, e.g. "fence.sc.sys;", to compare).
#ifndef BPFT_COMPLETION_FENCE
#define BPFT_COMPLETION_FENCE "fence.acq_rel.sys;"
#endif

// ---- memory-order primitives (generic addresses; host-mapped memory is global) ----

static __device__ __forceinline__ u64 ld_acq_sys(const void *p) {
    u64 v;
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ u32 ld_acq_sys32(const void *p) {
    u32 v;
    asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ u32 ld_rlx_sys32(const void *p) {
    u32 v;
    asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ void ld_rlx_sys_v2(const void *p, u64 &a, u64 &b) {
    asm volatile("ld.relaxed.sys.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
static __device__ __forceinline__ void ld_acq_sys_v2(const void *p, u64 &a, u64 &b) {
    asm volatile("ld.acquire.sys.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
// A plain 16-byte load for slot bodies ordered by an earlier fence (BPFT_SLOT_LD): unlike
// strong loads, a warp's plain loads of one line coalesce into one request.
static __device__ __forceinline__ void ld_slot_v2(const void *p, u64 &a, u64 &b) {
    asm volatile("{ .reg .u64 slot_g; cvta.to.global.u64 slot_g, %2; " BPFT_SLOT_LD ".v2.u64 {%0, %1}, [slot_g]; }"
                 : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
static __device__ __forceinline__ u64 ld_rlx_sys(const void *p) {
    u64 v;
    asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ void st_rel_sys(void *p, u64 v) {
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
static __device__ __forceinline__ void st_rel_sys32(void *p, u32 v) {
    asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ void st_rlx_sys(void *p, u64 v) {
    asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// Plain (weak) stores for data that a later fence and strong store publish, or that a check
// word vouches for (a completion's early DONE): they are not serialized the way strong
// system-scope stores are (a tuning knob: 0 makes them strong).
#ifndef BPFT_FIELD_WEAK
#define BPFT_FIELD_WEAK 1
#endif
#if BPFT_FIELD_WEAK
#define BPFT_ST_FIELD "st"
#else
#define BPFT_ST_FIELD "st.relaxed.sys"
#endif
static __device__ __forceinline__ void st_fld(void *p, u64 v) {
    asm volatile(BPFT_ST_FIELD ".u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
static __device__ __forceinline__ void st_fld_v2(void *p, u64 a, u64 b) {
    asm volatile(BPFT_ST_FIELD ".v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
static __device__ __forceinline__ void st_fld32(void *p, u32 v) {
    asm volatile(BPFT_ST_FIELD ".u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ void st_fld32_v2(void *p, u32 a, u32 b) {
    asm volatile(BPFT_ST_FIELD ".v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(a), "r"(b) : "memory");
}
static __device__ __forceinline__ void st_rlx_sys32(void *p, u32 v) {
    asm volatile("st.relaxed.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// CTA scope: the log ring in shared memory (BPFT_LOG_WARP).
static __device__ __forceinline__ void st_rel_cta32(u32 *p, u32 v) {
    asm volatile("st.release.cta.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ u32 ld_acq_cta32(const u32 *p) {
    u32 v;
    asm volatile("ld.acquire.cta.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ u64 ld_acq_gpu(const void *p) {
    u64 v;
    asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ u64 ld_rlx_gpu(const void *p) {
    u64 v;
    asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ u32 ld_rlx_gpu32(const void *p) {
    u32 v;
    asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ void st_rel_gpu(void *p, u64 v) {
    asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
static __device__ __forceinline__ u64 globaltimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

#if BPFT_HOP_SPLIT >= 5
// BPFT_HOP_SPLIT 5 and 6: a dispatcher lane's cycle marks (warp 0 of a block; a worker warp
// 0 marks too, in a block with no dispatcher, where nothing reads them). 0: the poll's
// loads returned, 1: slot checked, 2: RUNNING stored, 3: program found, 4: checked, 5:
// before the native call, 6: after it, 7: the completion's start, 8: the slot released,
// 9: the last poll's issue, 10: polls since the last job; 11: the whole-slot check's
// shuffles done, 12: RUNNING stored, 13: validated, 14: the short run's input set, 15: an
// early DONE stored.
__shared__ long long bpft_cyc[32][16];
#define BPFT_MARK(i)                                                                   \
    do {                                                                               \
        if (threadIdx.x < 32) bpft_cyc[threadIdx.x][i] = clock64();                    \
    } while (0)
static __device__ __forceinline__ u64 cyc_field(long long d, int unit, int i) {
    const u64 v = d < 0 ? 0 : (u64)d / unit;
    return (v < 4095 ? v : 4095) << (12 * i);
}
#else
#define BPFT_MARK(i) \
    do {             \
    } while (0)
#endif

// ---- the shared-memory structures, generated from the layout ----

// `struct bpft_job_desc` is generated with the layout macros (device/src/cuda/source.rs),
// from the same table whose offsets a Rust test compares with shm-maps' FIELDS.
static_assert(sizeof(bpft_job_desc) == BPFT_SIZE_JobDesc, "JobDesc size");
static_assert(BPFT_OFF_QueueSlot_check == 8, "QueueSlot.check");
static_assert(BPFT_OFF_QueueSlot_desc == 16, "QueueSlot.desc");
static_assert(BPFT_SIZE_QueueSlot == 256, "QueueSlot size");
static_assert(BPFT_OFF_QueueSlot_inline == 136 && BPFT_INLINE_WORDS == 15,
              "the dispatcher's 16-byte loads of a slot");

// ---- host-shared control structures (device/src/cuda/runtime.rs mirrors these) ----

// Program table entry, in device memory. Immutable once its index is published.
struct bpft_prog {
    u32 version;
    u32 tier;          // BPFT_TIER_*
    u32 native_slot;   // case of bpft_native (tier NATIVE)
    u32 prog_id;
    struct bpf_prog_desc interp;  // tier INTERP (and the bytecode of NATIVE programs)
    u64 reserved[2];
};
static_assert(sizeof(struct bpft_prog) == 64, "bpft_prog size");
#define BPFT_TIER_NONE 0
#define BPFT_TIER_INTERP 1
#define BPFT_TIER_NATIVE 2
#define BPFT_TIER_HOST 3

// The kernel's parameters (`struct bpft_params`, by value; worker.rs Params, generated into
// the header): the region's queue slots, queue header and completions; the shared arena
// and the device arena; the control block (pinned) and `bpft_state` (device); the program
// index words (worker.rs index_word, 0 = none) and entries; the device job ring; the done
// log and forward ring (pinned); the trace ring (0: dropped); the host's CLOCK_MONOTONIC
// minus %globaltimer; the interpreter's budget a record; 128 bytes of device scratch a
// dispatcher lane; the tier table; the worker warps' staging areas (BPFT_STAGE_BYTES each,
// `stage_warps` of them, last below); then the rings' masks, sizes, flags, the generation and
// the service's pid.
#define BPFT_ALLOW_FAULT 1u

// A job buffer in an emulated tier (`struct bpft_tier`, worker.rs TierEntry, generated into
// the header; the service's `alloc` with a placement), one entry a tier slot
// (job_flags::TIER_MASK names one): the buffer's arena offset and length (0: free), its
// owner's client slot, the latency added to each record's fetch, picoseconds a byte at the
// cap (0: none), and the link's next free time (%globaltimer ns, the GPU's alone).

// The control block (`struct bpft_ctl`), the done log's entries (`struct bpft_done`) and the
// forward ring's (`struct bpft_fwd`), in pinned host memory, are generated from wire.rs
// (source::layout_header).

// Device state, kept across generations (`struct bpft_state`, worker.rs State, generated
// into the header; zeroed once, the worker clears `drain` and `stop` before each launch).
static_assert(sizeof(struct bpft_state) == BPFT_STATE_BYTES, "bpft_state: the worker's allocation");

// A multi-record job on the device ring.
struct bpft_djob {
    u64 seq;             // ring position + 1 once published
    u64 done_seq;        // ring position + 1 once retired (the slot may be reused)
    struct bpft_job_desc d;
    struct bpft_prog p;  // the program version for every record of the job
    u64 in_base, out_base, res_base;
    u64 started_ns;
    u64 next;            // next record to claim
    u64 finished;        // records finished
    u64 failed;
    u64 first_err;       // lowest failing record (atomicMin), ~0 none
    alignas(16) u64 best_idx;  // highest successful record + 1, and its r0: one 16-byte word
    u64 best_r0;         // updated with a 128-bit CAS
    u32 lock;
    u32 err_pc;
    u32 err_code;
    u32 active;          // warps working on this job (the slot is reused only at 0)
};

// Completion state and status values (shm-maps layout::completion_state / status).
#define CS_RUNNING 2
#define CS_DONE 3
#define CS_DONE_CHECKED 4
#define ST_OK 0
#define ST_RUNTIME_ERROR (-5)

#define JF_RESULTS (1u << 0)
#define JF_VARLEN (1u << 1)
#define JF_STOP_ON_ERROR (1u << 2)
#define JF_DEVICE_INPUT (1u << 3)
// Input prefetch in a worker's chunk of a native job (a tuning knob): 0 none; 1 lane 0
// asks the TMA to bring the input of the next BPFT_SUB records into L2
// (cp.async.bulk.prefetch.L2) while the warp runs the current ones; 2 the lanes issue
// prefetch.global.L2 for the next BPFT_SUB records' lines, 128 bytes apart.
// How many chunks a big job is cut into per worker warp (a tuning knob): more balance the
// end of a job better, at one more claim (an atomic on a shared word) each.
#ifndef BPFT_WARP_CHUNKS
#define BPFT_WARP_CHUNKS 2
#endif
// The same for jobs whose input is in pinned host memory.
#ifndef BPFT_HOST_WARP_CHUNKS
#define BPFT_HOST_WARP_CHUNKS 1024
#endif
#ifndef BPFT_HOST_CHUNK
#define BPFT_HOST_CHUNK 32
#endif
#ifndef BPFT_PREFETCH
#define BPFT_PREFETCH 0
#endif
// 1: a worker warp copies a chunk of fixed-size records from pinned host memory into its
// staging area in device memory with coalesced 16-byte loads (the warp reads 512
// consecutive bytes an instruction: whole 128-byte lines over PCIe) and runs the chunk
// loop on the copy, instead of each lane reading its own record; 0: the lanes read the
// host memory (a tuning knob). A zero-copy microbenchmark read 64-byte records at 51.4
// GB/s the first way and 47.5 the second (bench/results/zero_copy/).
#ifndef BPFT_HOST_STAGE
#define BPFT_HOST_STAGE 1
#endif
#ifndef BPFT_SUB
#define BPFT_SUB 256
#endif

#define JF_DEVICE_OUTPUT (1u << 4)
#define JF_MAILBOX_PING (1u << 14)
#define JF_INJECT_FAULT (1u << 15)

// The fewest records a warp claims at once from a ring job (a tuning knob).
#ifndef BPFT_CHUNK
#define BPFT_CHUNK 256
#endif

// The native programs of this generation (generated per generation, linked in).
extern "C" __device__ u64 bpft_native(u32 slot, u64 ctx);
// The address of each native program's one-record run (the JIT's bpf_one_<name>: record 0
// of a one-record job, the ctx words passed in registers), by slot, in constant memory.
extern "C" __constant__ u64 bpft_one_fn[];
typedef u64 (*bpft_one_t)(u64 in_base, u64 in_size, u64 out_base, u64 out_size, u64 a0, u64 a1,
                          u64 a2, u64 a3);

// 1: a one-record job's native program is called through bpft_one_fn (one call, the ctx in
// registers); 0: through bpft_native's switch, with the ctx in local memory (two calls). A
// tuning knob.
#ifndef BPFT_ONE_CALL
#define BPFT_ONE_CALL 1
#endif
// Records first, first + stride, ... < end of the native program in `slot`, its body
// inline (the JIT's chunk loop); returns the last r0.
extern "C" __device__ u64 bpft_native_loop(u32 slot, u64 in_base, u64 in_size, u64 out_base,
                                           u64 out_size, u64 n, u64 a0, u64 a1, u64 a2, u64 a3,
                                           u64 results, u64 first, u64 end, u64 stride);

static __device__ __forceinline__ char *completion_ptr(const bpft_params &P, u32 i) {
    return (char *)(P.completions + (u64)i * BPFT_SIZE_Completion);
}

static __device__ __forceinline__ u64 now_ns(const bpft_params &P) { return globaltimer() + P.time_offset; }
// BPFT_HOP_SPLIT 3: field i (12 bits at bit 12 i of the two hop words as one u64) holds
// `ns`, at most 4095.
static __device__ __forceinline__ u64 hop_split_field(u64 ns, int i) {
    return (ns < 4095 ? ns : 4095) << (12 * i);
}

// Reads the program entry for `id`, or returns false. The index word is a strong load (the
// host rewrites it while the kernel runs); the entry it names is immutable while named
// (worker.rs never reuses a named entry), so it is read with four plain 16-byte loads from
// L2 (`.cg`: an L1 copy could be a reused entry's old bytes), all in flight at once, where
// eight strong loads were served one after another (1.6 µs on an H200; with
// BPFT_ENTRY_STRONG 1, a tuning knob, they still are).
#ifndef BPFT_ENTRY_STRONG
#define BPFT_ENTRY_STRONG 0
#endif
static __device__ __forceinline__ void ld_cg_v2(const void *p, u64 &a, u64 &b) {
    asm volatile("{ .reg .u64 cg_g; cvta.to.global.u64 cg_g, %2; ld.global.cg.v2.u64 {%0, %1}, [cg_g]; }"
                 : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
// `cache` (BPFT_ENTRY_CACHE; the dispatcher's, one per lane, in shared memory: the entry's
// eight words, then the index word that named it, 0 for none): an index word names one
// write of one entry (worker.rs index_word: the entry and the round robin's lap), so an
// entry cached under the word just read is that write's bytes, and one L2 round trip less.
#ifndef BPFT_ENTRY_CACHE
#define BPFT_ENTRY_CACHE 1
#endif
// `have_pre`: the caller loaded the index word already, `pre` (BPFT_EARLY_INDEX).
static __device__ bool lookup_prog(const bpft_params &P, u32 id, bpft_prog *out, u64 *cache = 0,
                                   bool have_pre = false, u32 pre = 0) {
    if (id >= P.max_progs) return false;
    const u32 word = have_pre ? pre : ld_rlx_gpu32((const u32 *)P.prog_index + id);
    if (word == 0) return false;
    u64 *dst = (u64 *)out;
    // `out` may be the cache row itself (BPFT_DESC_SHARED): then nothing is copied.
    if (BPFT_ENTRY_CACHE && cache && cache[8] == word) {
        if (dst != cache) {
#pragma unroll
            for (int i = 0; i < 8; i++) dst[i] = cache[i];
        }
        return out->tier == BPFT_TIER_INTERP || out->tier == BPFT_TIER_NATIVE;
    }
    const u32 idx = word & ((1u << BPFT_INDEX_ENTRY_BITS) - 1);
    const u64 *src = (const u64 *)((const bpft_prog *)P.progs + (idx - 1));
#if BPFT_ENTRY_STRONG
#pragma unroll
    for (int i = 0; i < 8; i++) dst[i] = ld_rlx_gpu(src + i);
#else
#pragma unroll
    for (int i = 0; i < 8; i += 2) ld_cg_v2(src + i, dst[i], dst[i + 1]);
#endif
    if (BPFT_ENTRY_CACHE && cache) {
        if (dst != cache) {
#pragma unroll
            for (int i = 0; i < 8; i++) cache[i] = dst[i];
        }
        cache[8] = word;
    }
    return out->tier == BPFT_TIER_INTERP || out->tier == BPFT_TIER_NATIVE;
}

// [off, off + need) inside a buffer of `size` bytes, without overflow.
static __device__ __forceinline__ bool fits(u64 off, u64 len, u64 need, u64 size) {
    return need <= len && off <= size && len <= size - off;
}

// What a job's records pay to come through its input buffer's tier: `tat` is the address of
// the link word, 0 for a local buffer.
struct bpft_tier_ref {
    u64 ns, ps, tat;
};

// The tier of job `d`'s input (`out`: its output): the slot its flags name, if that slot
// holds a buffer of this client around the whole buffer in the shared arena; else local.
// Output pays the link alone (a posted write): no latency.
static __device__ bpft_tier_ref job_tier(const bpft_params &P, const bpft_job_desc &d, bool out) {
    bpft_tier_ref r = {0, 0, 0};
    const u32 s = (d.flags >> (out ? BPFT_OUT_TIER_SHIFT : BPFT_TIER_SHIFT)) & (BPFT_TIER_SLOTS - 1);
    const u64 boff = out ? d.output_off : d.input_off, blen = out ? d.output_len : d.input_len;
    if (s == 0 || (d.flags & (out ? JF_DEVICE_OUTPUT : JF_DEVICE_INPUT)) || (out && !d.out_rec_size))
        return r;
    bpft_tier *t = (bpft_tier *)P.tier_table + s;
    // The fields and `len` in one round trip, a fence, then `len` again: the worker clears
    // it before it rewrites an entry and sets it last, each write a synchronous copy of
    // microseconds, so a read that overlaps a rewrite sees `len` change (local).
    const u64 len = ld_rlx_gpu(&t->len), off = ld_rlx_gpu(&t->off);
    const u64 ns = out ? 0 : ld_rlx_gpu(&t->latency_ns), ps = ld_rlx_gpu(&t->ps_per_byte);
    const u32 client = ld_rlx_gpu32(&t->client);
    if (len == 0 || client != d.client || boff < off || boff - off > len ||
        blen > len - (boff - off))
        return r;
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    if (ld_rlx_gpu(&t->len) != len) return r;
    r.ns = ns;
    r.ps = ps;
    r.tat = out && ps == 0 ? 0 : (u64)&t->tat;
    return r;
}
#define BPFT_ANY_TIER ((BPFT_TIER_SLOTS - 1u) << BPFT_TIER_SHIFT | (BPFT_TIER_SLOTS - 1u) << BPFT_OUT_TIER_SHIFT)

// The longest tier latency a dispatcher waits out itself on a one-record job (a tuning
// knob). A longer one, or a capped link (whose backlog has no bound), sends the job to the
// worker warps: a dispatcher that waited would hold every job behind it in its stripe.
#ifndef BPFT_SHORT_TIER_NS
#define BPFT_SHORT_TIER_NS 50000
#endif

// One record of `bytes` comes through the tier: its latency, and its bytes through the
// link (bpf_tier_wait_at, as a tiered map's helpers do).
static __device__ __forceinline__ void tier_fetch(const bpft_tier_ref &t, u64 bytes) {
    if (t.tat) bpf_tier_wait_at(t.ns, t.ps, t.tat, bytes);
}

// Validates `d` for the GPU. On success fills the device addresses. Anything else goes to
// the host runner, which produces the error completion (or runs what the GPU cannot).
static __device__ bool validate(const bpft_params &P, const bpft_job_desc &d, const bpft_prog &p,
                         u64 &in_base, u64 &out_base, u64 &res_base) {
    if (d.flags & (JF_VARLEN | JF_STOP_ON_ERROR)) return false;
    if (d.flags & JF_INJECT_FAULT) return (P.flags & BPFT_ALLOW_FAULT) != 0;
    if (d.n == 0 || d.n > P.max_records || d.in_rec_size == 0) return false;
    if (d.completion >= P.completions_total) return false;
    u64 need_in = d.n * (u64)d.in_rec_size;  // n <= max_records (u32), size u32: no overflow
    if (d.flags & JF_DEVICE_INPUT) {
        if (!fits(d.input_off, d.input_len, need_in, P.dev_arena_size)) return false;
        in_base = P.dev_arena + d.input_off;
    } else {
        if (!fits(d.input_off, d.input_len, need_in, P.arena_size)) return false;
        in_base = P.arena + d.input_off;
    }
    out_base = 0;
    if (d.out_rec_size) {
        u64 need_out = d.n * (u64)d.out_rec_size;
        if (d.flags & JF_DEVICE_OUTPUT) {
            if (!fits(d.output_off, d.output_len, need_out, P.dev_arena_size)) return false;
            out_base = P.dev_arena + d.output_off;
        } else {
            if (!fits(d.output_off, d.output_len, need_out, P.arena_size)) return false;
            out_base = P.arena + d.output_off;
        }
    }
    res_base = 0;
    if (d.flags & JF_RESULTS) {
        if (!fits(d.results_off, d.n * 8, d.n * 8, P.arena_size)) return false;
        res_base = P.arena + d.results_off;
    }
    (void)p;
    return true;
}

// run_record's native call `call`, its r0 into *r0, timed by the splits (4: `marks`; 5 to
// 8: cycle marks).
#if BPFT_HOP_SPLIT == 4
#define BPFT_TIMED_CALL(call)               \
    do {                                    \
        if (marks) marks[0] = now_ns(P);    \
        *r0 = (call);                       \
        if (marks) marks[1] = now_ns(P);    \
    } while (0)
#else
#define BPFT_TIMED_CALL(call) \
    do {                      \
        (void)marks;          \
        BPFT_MARK(5);         \
        *r0 = (call);         \
        BPFT_MARK(6);         \
    } while (0)
#endif

// Runs record `i`. Returns 0 or the interpreter's error code. `native`: the caller knows
// the program is native and the job one record (no interpreter call is compiled in, nor
// bpft_native's). A one-record job's native program is called through bpft_one_fn
// (BPFT_ONE_CALL), with the context's words in registers; otherwise the context is in
// local memory (in shared memory it made the lone fast path's run 0.1 µs longer on an
// H200).
static __device__ __forceinline__ int run_record(const bpft_params &P, const bpft_prog &p,
                                          const bpft_job_desc &d, u64 in_base, u64 out_base,
                                          u64 i, u64 *r0, u32 *err_pc, u64 *marks = 0,
                                          bool native = false) {
    if (BPFT_ONE_CALL && (native || (p.tier == BPFT_TIER_NATIVE && i == 0 && d.n == 1))) {
        const bpft_one_t one = (bpft_one_t)bpft_one_fn[p.native_slot];
        const u64 out_size = out_base ? d.out_rec_size : 0;
        BPFT_TIMED_CALL(one(in_base, d.in_rec_size, out_base, out_size, d.args[0], d.args[1], d.args[2], d.args[3]));
        return 0;
    }
    u64 ctx[10];
    u64 in = in_base + i * d.in_rec_size;
    ctx[0] = in;
    ctx[1] = in + d.in_rec_size;
    u64 out = out_base ? out_base + i * d.out_rec_size : 0;
    ctx[2] = out;
    ctx[3] = out ? out + d.out_rec_size : 0;
    ctx[4] = i;
    ctx[5] = d.n;
    ctx[6] = d.args[0];
    ctx[7] = d.args[1];
    ctx[8] = d.args[2];
    ctx[9] = d.args[3];
    if (native || p.tier == BPFT_TIER_NATIVE) {
        BPFT_TIMED_CALL(bpft_native(p.native_slot, (u64)ctx));
        return 0;
    }
    struct bpf_env env;
    env.trace_buf = P.trace_buf;
    env.max_insns = P.max_insns;
    env.thread = blockIdx.x * blockDim.x + threadIdx.x;
    env.lock_pid = P.lock_pid;
    env.r2 = 0;
    return bpf_interp_run(&p.interp, (u64)ctx, &env, r0, err_pc);
}

// A done-log entry's words 1..7 (bpft_done: the job's completion and client, status and
// pc, failing record, error code and flag, run time, records done and failed).
#define BPFT_LOG_WORDS 7

// Writes the words of done-log entry `e` at position `pos` (not its seq), once the log has
// room for it, and returns the entry.
static __device__ bpft_done *log_words(const bpft_params &P, u64 pos, const u64 *e) {
    bpft_state *S = (bpft_state *)P.state;
    bpft_ctl *C = (bpft_ctl *)P.ctl;
    // Read the host's position over PCIe only when the cached one says the log is full.
    if (pos - ld_rlx_gpu(&S->done_seen) > P.done_mask) {
        u64 seen;
        while (pos - (seen = ld_acq_sys(&C->done_consumed)) > P.done_mask) __nanosleep(200);
        atomicMax(&S->done_seen, seen);
    }
    bpft_done *slot = (bpft_done *)P.done_log + (pos & P.done_mask);
    u64 *dst = (u64 *)slot;
    st_fld(dst + 1, e[0]);
    st_fld_v2(dst + 2, e[1], e[2]);
    st_fld_v2(dst + 4, e[3], e[4]);
    st_fld_v2(dst + 6, e[5], e[6]);
    return slot;
}

// Writes done-log entry `e` (BPFT_LOG_WORDS words) at the log's next position, then the
// system-scope fence (RUNNING, the completion's fields and the entry before the entry's
// seq), then its seq. Waits while the log is a whole ring ahead of the host.
static __device__ void log_done(const bpft_params &P, const u64 *e) {
    bpft_state *S = (bpft_state *)P.state;
    const u64 pos = atomicAdd(&S->done_pos, 1ull);
    bpft_done *slot = log_words(P, pos, e);
    asm volatile(BPFT_COMPLETION_FENCE ::: "memory");
    st_rlx_sys(&slot->seq, pos + 1);
}

// BPFT_LOG_WARP 1: a dispatcher hands the done-log entries of the one-record jobs it
// published DONE_CHECKED (finish_job's `early`) to a second warp of its block, the log
// warp (log_warp), with the release of their queue slots: the log's system-scope fence
// (a PCIe round trip, longer while the completion's writes are in flight) then holds that
// warp, not the dispatcher's next poll. The hand-off is a ring in shared memory. The log
// warp acquires each entry at CTA scope before its fence, so (cumulativity) its fence
// orders the dispatcher's RUNNING and completion writes before the entry's seq and the
// slot's release, as the dispatcher's own fence did. A tuning knob (0: the dispatcher
// writes the log itself, as before).
#ifndef BPFT_LOG_WARP
#define BPFT_LOG_WARP 1
#endif
// The fewest short jobs in a batch that go to the log warp; a smaller batch writes its log
// itself, and its next poll leaves after that fence. A tuning knob: without BPFT_POLL_ADAPT,
// 1 made a lone client's round trip 0.7 µs longer (its first poll left before the client's
// next job could land, and the second came a poll round trip later).
#ifndef BPFT_LOG_WARP_MIN
#define BPFT_LOG_WARP_MIN 1
#endif
#define BPFT_LOG_RING 64
// BPFT_POLL_ADAPT 1: the first poll after a batch of one short job waits a while after it
// ran, because a lone client's next job lands a client round trip after its completion
// (PCIe, the client, its submit), and a poll that leaves too early comes back empty while
// the next one is a whole poll round trip (1.4-1.7 µs) later. The wait adapts: it grows by
// BPFT_POLL_UP ns after an empty first poll and shrinks by BPFT_POLL_DOWN ns after one that
// found a job, so it settles where one first poll in ten comes back empty; under load
// (first polls always find jobs) it falls to 0. BPFT_POLL_AFTER_NS: where it starts (and,
// with BPFT_POLL_UP and BPFT_POLL_DOWN 0, a fixed wait). Tuning knobs.
#ifndef BPFT_POLL_ADAPT
#define BPFT_POLL_ADAPT 1
#endif
#ifndef BPFT_POLL_AFTER_NS
#define BPFT_POLL_AFTER_NS 600
#endif
#ifndef BPFT_POLL_UP
#define BPFT_POLL_UP 90
#endif
#ifndef BPFT_POLL_DOWN
#define BPFT_POLL_DOWN 10
#endif
#ifndef BPFT_POLL_MAX_NS
#define BPFT_POLL_MAX_NS 3000
#endif
struct bpft_log_item {
    u64 e[BPFT_LOG_WORDS];  // log_done's words
    u64 slot, val;          // the queue slot to release, and its next seq (slot 0: none)
    u32 deferred;           // 0: the dispatcher wrote this job's log itself
    u32 pad[3];             // 88 bytes: lanes writing items side by side hit more banks
};
struct bpft_log_ring {
    bpft_log_item items[BPFT_LOG_RING];
    u32 head;  // items published (the dispatcher's lane 0, release)
    u32 tail;  // items done (the log warp, release)
    u32 stop;  // the dispatcher stopped and the ring is empty: the log warp returns
};
#if BPFT_LOG_WARP
__shared__ bpft_log_ring bpft_lr;
#endif
// The ring's words are written with st_rel_cta32 and read with ld_acq_cta32. (Volatile
// accesses instead, without the release's MEMBAR.CTA, left the dispatcher's part as long:
// 1.0 µs from a completion's start to its slot's hand-off either way.)

// Writes the completion of a finished job and its done-log entry with one system-scope
// fence: fields first (relaxed), then the fence, then the log entry's seq and, for OK
// jobs, DONE (relaxed stores the fence orders after every field). With an error status
// the host finalizes it (writes the message text, then publishes DONE). Waits while the
// done log is a whole ring ahead of the host.
// `early` (one-record self-contained jobs, run by the lane that marked them RUNNING, when
// BPFT_DONE_EARLY is on; run_short's caller decides): an OK job goes out as DONE_CHECKED with its fields and their check word, before the log
// entry and with no fence; the check word tells the client whether the fields it read are
// all there. The log's fence still comes before the caller frees the queue slot. Otherwise
// DONE follows the fence, which orders the fields before it (no check word).
// `defer` (BPFT_LOG_WARP, a dispatcher's short job): its log ring item; an early DONE's log
// entry goes there for the log warp instead of to the log.
static __device__ void finish_job(const bpft_params &P, const bpft_job_desc &d, const bpft_prog &p,
                           s32 status, u64 done, u64 failed, u64 r0, u32 err_pc, u64 err_record,
                           u32 err_code, u64 started, u32 hop_poll = 0, u32 hop_fence = 0,
                           bool early = false, bpft_log_item *defer = 0) {
    char *c = completion_ptr(P, d.completion);
#if BPFT_HOP_SPLIT >= 5
    if (threadIdx.x < 32) {
        long long *m = bpft_cyc[threadIdx.x];
        const long long prev7 = m[7], now = clock64();
        m[7] = now;
        u64 f;
        if (BPFT_HOP_SPLIT == 5)
            f = cyc_field(m[1] - m[0], 2, 0) | cyc_field(m[3] - m[0], 2, 1) | cyc_field(m[4] - m[0], 2, 2) |
                cyc_field(m[5] - m[0], 2, 3) | cyc_field(m[6] - m[0], 2, 4);
        else if (BPFT_HOP_SPLIT == 7)
            f = cyc_field(m[11] - m[0], 2, 0) | cyc_field(m[1] - m[0], 2, 1) | cyc_field(m[12] - m[0], 2, 2) |
                cyc_field(m[3] - m[0], 2, 3) | cyc_field(m[13] - m[0], 2, 4);
        else if (BPFT_HOP_SPLIT == 8)
            f = cyc_field(m[4] - m[0], 2, 0) | cyc_field(m[14] - m[0], 2, 1) | cyc_field(m[5] - m[0], 2, 2) |
                cyc_field(m[6] - m[0], 2, 3) | cyc_field(now - m[0], 2, 4);
        else if (BPFT_HOP_SPLIT == 9)
            f = cyc_field(m[15] - prev7, 2, 0) | cyc_field(m[8] - prev7, 2, 1) | cyc_field(now - m[0], 2, 2) |
                cyc_field(m[6] - m[5], 2, 3) | cyc_field(m[0] - m[9], 2, 4);
        else
            f = cyc_field(now - m[0], 4, 0) | cyc_field(m[8] - prev7, 4, 1) | cyc_field(m[9] - m[8], 4, 2) |
                cyc_field(m[10], 1, 3) | cyc_field(m[0] - m[9], 4, 4);
        hop_poll = (u32)f;
        hop_fence = (u32)(f >> 32);
    }
#endif
    u64 fin = now_ns(P);
    // The lane that stored RUNNING stores DONE: two writes of one thread to one word, which
    // the PTX memory model keeps in program order (they are morally strong), fence or not.
    const bool done_now = early && status == ST_OK;
    if (done_now) {
        // The words shm_maps::layout::completion_check covers, as the client will read them.
        const u64 w[BPFT_COMPLETION_CHECK_WORDS] = {
            (u64)(u32)status, (u64)p.version << 32, (u64)d.prog_id | ((u64)err_pc << 32), done, failed, r0,
            started, fin, (u64)hop_poll | ((u64)hop_fence << 32)};
        st_fld((u64 *)(c + BPFT_OFF_Completion_check), bpft_completion_check(w));
    }
    // Fields in as few stores as the layout allows (asserted below): status alone (offset
    // 4), then pairs, each as wide as its alignment permits (8 bytes for two u32, 16 for
    // two u64). The client's tag and submit time (48..64) are not touched.
    st_fld32(c + BPFT_OFF_Completion_status, (u32)status);
    st_fld32_v2(c + BPFT_OFF_Completion_message, 0, p.version);
    st_fld32_v2(c + BPFT_OFF_Completion_prog_id, d.prog_id, err_pc);
    st_fld((u64 *)(c + BPFT_OFF_Completion_records_done), done);
    st_fld_v2(c + BPFT_OFF_Completion_records_failed, failed, r0);  // 16-byte aligned
    st_fld_v2(c + BPFT_OFF_Completion_started_ns, started, fin);
    st_fld32_v2(c + BPFT_OFF_Completion_gpu_hops, hop_poll, hop_fence);
    if (done_now) st_rlx_sys32(c + BPFT_OFF_Completion_state, CS_DONE_CHECKED);
    BPFT_MARK(15);
    const u64 e[BPFT_LOG_WORDS] = {(u64)d.completion | ((u64)d.client << 32),
                                    (u64)(u32)status | ((u64)err_pc << 32),
                                    err_record,
                                    (u64)err_code | ((u64)(status != ST_OK) << 32),
                                    fin - started,
                                    done,
                                    failed};
#if BPFT_LOG_WARP
    if (defer) {
        defer->deferred = done_now;
        if (done_now) {
#pragma unroll
            for (int i = 0; i < BPFT_LOG_WORDS; i++) defer->e[i] = e[i];
            return;
        }
    }
#else
    (void)defer;
#endif
    log_done(P, e);
    if (status == ST_OK && !done_now) st_rlx_sys32(c + BPFT_OFF_Completion_state, CS_DONE);
}
static_assert(sizeof(struct bpft_done) == 64 && BPFT_OFF_Completion_state == 0, "done entry words");
static_assert(BPFT_OFF_Completion_status == 4 && BPFT_OFF_Completion_message == 8 &&
                  BPFT_OFF_Completion_prog_version == 12 && BPFT_OFF_Completion_prog_id == 16 &&
                  BPFT_OFF_Completion_err_pc == 20 && BPFT_OFF_Completion_records_done == 24 &&
                  BPFT_OFF_Completion_records_failed == 32 && BPFT_OFF_Completion_r0 == 40 &&
                  BPFT_OFF_Completion_started_ns == 64 && BPFT_OFF_Completion_finished_ns == 72,
              "the paired completion stores");
static_assert(BPFT_SIZE_Completion % 128 == 0 && BPFT_OFF_Completion_message % 8 == 0 &&
                  BPFT_OFF_Completion_prog_id % 8 == 0 && BPFT_OFF_Completion_records_failed % 16 == 0 &&
                  BPFT_OFF_Completion_started_ns % 16 == 0 && BPFT_OFF_Completion_gpu_hops % 8 == 0 &&
                  BPFT_OFF_Completion_check % 8 == 0,
              "vector stores need their width's alignment (a misaligned one kills the context)");

// Hands a job to the host runner.
static __device__ void forward(const bpft_params &P, const bpft_job_desc &d) {
    bpft_state *S = (bpft_state *)P.state;
    bpft_ctl *C = (bpft_ctl *)P.ctl;
    u64 pos = atomicAdd(&S->fwd_pos, 1ull);
    while (pos - ld_acq_sys(&C->fwd_consumed) > P.fwd_mask) __nanosleep(200);
    bpft_fwd *slot = (bpft_fwd *)P.fwd_ring + (pos & P.fwd_mask);
    const u64 *src = (const u64 *)&d;
    u64 *dst = (u64 *)&slot->desc;
#pragma unroll
    for (int i = 0; i < 15; i++) st_rlx_sys(dst + i, src[i]);
    st_rel_sys(&slot->seq, pos + 1);
}

// The short path: one record, run by the dispatcher lane that took the job.
// `ti`, `to`: its input's and output's tiers (job_tier), read by the dispatcher.
// `early`: the job wrote nothing the client reads but its completion (self_contained, no
// results buffer), so its DONE may go out before the log's fence (finish_job).
// `native`: run_record's.
static __device__ void run_short(const bpft_params &P, const bpft_job_desc &d, const bpft_prog &p,
                          const bpft_tier_ref &ti, const bpft_tier_ref &to, u64 in_base,
                          u64 out_base, u64 res_base, u64 started, u32 hop_poll, u32 hop_fence,
                          bool early, bpft_log_item *defer, bool native = false) {
    u64 r0 = 0;
    u32 err_pc = 0;
#if BPFT_HOP_SPLIT == 4
    u64 marks[2] = {0, 0};
    const u64 t_run = now_ns(P);
    tier_fetch(ti, d.in_rec_size);
    int e = run_record(P, p, d, in_base, out_base, 0, &r0, &err_pc, marks, native);
    tier_fetch(to, d.out_rec_size);
    {
        const u64 f = hop_split_field(t_run - started, 0) | hop_split_field(marks[0] - started, 1) |
                      hop_split_field(marks[1] - started, 2) | hop_split_field(now_ns(P) - started, 3);
        hop_poll = (u32)f;
        hop_fence = (u32)(f >> 32);
    }
#else
    tier_fetch(ti, d.in_rec_size);
    int e = run_record(P, p, d, in_base, out_base, 0, &r0, &err_pc, 0, native);
    tier_fetch(to, d.out_rec_size);
#endif
#if BPFT_HOP_SPLIT == 1
    hop_fence = (u32)(now_ns(P) - started);
#elif BPFT_HOP_SPLIT == 3
    hop_fence |= (u32)(hop_split_field(now_ns(P) - started, 4) >> 32);
#endif
    if (res_base) st_rlx_sys((u64 *)res_base, e ? ~0ull : r0);
    finish_job(P, d, p, e ? ST_RUNTIME_ERROR : ST_OK, e ? 0 : 1, e ? 1 : 0, e ? 0 : r0, err_pc,
               0, (u32)e, started, hop_poll, hop_fence, early, defer);
}

// Publishes a multi-record job to the ring. Reusing a slot waits until its previous job
// has retired and no warp is still inside it: the slot's seq is cleared first, and a
// worker re-checks seq after announcing itself in `active` (both sides fence in between).
static __device__ void publish(const bpft_params &P, const bpft_job_desc &d, const bpft_prog &p,
                        u64 in_base, u64 out_base, u64 res_base, u64 started) {
    bpft_state *S = (bpft_state *)P.state;
    u64 pos = atomicAdd(&S->job_pub, 1ull);
    bpft_djob *j = (bpft_djob *)P.jobs + (pos & P.job_mask);
    if (pos > P.job_mask) {
        u64 prev = pos - (P.job_mask + 1);
        while (ld_acq_gpu(&j->done_seq) != prev + 1) __nanosleep(100);
        st_rel_gpu(&j->seq, 0);
        __threadfence();
        while (ld_rlx_gpu32(&j->active) != 0) __nanosleep(100);
        __threadfence();
    }
    j->d = d;
    j->p = p;
    j->in_base = in_base;
    j->out_base = out_base;
    j->res_base = res_base;
    j->started_ns = started;
    j->next = 0;
    j->finished = 0;
    j->failed = 0;
    j->first_err = ~0ull;
    j->best_idx = 0;
    j->best_r0 = 0;
    j->lock = 0;
    j->err_pc = 0;
    j->err_code = 0;
    st_rel_gpu(&j->seq, pos + 1);
    __threadfence();
}

// Benchmark of the host mailbox (job flag MAILBOX_PING): n times, write a record into the
// trace ring and wait until the host thread has consumed it (ctl->trace_consumed), timed
// with %globaltimer on the GPU alone. r0 = total ns, records_done = n.
static __device__ void mailbox_ping(const bpft_params &P, const bpft_job_desc &d, const bpft_prog &p,
                             u64 started) {
    bpft_ctl *C = (bpft_ctl *)P.ctl;
    u64 *ring = (u64 *)P.trace_buf;
    u64 total = 0;
    for (u64 i = 0; i < d.n; i++) {
        u64 k = atomicAdd((unsigned long long *)ring, 1ull);
        u64 cap = ring[1];
        u64 *rec = ring + 8 + 8 * (k & (cap - 1));
        u64 t0 = globaltimer();
        st_rlx_sys(rec + 1, 0);  // helper 0: a ping, not printed
        st_rlx_sys(rec + 7, t0);
        st_rel_sys(rec, k + 1);
        while (ld_acq_sys(&C->trace_consumed) < k + 1) {
        }
        total += globaltimer() - t0;
    }
    finish_job(P, d, p, ST_OK, d.n, 0, total, 0, 0, 0, started);
}

// Reads a slot's descriptor (`src`) and inline words (`isrc`) one strong load at a time:
// after a fence that ordered them after the slot's seq, they belong to that seq.
static __device__ __forceinline__ void reread_slot(const char *src, const char *isrc, u64 *dw, u64 *iw) {
#pragma unroll
    for (int i = 0; i < 15; i++) dw[i] = ld_rlx_sys(src + 8 * i);
#pragma unroll
    for (int i = 0; i < BPFT_INLINE_WORDS; i++) iw[i] = ld_rlx_sys(isrc + 8 * i);
}

// Reads a slot's descriptor (`src`, 8 strong 16-byte loads, the last bringing the first
// inline word) and only the inline words (`isrc`) its job has, after the acquire fence.
static __device__ __forceinline__ void read_slot(const char *src, const char *isrc, u64 *dw, u64 *iw) {
#pragma unroll
    for (int i = 0; i < 14; i += 2) ld_rlx_sys_v2(src + 8 * i, dw[i], dw[i + 1]);
    ld_rlx_sys_v2(src + 8 * 14, dw[14], iw[0]);
    const int m = bpft_inline_words(dw);
#pragma unroll
    for (int i = 1; i < BPFT_INLINE_WORDS; i += 2)
        if (i < m) ld_rlx_sys_v2(isrc + 8 * i, iw[i], iw[i + 1]);
}

// How many consecutive slots from the position are taken in this poll (`take`: one per
// lane, below `w`), and the next poll's width: doubled while every slot read was taken,
// else one past this batch.
static __device__ __forceinline__ u32 take_count(int take, u32 w, u32 &width) {
    const u32 mask = __ballot_sync(FULL_MASK, take);
    const u32 k = (~mask == 0) ? 32 : (__ffs(~mask) - 1);
    width = k == w ? (w < 16 ? 2 * w : 32) : k + 1;
    return k;
}

// Whether job `d` of program `p` touches nothing a client wrote or reads but its slot and
// its completion (BPFT_LAZY_FENCE, BPFT_DONE_EARLY): one record, all of its input inline, no
// output buffer, a program with no maps (known from its bytecode's descriptor: an entry
// without one, a native fallback, does not count). Its program entry, and an input tier's
// entry, are device memory the host wrote before `load` or `alloc` returned, read from L2;
// an input tier only delays the job, so a tiered job takes the same path as a local one and
// pays only its tier. (`trace_printk` records are not ordered before such a job's DONE.)
static __device__ __forceinline__ bool self_contained(const bpft_job_desc &d, const bpft_prog &p) {
    const u64 *w = (const u64 *)&d;
    return d.n == 1 && bpft_inline_words(w) > 0 && d.out_rec_size == 0 && p.interp.n_insns != 0 &&
           p.interp.n_maps == 0 && !(d.flags & (JF_DEVICE_INPUT | JF_MAILBOX_PING | JF_INJECT_FAULT));
}

// 1: a lone job (a poll's batch of one, read whole) that lone_fast accepts takes the lone
// fast path in the dispatcher: one straight run of code, with one test without branches
// in place of the general classification's chain of dependent ones (lookup_prog,
// validate, self_contained, the tiers, the input's set-up). A tuning knob. It needs the
// descriptor, the entry and the input in shared memory, and whole-slot polls with the lazy
// fence; the GPU-time splits BPFT_HOP_SPLIT 1-4 time the general path, so they turn it off.
#ifndef BPFT_FAST_LONE
#define BPFT_FAST_LONE 1
#endif

// Whether the job of descriptor words `w` (its staging row), whose slot passed its check
// (`retry` 0), can take the lone fast path: what validate, self_contained and job_tier's
// caller conclude, for the one case where they all agree without a lookup. The job carries
// no flag but INLINE (and the device it was routed to); one record, all of it inline; no
// output; its completion and its arena input range in bounds; and the index word just read
// for its program, `word`, names the entry cached in `cached` (lookup_prog's cache row), a
// native program without maps. Evaluated without branches: every term is computed, then
// combined.
// `lone_terms`: the terms that need neither the slot check nor the index word.
static __device__ __forceinline__ bool lone_terms(const bpft_params &P, const u64 *w, const u64 *cached) {
    const u32 flags = (u32)(w[0] >> 32), in_rec = (u32)w[6], out_rec = (u32)(w[6] >> 32);
    const u32 completion = (u32)(w[13] >> 32);
    const bpft_prog &p = *(const bpft_prog *)cached;
    return ((flags & ~(BPFT_JF_INLINE | BPFT_JF_DEVICE_MASK)) == 0) & (bpft_inline_words(w) > 0) & (w[1] == 1) &
           (P.max_records != 0) & (out_rec == 0) & (completion < P.completions_total) &
           fits(w[2], w[3], in_rec, P.arena_size) & (p.tier == BPFT_TIER_NATIVE) & (p.interp.n_insns != 0) &
           (p.interp.n_maps == 0);
}
static __device__ __forceinline__ bool lone_fast(const bpft_params &P, const u64 *w, const u64 *cached,
                                                 u32 word, int retry) {
    return (retry == 0) & (word != 0) & (cached[8] == word) & lone_terms(P, w, cached);
}

// 1: the lone path computes lone_terms before the slot check's reduction, in one run of
// loads and arithmetic with the check's mixes (ptxas schedules them together; each shuffle
// of the reduction ends a block of SASS), and takes the check word from the staging row;
// 0: the check, then lone_fast (a tuning knob).
#ifndef BPFT_LONE_ORDER
#define BPFT_LONE_ORDER 1
#endif

// How many dispatcher warps this launch has (BPFT_DISPATCHERS, at most one a block and
// BPFT_MAX_DISPATCHERS, and a whole number of stripe rounds in the queue). Every launch of
// a worker has the same grid and queue, hence the same count (`bpft_state::dpos`).
static __device__ __forceinline__ u32 dispatcher_count(const bpft_params &P) {
    u32 n = BPFT_DISPATCHERS < BPFT_MAX_DISPATCHERS ? BPFT_DISPATCHERS : BPFT_MAX_DISPATCHERS;
    if (n > gridDim.x) n = gridDim.x;
    const u64 cap = (u64)P.queue_mask + 1;
    while (n > 1 && cap % ((u64)BPFT_STRIPE * n) != 0) n--;
    return n < 1 ? 1 : n;
}

// The first position at or after `p` in dispatcher d's stripes (of D).
static __device__ __forceinline__ u64 stripe_from(u64 p, u32 d, u32 D) {
    const u64 s = p / BPFT_STRIPE, own = s - s % D + d;
    if (own == s) return p;
    return (own > s ? own : own + D) * BPFT_STRIPE;
}

// 1: a dispatcher lane keeps its job's descriptor and inline words in its staging row of
// shared memory, and its program entry in its row of the entry cache, instead of in
// registers (60 and 16 of them: with them the kernel's 128 spilled about 750 bytes to
// local memory, without them about 75; device/tests/runtime_ptx.rs). A tuning knob.
#ifndef BPFT_DESC_SHARED
#define BPFT_DESC_SHARED 1
#endif

// A staging row's words: a slot's 32 and one of padding, so that the lanes of a batch,
// each reading the same field of its own row (BPFT_DESC_SHARED), hit different banks (with
// 32, every row began in the same bank).
#define BPFT_STAGE_ROW 33

// A diagnostic: BPFT_PAD_ROUNDS rounds of independent arithmetic on the short path (after
// RUNNING is stored), straight-line (BPFT_PAD_LOOP 0) or in a loop, to tell what an
// instruction costs there: its issue, or its fetch. (On an H200, 2-2.4 cycles either way:
// bench/results/gpu_service.md.)
#ifndef BPFT_PAD_ROUNDS
#define BPFT_PAD_ROUNDS 0
#endif
#ifndef BPFT_PAD_LOOP
#define BPFT_PAD_LOOP 0
#endif

// Counts the lanes whose slot had to be read again (`torn_reads` in the control block).
static __device__ __forceinline__ void count_torn(int retry, bpft_state *S, bpft_ctl *C, u32 lane) {
    const u32 retried = __ballot_sync(FULL_MASK, retry);
    if (retried && lane == 0) {
        const u64 t = atomicAdd(&S->torn, (u64)__popc(retried)) + __popc(retried);
        st_rlx_sys(&C->torn_reads, t);
    }
}

// After a coalesced read of slot bodies, where instruction i brought slots 2i and 2i+1
// (lanes 0..15 the first, 16..31 the second, 16 bytes each, past seq and check): the
// bodies go through shared memory, and each lane below `n` picks up its own slot's
// descriptor and inline words.
// `head`: the body's chunk 0 holds the slot's seq and check words (a whole-slot poll), kept
// in the row's words 0 and 1 too.
template <u32 N>
static __device__ __forceinline__ void unstage(u64 (*stage)[BPFT_STAGE_ROW], const u64 (&body)[N][2], u32 n, u32 lane,
                                        u64 *dw, u64 *iw, bool head = false) {
    const u32 half = lane >> 4, chunk = lane & 15;
#pragma unroll
    for (u32 i = 0; i < N; i++) {
        const u32 j = 2 * i + half;
        if ((chunk != 0 || head) && j < n) {
            stage[j][2 * chunk] = body[i][0];
            stage[j][2 * chunk + 1] = body[i][1];
        }
    }
    __syncwarp();
    if (!BPFT_DESC_SHARED && lane < n) {
#pragma unroll
        for (int i = 0; i < 15; i++) dw[i] = stage[lane][2 + i];
#pragma unroll
        for (int i = 0; i < BPFT_INLINE_WORDS; i++) iw[i] = stage[lane][17 + i];
    }
    __syncwarp();
}

// A poll's loads, issued and maybe not yet arrived: when it was issued, this lane's 16
// bytes (lane l: slot pos + l below w; a whole-slot poll, w <= 2: lanes 0..15 the first
// slot, 16..31 the second, 16 bytes each), and lane 31's stop word.
struct bpft_poll {
    u64 a, b, t;
    u32 stop;
};

static __device__ __forceinline__ bool poll_whole(u32 w) {
#if BPFT_TWO_PHASE == 2 && BPFT_POLL_WHOLE
    return w <= 2;
#else
    (void)w;
    return false;
#endif
}

// Issues poll `r` of (pos, w) for dispatcher d. The loads are in flight until its values
// are used, so the caller can do other work meanwhile.
static __device__ __forceinline__ void poll_issue(const bpft_params &P, u32 d, u32 lane, u64 pos, u32 w,
                                                  bpft_poll &r, bool host_stop = true) {
    r.a = r.b = 0;
    r.stop = 0;
    r.t = globaltimer();
    if (poll_whole(w)) {
        const u32 half = lane >> 4, chunk = lane & 15;
        if (half < w) {
            const void *a = (const void *)(P.slots + ((pos + half) & P.queue_mask) * BPFT_SIZE_QueueSlot + 16 * chunk);
            if (BPFT_POLL_ACQUIRE && chunk == 0) ld_acq_sys_v2(a, r.a, r.b);
            else ld_rlx_sys_v2(a, r.a, r.b);
        }
    } else if (lane < w) {
        ld_rlx_sys_v2((const void *)(P.slots + ((pos + lane) & P.queue_mask) * BPFT_SIZE_QueueSlot), r.a, r.b);
    }
    if (lane == 31) {
        // Dispatcher 0 reads the host's stop word when `host_stop` (every BPFT_STOP_EVERY-th
        // poll; relaxed: an acquire load would hold the warp until it returns; the caller
        // fences once it sees stop), else, as the others do, the copy it leaves in device
        // memory.
        if (d != 0 || !host_stop) r.stop = *(volatile u32 *)&((bpft_state *)P.state)->stop;
        else r.stop = ld_rlx_sys32(&((bpft_ctl *)P.ctl)->stop);
    }
}

// D > 1: publishes dispatcher d's position `pos`, then stores the queue head as the least
// of all of them. A stale, smaller position from another dispatcher is still a safe head
// (a lower bound of the positions not taken), and so is one that lags a poll behind
// (BPFT_HEAD_SHADOW): recovery looks a lap behind the head too. `fence`: the old way, a
// fence after the position's store.
static __device__ __forceinline__ void store_head(bpft_state *S, u64 *head_word, u32 d, u32 D, u32 lane,
                                                  u64 pos, bool fence) {
    if (lane == 0) {
        *(volatile u64 *)&S->dpos[d] = pos;
        if (fence) __threadfence();
    }
    __syncwarp();
    u64 q = lane < D ? *(volatile u64 *)&S->dpos[lane] : ~0ull;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const u64 x = __shfl_xor_sync(FULL_MASK, q, o);
        q = x < q ? x : q;
    }
    if (lane == 0) st_rlx_sys(head_word, q);
}

// 1: lone_check XORs its lanes' words with two warp reductions (REDUX), 0: with a
// five-level shuffle tree (a tuning knob). On an H200 the tree's round trip was 0.1-0.2 µs
// shorter in four alternations of four (bench/results/gpu_service.md).
#ifndef BPFT_LONE_REDUX
#define BPFT_LONE_REDUX 0
#endif
// BPFT_FAST_LONE where what it needs is on.
#if BPFT_FAST_LONE && (BPFT_HOP_SPLIT < 1 || BPFT_HOP_SPLIT > 4) && BPFT_DESC_SHARED && BPFT_ENTRY_CACHE && \
    BPFT_SHARED_INPUT && BPFT_LAZY_FENCE && !BPFT_POLL_ACQUIRE && BPFT_TWO_PHASE == 2 && BPFT_POLL_WHOLE
#define BPFT_LONE_PATH 1
#else
#define BPFT_LONE_PATH 0
#endif

// The slot check of a whole-slot poll, computed by the warp: each lane mixes the two words
// of its 16-byte chunk (`wb0`, `wb1`; bpft_slot_chunk_check), a reduction over each half
// XORs them, and each lane compares its own slot's (half `lane & 1`) with its check word
// `chk` (one lane computing 30 mixes in a row took about 1 µs).
static __device__ __forceinline__ int whole_check(u64 wb0, u64 wb1, u64 chk, u32 lane) {
    const u32 base = lane & 16;
    const u64 hseq = __shfl_sync(FULL_MASK, wb0, base);
    u64 d7[7];
    d7[0] = __shfl_sync(FULL_MASK, wb0, base | 1);
    d7[1] = __shfl_sync(FULL_MASK, wb1, base | 1);
    d7[6] = __shfl_sync(FULL_MASK, wb0, base | 4);
    d7[2] = d7[3] = d7[4] = d7[5] = 0;
    u64 h = bpft_slot_chunk_check(hseq, wb0, wb1, (int)(lane & 15), bpft_inline_words(d7));
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) h ^= __shfl_xor_sync(FULL_MASK, h, o);
    return __shfl_sync(FULL_MASK, h, (lane & 1) * 16) == chk;
}

// The lone fast path's slot check of the slot at `row` (its staging row, words 2..31;
// unstage) under sequence `seq`: every lane mixes one word (lane k: slot word k; seq and
// check add nothing), and a shuffle tree (or two warp reductions, BPFT_LONE_REDUX) XORs
// them: one mix a lane where whole_check, which works on two slots at once, has two. Every
// lane returns whether the result is `chk`.
static __device__ __forceinline__ bool lone_check(const u64 *row, u64 seq, u64 chk, u32 lane) {
    u64 h = bpft_slot_word_check(seq, row[lane], (int)lane, bpft_inline_words(row + 2));
#if BPFT_LONE_REDUX
    const u32 lo = __reduce_xor_sync(FULL_MASK, (u32)h), hi = __reduce_xor_sync(FULL_MASK, (u32)(h >> 32));
    return ((u64)hi << 32 | lo) == chk;
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) h ^= __shfl_xor_sync(FULL_MASK, h, o);
    return h == chk;
#endif
}

// A batch of `n` jobs, marked RUNNING, ending before position `pos`: counted (into the
// control block every 256 batches), and with one dispatcher the queue head moves past it.
// The head moves only past jobs marked RUNNING (a lost context must never leave a taken
// job unmarked). With more dispatchers each keeps its own position, and the head is their
// minimum (store_head).
static __device__ __forceinline__ void count_batch(bpft_state *S, bpft_ctl *C, u64 *head_word, u32 D, u32 lane,
                                                   u64 pos, u32 n, u64 &taken, u64 &batches) {
    taken += n;
    batches++;
    if (D == 1 && lane == 0) st_rlx_sys(head_word, pos);
    if (lane == 0 && (batches & 255) == 0) {
        st_rlx_sys(&C->jobs_taken, atomicAdd(&S->taken, taken) + taken);
        st_rlx_sys(&C->batches, atomicAdd(&S->batches, batches) + batches);
        taken = batches = 0;
    }
}

#if BPFT_LOG_WARP
// Waits (one lane) until the log ring has room for `n` more items past `log_head`; the
// log warp's position is read only when the one seen last, `log_seen`, leaves none.
static __device__ __forceinline__ void log_room(u32 n, u32 log_head, u32 &log_seen) {
    if (log_head + n - log_seen > BPFT_LOG_RING) {
        while (log_head + n - (log_seen = ld_acq_cta32(&bpft_lr.tail)) > BPFT_LOG_RING) __nanosleep(32);
    }
}

// This lane's log ring item among a batch's short jobs (`shorts`: their lanes, in lane
// order from `log_head`), its slot cleared, or 0. The ring has room (log_room).
static __device__ __forceinline__ bpft_log_item *log_item(u32 shorts, u32 lane, u32 log_head) {
    if (!(shorts >> lane & 1)) return 0;
    bpft_log_item *it = &bpft_lr.items[(log_head + __popc(shorts & ((1u << lane) - 1))) % BPFT_LOG_RING];
    it->slot = 0;
    return it;
}

// Hands a batch's reserved items to the log warp.
static __device__ __forceinline__ void log_publish(u32 shorts, u32 lane, u32 &log_head) {
    __syncwarp();
    log_head += __popc(shorts);
    if (lane == 0) st_rel_cta32(&bpft_lr.head, log_head);
}
#endif

// Frees a taken job's queue slot for the producers one lap later (`val`). A short job's
// slot goes after its completion and its done-log entry, whose fence orders RUNNING, the
// completion and the entry first (an early DONE goes out before that fence, but the slot
// after it: recovery, job::fail_taken, finds such a job DONE and does not run it again), so
// no release is needed (`relaxed`): when the log warp writes the entry (`defer`, deferred),
// it frees the slot after its fence. The others need RUNNING visible first (a lost context
// must never leave a taken job unmarked), hence a release store. Returns whether the log
// warp took it.
static __device__ __forceinline__ bool release_slot(bpft_log_item *defer, char *slot, u64 val, bool relaxed) {
#if BPFT_LOG_WARP
    if (defer && defer->deferred) {
        defer->slot = (u64)slot;
        defer->val = val;
        return true;
    }
#else
    (void)defer;
#endif
    if (relaxed) st_rlx_sys(slot, val);
    else st_rel_sys(slot, val);
    return false;
}

// Dispatcher d of D. Walks its own positions in order (every D-th stripe of BPFT_STRIPE),
// takes ready jobs in batches of up to 32 (one per lane), runs one-record jobs itself and
// publishes the rest. At stop, dispatcher 0 waits for the others and drains.
static __device__ void dispatcher(const bpft_params &P, const u32 d, const u32 D) {
    bpft_state *S = (bpft_state *)P.state;
    bpft_ctl *C = (bpft_ctl *)P.ctl;
    const u32 lane = threadIdx.x & 31;
    const u64 cap = (u64)P.queue_mask + 1;
    u64 *head_word = (u64 *)(P.queue_hdr + BPFT_OFF_QueueHeader_head);
    // Up: the worker waits for this before it asks the host for the queue back.
    if (d == 0 && lane == 0) st_rlx_sys32(&C->running, 1);
    // A host gap (wire.rs): the host may still be taking jobs while this kernel starts;
    // the queue is ours once it says it has stopped.
    if (lane == 0) {
        while (ld_acq_sys(&C->gap_open) != ld_acq_sys(&C->gap_done)) __nanosleep(500);
    }
    __syncwarp();
    // Where the last launch of this worker stopped, else (a new worker) the queue's head:
    // positions from there that some dispatcher had already taken are skipped (`gone`).
    u64 pos = *(volatile u32 *)&S->resume ? *(volatile u64 *)&S->dpos[d]
                                           : stripe_from(ld_acq_sys(head_word), d, D);
    u64 taken = 0, batches = 0;
    // Slot staging: 32 slots of 32 words (256 bytes), one per lane, a row each.
    __shared__ u64 stage[32][BPFT_STAGE_ROW];
    // Each lane's last program entry and its index word (lookup_prog).
    __shared__ u64 entry_cache[32][9];
    entry_cache[lane][8] = 0;
#if BPFT_HOP_SPLIT >= 5
    for (int i = 0; i < 16; i++) bpft_cyc[lane][i] = i == 10 ? 0 : clock64();
#endif
    bool idle = false;  // the last poll found nothing
#if BPFT_LOG_WARP
    u32 log_head = 0;  // items this dispatcher has published to its log warp (every lane's copy)
    u32 log_seen = 0;  // the log warp's position (`tail`) when last read
#endif
    u32 since_head = 0;  // batches since the head was stored (BPFT_HEAD_EVERY)
    u64 head_at = pos;  // the position it was stored at
    u32 polls = 0;  // BPFT_STOP_EVERY
    u32 width = 1;  // lanes that read a slot in the next poll
    bool head_due = false;  // D > 1: the head is to be stored in the next poll's shadow
#if BPFT_POLL_ADAPT
    u64 poll_after = 0;  // the next poll leaves at this %globaltimer
    u32 poll_wait = BPFT_POLL_AFTER_NS;  // ns from a batch of short jobs to the next poll
    bool first_after = false;  // this poll is the first after such a batch
#endif
    // The end of a batch. `lone_short`: it was one short job, so the next poll leaves
    // `poll_wait` ns after it ran (BPFT_POLL_ADAPT; a bigger batch means a loaded queue,
    // whose next jobs are already there). With several dispatchers the head is stored, in
    // the next poll's shadow (BPFT_HEAD_SHADOW) or now.
    auto end_batch = [&](bool lone_short) {
#if BPFT_POLL_ADAPT
        if (lone_short) {
            poll_after = globaltimer() + poll_wait;
            first_after = true;
        }
#else
        (void)lone_short;
#endif
        if (D > 1) {
            if (BPFT_HEAD_SHADOW) head_due = true;
            else store_head(S, head_word, d, D, lane, pos, true);
        }
    };
    for (;;) {
        // Lane l looks at slot pos + l (lanes below `w`, inside this stripe when D > 1);
        // lane 31 reads the stop word in the same round.
        const u64 my = pos + lane;
        const u32 room = D == 1 ? 32 : (u32)(BPFT_STRIPE - pos % BPFT_STRIPE);
        const u32 w = width < room ? width : room;
        char *slot = (char *)(P.slots + (my & P.queue_mask) * BPFT_SIZE_QueueSlot);
        const char *src = slot + BPFT_OFF_QueueSlot_desc;
        const char *isrc = slot + BPFT_OFF_QueueSlot_inline;
#if BPFT_DESC_SHARED
        // The lane's slot stays in its staging row: descriptor words 2..16, inline words
        // 17..31 (the slot's bytes 16..255), read where they are used.
        u64 *dw = &stage[lane][2];
        u64 *iw = &stage[lane][17];
        bpft_job_desc &dj = *(bpft_job_desc *)dw;
#else
        bpft_job_desc dj;
        u64 *dw = (u64 *)&dj;
        u64 iw[BPFT_INLINE_WORDS];  // the slot's inline input words
#endif
        u64 seq = 0, chk = 0;
        u64 wb0 = 0, wb1 = 0;  // a whole-slot poll: this lane's 16-byte chunk of its half's slot
        u32 stop = 0;
        // Two phases: the seq and check words of `w` slots (one 16-byte load each, with the
        // stop word: one round trip), then, once a job is ready and after the acquire
        // fence, the ready slots' bodies. Strong system-scope loads from one warp are served
        // one after another, so what counts is how many there are
        // (bench/results/gpu_service.md).
        bpft_poll x;
#if BPFT_POLL_ADAPT
        while (globaltimer() < poll_after) {
        }
        const bool first = first_after;
        first_after = false;
#endif
        poll_issue(P, d, lane, pos, w, x, BPFT_STOP_EVERY <= 1 || ++polls % BPFT_STOP_EVERY == 0);
        BPFT_MARK(9);
#if BPFT_HOP_SPLIT >= 5
        bpft_cyc[lane][10]++;
#endif
        if (BPFT_HEAD_SHADOW && D > 1 && head_due &&
            (idle || ++since_head >= BPFT_HEAD_EVERY || pos - head_at >= cap / 4)) {
            head_due = false;
            since_head = 0;
            head_at = pos;
            store_head(S, head_word, d, D, lane, pos, false);
        }
        const u64 t_poll = x.t;
        const bool whole = poll_whole(w);
        if (whole) {
#if BPFT_TWO_PHASE == 2 && BPFT_POLL_WHOLE
            // One or two slots: the poll read them whole (lanes 0..15 the first, 16..31 the
            // second, 16 bytes each, two 128-byte requests a slot), so a job found ready
            // needs no read after the fence: its check word vouches for the body (else it
            // is read again, after the fence, below).
            u64 b[1][2] = {{x.a, x.b}};
            seq = __shfl_sync(FULL_MASK, b[0][0], (lane & 1) * 16);
            chk = __shfl_sync(FULL_MASK, b[0][1], (lane & 1) * 16);
            wb0 = b[0][0];
            wb1 = b[0][1];
            unstage(stage, b, w, lane, dw, iw, true);
#endif
        } else if (lane < w) {
            seq = x.a;
            chk = x.b;
        }
        if (lane == 31) {
            stop = x.stop;
            if (d == 0 && stop) {
                // Read relaxed: acquire what the host wrote before it.
                asm volatile("fence.acq_rel.sys;" ::: "memory");
                if (D > 1) *(volatile u32 *)&S->stop = 1;
            }
        }
        const int ready = lane < w && seq == my + 1;
        // Taken before this launch by a dispatcher that was ahead of the head this one
        // resumed from, or released by recovery: its seq has moved past pos + 1.
        const int gone = lane < w && (s64)(seq - (my + 1)) > 0;
        if (__shfl_sync(FULL_MASK, stop, 31)) break;
        const u32 k = take_count(ready || gone, w, width);
        idle = k == 0;
#if BPFT_POLL_ADAPT
        // Found nothing: the next job had not landed; wait longer next time. Found one:
        // a little shorter. (The wait settles where about 1 in BPFT_POLL_UP / BPFT_POLL_DOWN
        // + 1 first polls finds nothing.)
        if (first) {
            if (k == 0) poll_wait = poll_wait + BPFT_POLL_UP < BPFT_POLL_MAX_NS ? poll_wait + BPFT_POLL_UP : BPFT_POLL_MAX_NS;
            else poll_wait = poll_wait > BPFT_POLL_DOWN ? poll_wait - BPFT_POLL_DOWN : 0;
        }
#endif
        if (k == 0) continue;
        const int live = lane < k && ready;
        const u32 nlive = __popc(__ballot_sync(FULL_MASK, live));
        pos += k;
        if (D > 1 && pos % BPFT_STRIPE == 0) pos += (u64)BPFT_STRIPE * (D - 1);
        if (nlive == 0) continue;
#if BPFT_LONE_PATH
        if (whole && k == 1 && nlive == 1) {
            // The lone fast path (BPFT_FAST_LONE): one job, at `pos`, read whole by lanes
            // 0..15. The same steps as below, for the one case lone_fast accepts, in one
            // straight run of code. Every lane reads the job's staging row and asks for its
            // program's index word (one request, whose L2 round trip overlaps the slot
            // check), so every value the test needs is in every lane: no branch, no shuffle.
            // Anything else falls through to the general path, which starts over (nothing
            // here has been written yet).
            const u64 t_seen = globaltimer();
            BPFT_MARK(0);
            const u64 *w0 = &stage[0][2];
            const u32 pid = (u32)w0[0];
            const u32 word = pid < P.max_progs ? ld_rlx_gpu32((const u32 *)P.prog_index + pid) : 0;
#if BPFT_LONE_ORDER
            const bool terms = lone_terms(P, w0, entry_cache[0]);
            // The slot is ready: its seq is its position + 1; its check word is in its row.
            const bool ok = lone_check(stage[0], my - lane + 1, stage[0][1], lane);
            BPFT_MARK(11);
            if (terms & ok & (word != 0) & (entry_cache[0][8] == word)) {
#else
            // The slot is ready: its seq is its position + 1. Its check word is lane 0's.
            const bool ok = lone_check(stage[0], my - lane + 1, __shfl_sync(FULL_MASK, chk, 0), lane);
            BPFT_MARK(11);
            if (lone_fast(P, w0, entry_cache[0], word, !ok)) {
#endif
                BPFT_MARK(1);  // checked, found, validated and classified at once
                BPFT_MARK(3);
                BPFT_MARK(13);
                // Lane 0 does the rest alone (its job, its slot; the counts are lane 0's).
                if (lane == 0) {
                    const u64 started = now_ns(P);
                    st_fld32(completion_ptr(P, dj.completion) + BPFT_OFF_Completion_state, CS_RUNNING);
                    BPFT_MARK(12);
                    count_batch(S, C, head_word, D, 0, pos, 1, taken, batches);
                    BPFT_MARK(4);
                    bpft_log_item *defer = 0;
#if BPFT_LOG_WARP
                    log_room(1, log_head, log_seen);
                    defer = log_item(1u, 0, log_head);
#endif
                    BPFT_MARK(14);
                    const bpft_tier_ref local = {0, 0, 0};
                    run_short(P, dj, *(const bpft_prog *)entry_cache[0], local, local, (u64)&stage[0][17], 0, 0,
                              started, (u32)(t_seen - x.t), (u32)(started - P.time_offset - t_seen),
                              BPFT_DONE_EARLY, defer, true);
                    release_slot(defer, slot, my + cap, true);
                    BPFT_MARK(8);
#if BPFT_HOP_SPLIT >= 5
                    bpft_cyc[0][10] = 0;
#endif
                }
#if BPFT_LOG_WARP
                log_seen = __shfl_sync(FULL_MASK, log_seen, 0);
                log_publish(1u, lane, log_head);
#endif
                end_batch(true);
                continue;
            }
        }
#endif
        // A relaxed load that saw the client's release store of seq, then a fence: every
        // load below is ordered after it (an acquire pattern). A whole-slot poll's job
        // (`lazy`, BPFT_LAZY_FENCE) fences later, and only when it reads memory outside its
        // slot.
        const u64 t_seen = globaltimer();
        BPFT_MARK(0);
        const bool lazy = BPFT_LAZY_FENCE && whole && !BPFT_POLL_ACQUIRE;
        // BPFT_EARLY_INDEX: a whole-slot poll's job has its descriptor now, so its program's
        // index word (GPU memory, an L2 round trip) is asked for before the slot check and
        // the RUNNING store, and used if the check passes.
        const bool early_index = BPFT_EARLY_INDEX && lazy;
        u32 early_word = 0;
        if (early_index && live && dj.prog_id < P.max_progs)
            early_word = ld_rlx_gpu32((const u32 *)P.prog_index + dj.prog_id);
        if (BPFT_POLL_ACQUIRE && whole) {
            // The seq words were acquire loads (lanes 0 and 16); the barrier orders every
            // lane's later loads after them.
            __syncwarp();
        } else if (!lazy) {
            asm volatile("fence.acq_rel.sys;" ::: "memory");
        }
        int retry = 0;
        // A whole-slot poll's check (whole_check); with BPFT_WHOLE_CHECK 0, each ready lane
        // computes it alone (to compare).
        int whole_ok = 0;
#if BPFT_TWO_PHASE == 2
        if (whole && BPFT_WHOLE_CHECK) {
            whole_ok = whole_check(wb0, wb1, chk, lane);
            BPFT_MARK(11);
        }
        if (whole) {
            // Read with the poll (above).
        } else if (k <= BPFT_COOP_MAX) {
            // A few slots: the warp reads them together. Instruction i reads slots 2i and
            // 2i+1 (lanes 0..15 the first, 16..31 the second, 16 bytes each, past seq and
            // check), so a slot is two 128-byte requests; all are in flight before any is
            // used, and each lane picks its own slot up from shared memory.
            const u32 half = lane >> 4, chunk = lane & 15;
            u64 body[(BPFT_COOP_MAX + 1) / 2][2];
#pragma unroll
            for (u32 i = 0; i < (BPFT_COOP_MAX + 1) / 2; i++) {
                const u32 j = 2 * i + half;
                if (chunk != 0 && j < k)
                    ld_slot_v2((const void *)(P.slots + ((my - lane + j) & P.queue_mask) * BPFT_SIZE_QueueSlot + 16 * chunk),
                               body[i][0], body[i][1]);
            }
            unstage(stage, body, k, lane, dw, iw);
        } else if (live) {
            read_slot(src, isrc, dw, iw);
        }
#else
        if (live) read_slot(src, isrc, dw, iw);
#endif
        if (live) {
            // Reads ordered after the fence cannot race the client: a mismatch means a
            // client that writes no (or a wrong) check word, or a plain load served from a
            // stale copy. Read again one strong word at a time, counted.
            retry = !(whole && BPFT_WHOLE_CHECK ? whole_ok : chk == bpft_slot_check(seq, dw, iw));
            if (retry) {
                if (lazy) asm volatile("fence.acq_rel.sys;" ::: "memory");
                reread_slot(src, isrc, dw, iw);
            }
        }
        count_torn(retry, S, C, lane);
        BPFT_MARK(1);
        u64 started = now_ns(P);
        const u32 hop_poll = (u32)(t_seen - t_poll), hop_fence = (u32)(started - P.time_offset - t_seen);
        if (live && dj.completion < P.completions_total)
            st_fld32(completion_ptr(P, dj.completion) + BPFT_OFF_Completion_state, CS_RUNNING);
        BPFT_MARK(12);
#if BPFT_PAD_ROUNDS
        {
            // BPFT_PAD_ROUNDS: eight independent xorshift-multiply chains, 24 instructions
            // a round, unrolled (BPFT_PAD_LOOP 0) or in a loop; kept by a sink that never fires.
            u32 a[8];
            const u32 c0 = (u32)clock64();
#pragma unroll
            for (int j = 0; j < 8; j++) a[j] = c0 + j;
#if BPFT_PAD_LOOP
#pragma unroll 1
#else
#pragma unroll
#endif
            for (int r = 0; r < BPFT_PAD_ROUNDS; r++) {
#pragma unroll
                for (int j = 0; j < 8; j++) a[j] = (a[j] ^ (a[j] >> 7)) * 0x9E3779B1u;
            }
            u32 x = 0;
#pragma unroll
            for (int j = 0; j < 8; j++) x ^= a[j];
            if (x == 0x9E3779B1u) atomicAdd(&S->torn, 0ull);
        }
#endif
        count_batch(S, C, head_word, D, lane, pos, nlive, taken, batches);
#if BPFT_HOP_SPLIT == 2 || BPFT_HOP_SPLIT == 3
        const u64 t_stored = now_ns(P);
#endif
        BPFT_MARK(2);
#if BPFT_HOP_SPLIT == 3
        u64 t_lookup = 0;
#endif
        // Classify and run, lane by lane in queue order for ring publication.
#if BPFT_DESC_SHARED && BPFT_ENTRY_CACHE
        // The entry, where lookup_prog leaves it: this lane's row of the entry cache.
        bpft_prog &p = *(bpft_prog *)entry_cache[lane];
#else
        bpft_prog p;
#endif
        u64 in_base = 0, out_base = 0, res_base = 0;
        bpft_tier_ref ti = {0, 0, 0}, to = {0, 0, 0};
        int kind = 0;  // 0 none, 1 short, 2 ring, 3 forward
        bool alone = false;  // self_contained
        if (live) {
            const bool found = lookup_prog(P, dj.prog_id, &p, entry_cache[lane], early_index && !retry, early_word);
#if BPFT_HOP_SPLIT == 3
            t_lookup = now_ns(P);
#endif
            BPFT_MARK(3);
            const bool valid = found && validate(P, dj, p, in_base, out_base, res_base);
            BPFT_MARK(13);
            if (valid) {
                alone = self_contained(dj, p);
                if (lazy && !retry && !alone) asm volatile("fence.acq_rel.sys;" ::: "memory");
                if (dj.flags & JF_INJECT_FAULT) asm volatile("trap;");
                if (dj.flags & BPFT_ANY_TIER) {
                    ti = job_tier(P, dj, false);
                    to = job_tier(P, dj, true);
                }
                const bool long_wait = ti.ps || to.tat || ti.ns > BPFT_SHORT_TIER_NS;
                kind = (dj.flags & JF_MAILBOX_PING) ? 4 : dj.n == 1 && !long_wait ? 1 : 2;
            } else {
                kind = 3;
            }
        }
#if BPFT_HOP_SPLIT == 2 || BPFT_HOP_SPLIT == 3
        const u64 t_looked = now_ns(P);
#endif
        BPFT_MARK(4);
        // BPFT_LOG_WARP: an item of the log ring for each short job (finish_job fills it
        // when it defers the job's log entry), reserved before the jobs run.
        bpft_log_item *defer = 0;
#if BPFT_LOG_WARP
        u32 shorts = __ballot_sync(FULL_MASK, kind == 1);
        if ((u32)__popc(shorts) < BPFT_LOG_WARP_MIN) shorts = 0;
        if (shorts) {
            if (lane == 0) log_room(__popc(shorts), log_head, log_seen);
            log_seen = __shfl_sync(FULL_MASK, log_seen, 0);
            defer = log_item(shorts, lane, log_head);
        }
#endif
        if (kind == 1) {
            const bool early = BPFT_DONE_EARLY && alone && !res_base;
            // Inline input: run it from this lane's staged slot or its device scratch line,
            // not over PCIe.
            const int m = bpft_inline_words(dw);
#if BPFT_TWO_PHASE == 2
            // The staged row holds this job's slot when the poll read it whole or the warp
            // read it together (unstage), and was not read again one word at a time.
            const bool staged = !retry && (whole || k <= BPFT_COOP_MAX);
            if (BPFT_SHARED_INPUT && m > 0 && staged && p.tier == BPFT_TIER_NATIVE) {
                in_base = (u64)&stage[lane][17];
            } else
#endif
            if (m > 0) {
                u64 *line = (u64 *)(P.scratch + 128 * (32 * d + lane));
#pragma unroll
                for (int i = 0; i < BPFT_INLINE_WORDS; i++)
                    if (i < m) line[i] = iw[i];
                in_base = (u64)line;
            }
            BPFT_MARK(14);
#if BPFT_HOP_SPLIT == 1
            run_short(P, dj, p, ti, to, in_base, out_base, res_base, started, (u32)(now_ns(P) - started), 0, early, defer);
#elif BPFT_HOP_SPLIT == 2
            run_short(P, dj, p, ti, to, in_base, out_base, res_base, started, (u32)(t_stored - started),
                      (u32)(t_looked - started), early, defer);
#elif BPFT_HOP_SPLIT == 3
            const u64 t_input = now_ns(P);
            const u64 f = hop_split_field(t_stored - started, 0) | hop_split_field(t_lookup - started, 1) |
                          hop_split_field(t_looked - started, 2) | hop_split_field(t_input - started, 3);
            run_short(P, dj, p, ti, to, in_base, out_base, res_base, started, (u32)f, (u32)(f >> 32), early, defer);
#else
            run_short(P, dj, p, ti, to, in_base, out_base, res_base, started, hop_poll, hop_fence, early, defer);
#endif
        }
        if (kind == 4) mailbox_ping(P, dj, p, started);
        for (u32 l = 0; l < k; l++) {
            if (lane == l) {
                if (kind == 2) publish(P, dj, p, in_base, out_base, res_base, started);
                else if (kind == 3) forward(P, dj);
            }
            __syncwarp();
        }
        // Free the slots for the producers one lap later (release_slot).
        if (live) {
            release_slot(defer, slot, my + cap, kind == 1 || kind == 4);
            BPFT_MARK(8);
#if BPFT_HOP_SPLIT >= 5
            bpft_cyc[lane][10] = 0;
#endif
        }
#if BPFT_LOG_WARP
        if (shorts) log_publish(shorts, lane, log_head);
#endif
        end_batch(nlive == 1 && __any_sync(FULL_MASK, kind == 1));
    }
    // Stop: say where this dispatcher stopped; dispatcher 0 waits for the others, then for
    // every published ring job to retire, then lets the workers go.
#if BPFT_LOG_WARP
    // The log warp first writes every entry handed to it and releases their slots.
    if (lane == 0) {
        while (ld_acq_cta32(&bpft_lr.tail) != log_head) __nanosleep(100);
        st_rel_cta32(&bpft_lr.stop, 1);
    }
    __syncwarp();
#endif
    if (lane == 0) {
        atomicAdd(&S->taken, taken);
        atomicAdd(&S->batches, batches);
        *(volatile u64 *)&S->dpos[d] = pos;
        __threadfence();
        atomicAdd(&S->stopped, 1u);
    }
    __syncwarp();
    if (d != 0) return;
    if (lane == 0) {
        while (*(volatile u32 *)&S->stopped < D) __nanosleep(100);
        __threadfence();
        S->stopped = 0;
        u64 pub = S->job_pub;
        if (pub > 0) {
            // Jobs retire in any order; wait for each still in the ring.
            u64 lo = pub > P.job_mask + 1 ? pub - (P.job_mask + 1) : 0;
            for (u64 q = lo; q < pub; q++) {
                bpft_djob *j = (bpft_djob *)P.jobs + (q & P.job_mask);
                while (ld_acq_gpu(&j->done_seq) != q + 1) __nanosleep(100);
            }
        }
        u64 head = S->dpos[0];
        for (u32 i = 1; i < D; i++) head = S->dpos[i] < head ? S->dpos[i] : head;
        S->resume = 1;
        S->ring_start = S->job_pub;
        __threadfence();
        atomicExch(&S->drain, 1u);
        __threadfence();
        st_rlx_sys(head_word, head);
        st_rlx_sys(&C->head, head);
        st_rlx_sys(&C->jobs_taken, S->taken);
        st_rlx_sys(&C->batches, S->batches);
        S->taken = 0;
        S->batches = 0;
        st_rlx_sys32(&C->running, 0);
    }
    __syncwarp();
}

// BPFT_PREFETCH: brings the input of records [from, to) toward L2 (the bytes wholly inside
// the buffer: no request past its end).
static __device__ __forceinline__ void prefetch_input(u64 in_base, u32 in_size, u64 from, u64 to,
                                               u32 lane) {
#if BPFT_PREFETCH == 1
    if (lane != 0 || from >= to) return;
    u64 a = (in_base + from * in_size + 15) & ~15ull, b = (in_base + to * in_size) & ~15ull;
    if (b > a)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"((u32)(b - a))
                     : "memory");
#elif BPFT_PREFETCH == 2
    if (from >= to) return;
    u64 a = (in_base + from * in_size + 127) & ~127ull, b = in_base + to * in_size;
    for (u64 p = a + lane * 128ull; p < b; p += 32 * 128ull)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)in_base, (void)in_size, (void)from, (void)to, (void)lane;
#endif
}

// A 16-byte store to global memory (its register `sg_g` is how runtime_ptx.rs tells the
// staging stores apart).
static __device__ __forceinline__ void st_global_v2(void *p, u64 a, u64 b) {
    asm volatile("{ .reg .u64 sg_g; cvta.to.global.u64 sg_g, %0; st.global.v2.u64 [sg_g], {%1, %2}; }" ::"l"(p),
                 "l"(a), "l"(b)
                 : "memory");
}

// BPFT_HOST_STAGE: copies records [base, end) of a job's input at `in_base` (`rec` bytes
// each; from a 16-byte aligned address, a multiple of 16 bytes and at most
// BPFT_STAGE_BYTES in all) into worker warp w's staging area, in rounds of 2 KB: the
// round's loads (four 16-byte loads a lane, the warp's 32 lanes on consecutive 16-byte
// words), then its stores. Returns the base address at which the chunk loop finds record i
// (base <= i < end) in the copy. Not inlined: inlined, its loads in flight raised the
// kernel's spill stores from 208 to 260 bytes (a call once a chunk costs nothing that shows).
static __device__ __noinline__ u64 stage_chunk(const bpft_params &P, u64 w, u64 in_base, u32 rec, u64 base,
                                                  u64 end, u32 lane) {
    const u64 src = in_base + base * rec, dst = P.stage + w * BPFT_STAGE_BYTES;
    const u32 n16 = (u32)((end - base) * rec / 16);
    for (u32 r = 0; r < n16; r += 128) {
        u64 a[4], b[4];
#pragma unroll
        for (u32 k = 0; k < 4; k++) {
            const u32 i = r + 32 * k + lane;
            if (i < n16) ld_cg_v2((const void *)(src + 16 * (u64)i), a[k], b[k]);
        }
#pragma unroll
        for (u32 k = 0; k < 4; k++) {
            const u32 i = r + 32 * k + lane;
            if (i < n16) st_global_v2((void *)(dst + 16 * (u64)i), a[k], b[k]);
        }
    }
    // The lanes read each other's stores (the barrier orders them, as for a CTA).
    __syncwarp();
    return dst - base * rec;
}

// Runs records base+lane, base+lane+32, ... < end of a native program (which cannot fail:
// the verifier proved it) through the JIT's chunk loop: one call per chunk, the body inline
// with the ctx in registers.
static __device__ __forceinline__ void native_chunk(u32 slot, u64 in_base, u32 in_size, u64 out_base,
                                             u32 out_size, u64 res_base, u64 n, const u64 *args,
                                             u64 base, u64 end, u32 lane, u64 *ok_idx,
                                             u64 *ok_r0) {
    u64 first = base + lane;
    if (first >= end) {
        *ok_idx = 0;
        *ok_r0 = 0;
        return;
    }
#if BPFT_PREFETCH
    u64 r0 = 0;
    prefetch_input(in_base, in_size, base, end, lane);
    for (u64 s = base; s < end; s += BPFT_SUB) {
        u64 e = s + BPFT_SUB < end ? s + BPFT_SUB : end;
        prefetch_input(in_base, in_size, e, e + BPFT_SUB < end ? e + BPFT_SUB : end, lane);
        if (s + lane < e)
            r0 = bpft_native_loop(slot, in_base, in_size, out_base, out_size, n, args[0], args[1],
                                  args[2], args[3], res_base, s + lane, e, 32);
    }
    *ok_r0 = r0;
#else
    *ok_r0 = bpft_native_loop(slot, in_base, in_size, out_base, out_size, n, args[0], args[1],
                              args[2], args[3], res_base, first, end, 32);
#endif
    *ok_idx = first + ((end - 1 - first) / 32) * 32 + 1;
}

// Raises {*idx, *idx+1 word} to {i, r0} if i is higher: the pair changes as one 16-byte
// word (sm_90 atom.cas.b128), so no lock and no torn pair.
static __device__ void best_update(u64 *pair, u64 i, u64 r0) {
    u64 cur_i = ld_rlx_gpu(pair), cur_r = ld_rlx_gpu(pair + 1);
    while (i > cur_i) {
        u64 got_i, got_r;
        asm volatile(
            "{\n\t.reg .b128 c, n, d;\n\t.reg .b64 g;\n\t"
            "mov.b128 c, {%2, %3};\n\tmov.b128 n, {%4, %5};\n\t"
            "cvta.to.global.u64 g, %6;\n\t"
            "atom.relaxed.gpu.global.cas.b128 d, [g], c, n;\n\t"
            "mov.b128 {%0, %1}, d;\n\t}"
            : "=l"(got_i), "=l"(got_r)
            : "l"(cur_i), "l"(cur_r), "l"(i), "l"(r0), "l"(pair)
            : "memory");
        if (got_i == cur_i && got_r == cur_r) return;
        cur_i = got_i;
        cur_r = got_r;
    }
}

// A worker warp: walks the ring from this generation's start. A job of n records is
// worked on by ceil(n / chunk) warps at most (chunk below), chosen by rotating over the workers, so
// a small job costs one warp and a large one uses the whole GPU.
// BPFT_LOG_WARP: warp 1 of a dispatcher's block. Takes the items its dispatcher published
// (up to 32 at a time, one a lane), writes the deferred ones' done-log entries with one
// system-scope fence for all, then releases their queue slots; returns once the dispatcher
// has stopped and the ring is empty.
static __device__ void log_warp(const bpft_params &P) {
#if BPFT_LOG_WARP
    bpft_state *S = (bpft_state *)P.state;
    const u32 lane = threadIdx.x & 31;
    u32 t = 0;
    for (;;) {
        const u32 h = ld_acq_cta32(&bpft_lr.head);
        if (h == t) {
            if (ld_acq_cta32(&bpft_lr.stop) && ld_acq_cta32(&bpft_lr.head) == t) return;
            __nanosleep(64);
            continue;
        }
        const u32 n = h - t < 32 ? h - t : 32;
        const bpft_log_item *it = &bpft_lr.items[(t + lane) % BPFT_LOG_RING];
        const bool mine = lane < n && it->deferred;
        const u32 m = __ballot_sync(FULL_MASK, mine);
        if (m) {
            u64 base = 0;
            if (lane == 0) base = atomicAdd(&S->done_pos, (u64)__popc(m));
            const u64 pos = __shfl_sync(FULL_MASK, base, 0) + __popc(m & ((1u << lane) - 1));
            bpft_done *slot = mine ? log_words(P, pos, it->e) : 0;
            // One fence for every entry: the dispatcher's writes for these jobs (acquired
            // through `head`) and the entries before their seqs and slots.
            asm volatile(BPFT_COMPLETION_FENCE ::: "memory");
            if (mine) {
                st_rlx_sys(&slot->seq, pos + 1);
                if (it->slot) st_rlx_sys((void *)it->slot, it->val);
            }
        }
        __syncwarp();
        t += n;
        if (lane == 0) st_rel_cta32(&bpft_lr.tail, t);
    }
#else
    (void)P;
#endif
}

#ifndef BPFT_WORKER_RELAXED
#define BPFT_WORKER_RELAXED 1
#endif
// How long an idle worker warp sleeps between looks at the job ring, once it has looked
// 4096 times in a row (ns; a diagnostic knob).
#ifndef BPFT_WORKER_NAP
#define BPFT_WORKER_NAP 2000
#endif
static __device__ void worker(const bpft_params &P, const u32 D) {
    bpft_state *S = (bpft_state *)P.state;
    const u32 lane = threadIdx.x & 31;
    // Workers are numbered 0 .. nworkers-1 past the dispatchers (warp 0 of blocks below D)
    // and their log warps (warp 1, BPFT_LOG_WARP).
    const u64 W = blockDim.x >> 5, warp = threadIdx.x >> 5, H = BPFT_LOG_WARP ? 2 : 1;
    const u64 nworkers = (u64)gridDim.x * W - D * H;
    const u64 b = role_block();
    const u64 w = b < D ? b * (W - H) + warp - H : b * W + warp - D * H;
    u64 jp = S->ring_start;
    u32 spin = 0;
    for (;;) {
        bpft_djob *j = (bpft_djob *)P.jobs + (jp & P.job_mask);
        // BPFT_WORKER_RELAXED: an idle look is a relaxed load, and the acquire fence comes
        // once it finds the job (an acquire load invalidates the SM's L1 every time, under
        // the dispatcher that shares it).
        u64 seq = BPFT_WORKER_RELAXED ? ld_rlx_gpu(&j->seq) : ld_acq_gpu(&j->seq);
        if (BPFT_WORKER_RELAXED && seq == jp + 1) asm volatile("fence.acq_rel.gpu;" ::: "memory");
        if (seq != jp + 1) {
            if (seq > jp + 1 || ld_rlx_gpu(&j->done_seq) >= jp + 1) {
                jp++;  // retired (and perhaps reused) while this warp was busy elsewhere
                continue;
            }
            if (ld_rlx_gpu32(&S->drain) && ld_rlx_gpu(&S->job_pub) <= jp) return;
            if (++spin > 64) __nanosleep(spin > 4096 ? BPFT_WORKER_NAP : 64);
            continue;
        }
        spin = 0;
        // One copy of the job for the whole walk: the loop below calls out of this
        // function, so fields read through `j` would be reloaded for every record.
        const bpft_job_desc jd = j->d;
        const bpft_prog jprog = j->p;
        const u64 in_base = j->in_base, out_base = j->out_base, res_base = j->res_base;
        const u64 n = jd.n;
        // An input buffer in a tier: each record waits for its fetch, one at a time; an
        // output buffer in one: for its bytes to leave through the link.
        const bpft_tier_ref tier = job_tier(P, jd, false), otier = job_tier(P, jd, true);
        // About BPFT_WARP_CHUNKS chunks per warp (at least BPFT_CHUNK records): a claim is an atomic on
        // one word that every warp shares, so a big job must not need many of them.
        // Input in pinned host memory (zero-copy over PCIe) is cut much finer (a big job
        // into chunks of BPFT_HOST_CHUNK records): the warps then read neighbouring
        // stretches at once, which PCIe serves at ~81% of the copy engine's rate against
        // ~77% for two long stretches a warp (H200, row d); in device memory that many
        // claims of one counter would cost more than they give (row c: half).
        const bool host_in = !(jd.flags & JF_DEVICE_INPUT);
        const u64 per = host_in ? BPFT_HOST_WARP_CHUNKS : BPFT_WARP_CHUNKS;
        const u64 least = host_in ? BPFT_HOST_CHUNK : BPFT_CHUNK;
        u64 chunk = (n + per * nworkers - 1) / (per * nworkers);
        chunk = chunk < least ? least : (chunk + 31) & ~31ull;
        // BPFT_HOST_STAGE: fixed-size records in pinned host memory from a 16-byte aligned
        // base, a chunk of them fitting the warp's staging area, outside any tier. A chunk
        // that does not start and end at multiples of 16 bytes (a job's last, say: chunks
        // are multiples of 32 records) is read where it is.
        const bool stage = BPFT_HOST_STAGE && host_in && jprog.tier == BPFT_TIER_NATIVE && P.stage != 0 &&
                           w < P.stage_warps && !(jd.flags & JF_VARLEN) && jd.in_rec_size != 0 &&
                           in_base % 16 == 0 && chunk * jd.in_rec_size <= BPFT_STAGE_BYTES && !tier.ns &&
                           !tier.ps && !tier.tat;
        u64 needed = (n + chunk - 1) / chunk;
        if (needed > nworkers) needed = nworkers;
        if ((w + jp) % nworkers >= needed) {
            jp++;
            continue;
        }
        int in = 1;
        if (lane == 0) {
            atomicAdd(&j->active, 1u);
            __threadfence();
            in = ld_acq_gpu(&j->seq) == jp + 1;
            if (!in) atomicSub(&j->active, 1u);
        }
        if (!__shfl_sync(FULL_MASK, in, 0)) {
            jp++;
            continue;
        }
        // Chunks are claimed one ahead (the claim's atomic travels while the warp works on
        // the chunk before), and what the warp did is reduced and published once, when the
        // job has no chunk left for it: a claim costs no round trip, fence or reduction, so
        // chunks can be small, and the warps sweep through the input together (a warp alone
        // on a long stretch of pinned host memory reads it at ~30 of ~50 GB/s).
        u64 ok_idx = 0, ok_r0 = 0, nfail = 0, first_fail = ~0ull, count = 0;
        u32 fpc = 0, fcode = 0;
        u64 base = 0;
        if (lane == 0) base = atomicAdd(&j->next, chunk);
        base = __shfl_sync(FULL_MASK, base, 0);
        while (base < n) {
            u64 next = 0;
            if (lane == 0) next = atomicAdd(&j->next, chunk);
            u64 end = base + chunk < n ? base + chunk : n;
            if ((tier.tat || otier.tat) && jprog.tier == BPFT_TIER_NATIVE) {
                for (u64 i = base + lane; i < end; i += 32) {
                    tier_fetch(tier, jd.in_rec_size);
                    ok_r0 = bpft_native_loop(jprog.native_slot, in_base, jd.in_rec_size, out_base,
                                             jd.out_rec_size, n, jd.args[0], jd.args[1], jd.args[2],
                                             jd.args[3], res_base, i, i + 1, 32);
                    tier_fetch(otier, jd.out_rec_size);
                    ok_idx = i + 1;
                }
            } else if (jprog.tier == BPFT_TIER_NATIVE) {
                u64 ci = 0, cr = 0;
                const u64 ib = stage && (base * jd.in_rec_size | (end - base) * jd.in_rec_size) % 16 == 0
                                   ? stage_chunk(P, w, in_base, jd.in_rec_size, base, end, lane)
                                   : in_base;
                native_chunk(jprog.native_slot, ib, jd.in_rec_size, out_base, jd.out_rec_size,
                             res_base, n, jd.args, base, end, lane, &ci, &cr);
                if (ci) {
                    ok_idx = ci;
                    ok_r0 = cr;
                }
            } else for (u64 i = base + lane; i < end; i += 32) {
                u64 r0 = 0;
                u32 pc = 0;
                tier_fetch(tier, jd.in_rec_size);
                int e = run_record(P, jprog, jd, in_base, out_base, i, &r0, &pc);
                tier_fetch(otier, jd.out_rec_size);
                if (res_base) ((u64 *)res_base)[i] = e ? ~0ull : r0;
                if (e) {
                    nfail++;
                    if (i < first_fail) {
                        first_fail = i;
                        fpc = pc;
                        fcode = (u32)e;
                    }
                } else {
                    ok_idx = i + 1;
                    ok_r0 = r0;
                }
            }
            count += end - base;
            base = __shfl_sync(FULL_MASK, next, 0);
        }
        if (count) {
            // Warp-reduce: highest successful record (and its r0), failures, lowest failure.
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                u64 oi = __shfl_down_sync(FULL_MASK, ok_idx, o);
                u64 orr = __shfl_down_sync(FULL_MASK, ok_r0, o);
                u64 of = __shfl_down_sync(FULL_MASK, nfail, o);
                u64 ff = __shfl_down_sync(FULL_MASK, first_fail, o);
                u32 fp = __shfl_down_sync(FULL_MASK, fpc, o);
                u32 fc = __shfl_down_sync(FULL_MASK, fcode, o);
                if (oi > ok_idx) {
                    ok_idx = oi;
                    ok_r0 = orr;
                }
                nfail += of;
                if (ff < first_fail) {
                    first_fail = ff;
                    fpc = fp;
                    fcode = fc;
                }
            }
            if (lane == 0) {
                if (ok_idx) best_update(&j->best_idx, ok_idx, ok_r0);
                if (nfail) {
                    atomicAdd(&j->failed, nfail);
                    u64 prev = atomicMin(&j->first_err, first_fail);
                    if (first_fail < prev) {
                        // Racy pair, but only the lowest failure's writer wins in the end
                        // in the common single-failure case; documented as best effort.
                        j->err_pc = fpc;
                        j->err_code = fcode;
                    }
                }
                // Make this warp's outputs visible before counting them finished: to the
                // host when they live in shared memory, else within the GPU.
                if (res_base || (out_base && !(jd.flags & JF_DEVICE_OUTPUT)))
                    __threadfence_system();
                else
                    __threadfence();
                u64 before = atomicAdd(&j->finished, count);
                if (before + count == n) {
                    __threadfence();
                    u64 failed = ld_rlx_gpu(&j->failed);
                    u64 fe = ld_rlx_gpu(&j->first_err);
                    finish_job(P, j->d, j->p, failed ? ST_RUNTIME_ERROR : ST_OK, n - failed, failed,
                               j->best_r0, failed ? j->err_pc : 0, failed ? fe : 0,
                               failed ? j->err_code : 0, j->started_ns);
                    st_rel_gpu(&j->done_seq, jp + 1);
                }
            }
            __syncwarp();
        }
        if (lane == 0) {
            __threadfence();
            atomicSub(&j->active, 1u);
        }
        __syncwarp();
        jp++;
    }
}

// Two blocks per SM (at most 128 registers a thread): twice the warps in flight for
// memory-bound jobs; the interpreter, a separate function, spills instead.
// Blocks an SM must hold (`__launch_bounds__`): 2 caps registers at 128 a thread; 1 lets
// the dispatcher keep its state in registers (the host links with BPFTIME_GPU_MAX_REGS to
// match). A tuning knob.
#ifndef BPFT_MIN_BLOCKS
#define BPFT_MIN_BLOCKS 2
#endif
extern "C" __global__ void __launch_bounds__(256, BPFT_MIN_BLOCKS) bpft_persistent(bpft_params P) {
    const u32 warp = threadIdx.x >> 5;
    const u32 D = dispatcher_count(P);
#if BPFT_LOG_WARP
    if (threadIdx.x == 0) {
        bpft_lr.head = bpft_lr.tail = bpft_lr.stop = 0;
    }
    __syncthreads();
#endif
    if (role_block() < D && warp == 0) {
        dispatcher(P, role_block(), D);
    } else if (BPFT_LOG_WARP && role_block() < D && warp == 1) {
        log_warp(P);
    } else {
        worker(P, D);
    }
}

// Writes %globaltimer: the host calibrates completion times against its own clock.
extern "C" __global__ void bpft_clock(u64 *out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) *out = globaltimer();
}

// A tiny kernel to time launch + synchronize against (benchmark baseline).
extern "C" __global__ void bpft_empty(u64 *out, u64 v) {
    if (out && threadIdx.x == 0 && blockIdx.x == 0) *out = v;
}
