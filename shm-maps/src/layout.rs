//! The shared-memory layout: one definition of every structure that lives in the region.
//!
//! All structures are `#[repr(C)]`, hold offsets from the region base instead of pointers,
//! and have compile-time size and offset asserts. The GPU side reads the same layout; its
//! view is generated from [`FIELDS`] so both sides come from this file.
//!
//! ```text
//! offset 0          RegionHeader (4 KiB): magic, version, sizes, offsets of every part
//! queue_off         QueueHeader (head and tail on their own 128-byte lines)
//!                   QueueSlot[queue_capacity]            256 bytes each
//! clients_off       ClientSlot[max_clients]               256 bytes each
//! completions_off   Completion[max_clients * per_client]  128 bytes each
//! messages_off      Message[message_slots]                256 bytes each (error texts)
//! maps_off          MapEntry[max_maps]                    128 bytes each (directory)
//! checkpoint_off    2 x checkpoint_size: the service's control-plane checkpoint, double
//!                   buffered (CheckpointHeader + bytes), read back by `run --recover`
//! arena_off         data arena: job buffers and map storage, 4 KiB aligned
//! ```

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// `"BPFTSHM\x01"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"BPFTSHM\x01");
/// Bumped on every incompatible layout change (2: the checkpoint area; 3: 256-byte queue
/// slots with a descriptor check word; 5: a completion check word; 6: a client's jobs in
/// flight as two single-writer counters).
pub const LAYOUT_VERSION: u32 = 6;
/// `"BPFTCKP\x01"`: the magic of a written [`CheckpointHeader`].
pub const CHECKPOINT_MAGIC: u64 = u64::from_le_bytes(*b"BPFTCKP\x01");
/// Size of the header page.
pub const HEADER_SIZE: usize = 4096;
/// Arena allocations and map storage are aligned to this.
pub const ARENA_ALIGN: u64 = 64;

/// Service states in [`RegionHeader::state`].
pub mod state {
    /// Being laid out; clients must not attach.
    pub const INITIALIZING: u32 = 0;
    /// Serving.
    pub const READY: u32 = 1;
    /// Draining: no new jobs are accepted.
    pub const STOPPING: u32 = 2;
    /// Stopped cleanly; the region may be removed.
    pub const STOPPED: u32 = 3;
}

/// The region header, at offset 0.
#[repr(C)]
pub struct RegionHeader {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`LAYOUT_VERSION`].
    pub version: u32,
    /// `size_of::<RegionHeader>()` of the writer.
    pub header_size: u32,
    /// Total mapped size in bytes.
    pub total_size: u64,
    /// One of [`state`].
    pub state: AtomicU32,
    /// Process id of the service.
    pub service_pid: AtomicU32,
    /// Start time of the service process (clock ticks since boot), to tell pid reuse apart.
    pub service_start: AtomicU64,
    /// Monotonic ns of the service's last heartbeat (a crashed service stops updating it).
    pub heartbeat_ns: AtomicU64,
    /// Number of queue slots (a power of two).
    pub queue_capacity: u32,
    /// Number of client slots.
    pub max_clients: u32,
    /// Completion slots per client.
    pub completions_per_client: u32,
    /// Number of error-message slots.
    pub message_slots: u32,
    /// Number of map directory entries.
    pub max_maps: u32,
    /// Largest record count a job may have.
    pub max_records: u32,
    /// Offset of the [`QueueHeader`].
    pub queue_off: u64,
    /// Offset of the client table.
    pub clients_off: u64,
    /// Offset of the completion table.
    pub completions_off: u64,
    /// Offset of the message table.
    pub messages_off: u64,
    /// Offset of the map directory.
    pub maps_off: u64,
    /// Offset of the data arena.
    pub arena_off: u64,
    /// Size of the data arena.
    pub arena_size: u64,
    /// Workers currently parked on [`RegionHeader::wake`]; producers wake them when nonzero.
    pub sleepers: AtomicU32,
    /// Futex word the workers park on; producers bump it before waking.
    pub wake: AtomicU32,
    /// Jobs completed since start.
    pub jobs_done: AtomicU64,
    /// Jobs completed with an error status.
    pub jobs_failed: AtomicU64,
    /// Next message slot to write (modulo `message_slots`).
    pub next_message: AtomicU64,
    /// Offset of the checkpoint area: two halves of `checkpoint_size` bytes each.
    pub checkpoint_off: u64,
    /// Bytes per checkpoint half, its [`CheckpointHeader`] included.
    pub checkpoint_size: u64,
    /// Sequence number of the last complete checkpoint; it lives in half `seq % 2`
    /// (0: none written yet).
    pub checkpoint_seq: AtomicU64,
    /// Times a service adopted this region with `--recover`.
    pub recoveries: AtomicU32,
    /// Process id of the service's helper (the GPU worker process), 0 if none: a service
    /// that adopts the region waits for a dead service's helper to exit first.
    pub helper_pid: AtomicU32,
    /// Start time of the helper process (clock ticks since boot).
    pub helper_start: AtomicU64,
    /// Number of job queues, one per GPU of a multi-GPU service (1 otherwise). Queue `i`
    /// starts at `queue_off + i * queue_stride()`.
    pub queue_count: u32,
}

/// Most job queues a region may have (GPUs of one service).
pub const MAX_QUEUES: u32 = 16;

impl RegionHeader {
    /// Bytes from one queue's header to the next: the header and its slots.
    pub fn queue_stride(&self) -> u64 {
        core::mem::size_of::<QueueHeader>() as u64
            + self.queue_capacity as u64 * core::mem::size_of::<QueueSlot>() as u64
    }
}

/// The head of one checkpoint half. The service writes the inactive half, then publishes
/// it by storing its `seq` in [`RegionHeader::checkpoint_seq`], so a crash in the middle of
/// a write leaves the previous checkpoint intact.
#[repr(C)]
pub struct CheckpointHeader {
    /// [`CHECKPOINT_MAGIC`].
    pub magic: u64,
    /// Sequence number of this checkpoint.
    pub seq: u64,
    /// Payload bytes after the header.
    pub len: u64,
    /// FNV-1a 64 of the payload.
    pub hash: u64,
}

/// The queue's control block. Head, tail and the finished count sit on their own
/// 128-byte lines.
#[repr(C, align(128))]
pub struct QueueHeader {
    /// Next position a consumer takes. Written by consumers (CAS).
    pub head: AtomicU64,
    _pad0: [u8; 120],
    /// Next position a producer fills. Written by producers (CAS).
    pub tail: AtomicU64,
    _pad1: [u8; 120],
    /// Jobs of this queue that finished (any status), counted by the service where it
    /// accounts for them. `tail - done` is the queue's load: jobs queued or running, which
    /// a client routes by on a multi-GPU service.
    pub done: AtomicU64,
    _pad2: [u8; 120],
}

impl QueueHeader {
    /// A header with head and tail at 0 (for queues outside a region: tests, loom).
    pub fn new() -> Self {
        QueueHeader {
            head: AtomicU64::new(0),
            _pad0: [0; 120],
            tail: AtomicU64::new(0),
            _pad1: [0; 120],
            done: AtomicU64::new(0),
            _pad2: [0; 120],
        }
    }
}

impl Default for QueueHeader {
    fn default() -> Self {
        Self::new()
    }
}

/// One slot of the bounded MPMC job queue (Vyukov's sequence protocol).
///
/// For a slot at index `i = pos & mask`: `seq == pos` means free for the producer of `pos`;
/// `seq == pos + 1` means it holds the job of `pos`, ready for a consumer; after consuming,
/// the consumer sets `seq = pos + capacity`, freeing it for the producer one lap later.
///
/// `check` is [`slot_check`] of the sequence word and the descriptor, written by the
/// producer before `seq`. A consumer on the far side of PCIe (the GPU dispatcher) reads
/// `seq`, `check` and the descriptor with one burst of loads that are not ordered among
/// themselves; the check tells it whether the descriptor words it got belong to the `seq`
/// it got. CPU consumers, whose acquire load of `seq` orders the rest, ignore it.
#[repr(C, align(128))]
pub struct QueueSlot {
    /// The sequence word described above.
    pub seq: AtomicU64,
    /// [`slot_check`]`(pos + 1, &desc, &inline)` of the job this slot holds.
    pub check: AtomicU64,
    /// The job.
    pub desc: JobDesc,
    /// With [`job_flags::INLINE`]: a copy of the job's input bytes (see [`inline_words`]).
    pub inline: [u64; INLINE_WORDS],
}

/// Input bytes a job may carry in its queue slot ([`job_flags::INLINE`]).
pub const INLINE_MAX: usize = 8 * INLINE_WORDS;
/// The inline area of a queue slot in u64 words.
pub const INLINE_WORDS: usize = 15;

/// How many words of the slot's inline area belong to `desc` (and to its check word):
/// `ceil(n * in_rec_size / 8)` with [`job_flags::INLINE`] and at most [`INLINE_MAX`] bytes,
/// else 0 (an over-long inline job simply reads the arena).
pub fn inline_words(d: &JobDesc) -> usize {
    if d.flags & job_flags::INLINE == 0 {
        return 0;
    }
    match d.n.checked_mul(d.in_rec_size as u64) {
        Some(b) if b <= INLINE_MAX as u64 => (b as usize).div_ceil(8),
        _ => 0,
    }
}

impl QueueSlot {
    /// A slot with sequence `seq` and an empty descriptor.
    pub fn new(seq: u64) -> Self {
        QueueSlot {
            seq: AtomicU64::new(seq),
            check: AtomicU64::new(0),
            desc: JobDesc::default(),
            inline: [0; INLINE_WORDS],
        }
    }
}

/// Constants of [`slot_check`]; the GPU side is generated from them
/// (`device::cuda::source::layout_header`).
pub const CHECK_SEQ_MUL: u64 = 0x9e37_79b9_7f4a_7c15;
/// Added once per descriptor word index (word `i` gets `(i + 1) * CHECK_WORD_MUL`).
pub const CHECK_WORD_MUL: u64 = 0xd6e8_feb8_6659_fd93;

/// The multipliers of [`check_mix`].
pub const CHECK_MIX_MUL: [u64; 2] = [0xbf58_476d_1ce4_e5b9, 0x94d0_49bb_1331_11eb];

/// The splitmix64 finalizer: a bijection of u64 whose output bits each depend on every
/// input bit.
pub const fn check_mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(CHECK_MIX_MUL[0]);
    z = (z ^ (z >> 27)).wrapping_mul(CHECK_MIX_MUL[1]);
    z ^ (z >> 31)
}

/// The check word of a queue slot holding `desc` (and `inline`) under sequence `seq`: the
/// XOR over the descriptor's 15 words, then the [`inline_words`] inline words, `w[i]`, of
/// `check_mix(w[i] + seq * CHECK_SEQ_MUL + (i + 1) * CHECK_WORD_MUL)`. A read that mixes
/// words of two jobs, or a check word left from the slot's previous lap, matches only by
/// a 64-bit coincidence.
pub fn slot_check(seq: u64, desc: &JobDesc, inline: &[u64; INLINE_WORDS]) -> u64 {
    let words = desc_words(desc);
    let s = seq.wrapping_mul(CHECK_SEQ_MUL);
    let mut h = 0;
    let n = inline_words(desc);
    for (i, w) in words.iter().chain(&inline[..n]).enumerate() {
        h ^= check_mix(
            w.wrapping_add(s)
                .wrapping_add((i as u64 + 1).wrapping_mul(CHECK_WORD_MUL)),
        );
    }
    h
}

/// The descriptor as the 15 little-endian u64 words it occupies in memory.
pub fn desc_words(d: &JobDesc) -> [u64; 15] {
    let pair = |lo: u32, hi: u32| lo as u64 | (hi as u64) << 32;
    [
        pair(d.prog_id, d.flags),
        d.n,
        d.input_off,
        d.input_len,
        d.output_off,
        d.output_len,
        pair(d.in_rec_size, d.out_rec_size),
        d.offsets_off,
        d.results_off,
        d.args[0],
        d.args[1],
        d.args[2],
        d.args[3],
        pair(d.client, d.completion),
        d.tag,
    ]
}

/// Flags of [`JobDesc::flags`].
pub mod job_flags {
    /// Write each record's r0 as a u64 to `results_off + 8 * i`.
    pub const RESULTS: u32 = 1 << 0;
    /// Records have variable length: `offsets_off` holds `n + 1` u64 offsets into the input.
    pub const VARLEN: u32 = 1 << 1;
    /// Stop at the first record whose program fails (default: record the error, go on).
    pub const STOP_ON_ERROR: u32 = 1 << 2;
    /// `input_off` is an offset into the CUDA backend's device-resident buffer arena, not
    /// the shared-memory arena (buffers made with `Client::device_alloc`).
    pub const DEVICE_INPUT: u32 = 1 << 3;
    /// `output_off` is an offset into the device-resident buffer arena.
    pub const DEVICE_OUTPUT: u32 = 1 << 4;
    /// The job's input (`n * in_rec_size` bytes, at most [`super::INLINE_MAX`]) is copied
    /// into its queue slot too, so the GPU reads it with the descriptor instead of making
    /// another PCIe round trip to the arena. The arena copy stays the input of record
    /// (programs cannot write their input); CPU consumers read that. Set by the client
    /// library.
    pub const INLINE: u32 = 1 << 5;
    /// Benchmark: the GPU runtime writes `n` records into its host mailbox and waits for
    /// the host's answer to each; r0 = the total round-trip ns (CUDA backend only).
    pub const MAILBOX_PING: u32 = 1 << 14;
    /// Testing only: the GPU runtime executes `trap` on this job, which kills the CUDA
    /// context. Honoured only by a service started with `--allow-fault-injection`; refused
    /// (`BAD_DESCRIPTOR`) otherwise.
    pub const INJECT_FAULT: u32 = 1 << 15;
    /// Bits 16..24: the GPU the job must run on, plus one (0: any; the client routes it
    /// by load). See [`on_device`] and [`device_of`].
    pub const DEVICE_MASK: u32 = 0xff << 16;

    /// `flags` asking for GPU `device` (an index into the service's devices). Indices
    /// past 254 all become 254, which no service has (at most `MAX_QUEUES`), so they are
    /// refused at submit rather than wrapping to another GPU or to "any".
    pub const fn on_device(flags: u32, device: u32) -> u32 {
        let d = if device > 254 { 254 } else { device };
        (flags & !DEVICE_MASK) | (d + 1) << 16
    }

    /// The GPU `flags` ask for, if any.
    pub const fn device_of(flags: u32) -> Option<u32> {
        match (flags & DEVICE_MASK) >> 16 {
            0 => None,
            d => Some(d - 1),
        }
    }

    /// Bits 24..32: the emulated-tier slot of the job's input buffer (0: none), as the
    /// service's answer to a placed `alloc` named it; the client library sets it. The CUDA
    /// backend reads only that slot of its tier table (and checks that it holds this
    /// client's buffer around the input) instead of searching every placed buffer for each
    /// job; the CPU backend finds the buffer itself and ignores the bits.
    pub const TIER_MASK: u32 = 0xff << TIER_SHIFT;
    /// Where [`TIER_MASK`] starts.
    pub const TIER_SHIFT: u32 = 24;
    /// Tier slots: 1 ..= `TIER_SLOTS - 1` name a buffer.
    pub const TIER_SLOTS: u32 = 256;

    /// `flags` naming tier slot `slot` (0: none).
    pub const fn with_tier(flags: u32, slot: u8) -> u32 {
        (flags & !TIER_MASK) | (slot as u32) << TIER_SHIFT
    }

    /// The tier slot `flags` name (0: none).
    pub const fn tier_of(flags: u32) -> u8 {
        ((flags & TIER_MASK) >> TIER_SHIFT) as u8
    }

    /// Bits 6..14: the emulated-tier slot of the job's output buffer (0: none), as
    /// [`TIER_MASK`] for the input: each record's output bytes go through the buffer's link
    /// (posted writes: its cap, not its latency).
    pub const OUT_TIER_MASK: u32 = 0xff << OUT_TIER_SHIFT;
    /// Where [`OUT_TIER_MASK`] starts.
    pub const OUT_TIER_SHIFT: u32 = 6;

    /// `flags` naming tier slot `slot` for the output buffer (0: none).
    pub const fn with_out_tier(flags: u32, slot: u8) -> u32 {
        (flags & !OUT_TIER_MASK) | (slot as u32) << OUT_TIER_SHIFT
    }

    /// The output buffer's tier slot `flags` name (0: none).
    pub const fn out_tier_of(flags: u32) -> u8 {
        ((flags & OUT_TIER_MASK) >> OUT_TIER_SHIFT) as u8
    }
}

/// A job descriptor: what a client puts in the queue.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobDesc {
    /// Program id from `load`.
    pub prog_id: u32,
    /// [`job_flags`].
    pub flags: u32,
    /// Record count.
    pub n: u64,
    /// Input buffer: arena offset.
    pub input_off: u64,
    /// Input buffer length in bytes.
    pub input_len: u64,
    /// Output buffer: arena offset.
    pub output_off: u64,
    /// Output buffer length in bytes.
    pub output_len: u64,
    /// Fixed input record size (ignored with `VARLEN`).
    pub in_rec_size: u32,
    /// Output record size (0: no output).
    pub out_rec_size: u32,
    /// `VARLEN`: arena offset of `n + 1` u64 record offsets, relative to the input buffer.
    pub offsets_off: u64,
    /// `RESULTS`: arena offset of `n` u64 results.
    pub results_off: u64,
    /// Job arguments, `ctx->args`.
    pub args: [u64; 4],
    /// Submitting client's slot.
    pub client: u32,
    /// Completion slot the service writes.
    pub completion: u32,
    /// Client's tag for the job, echoed in the completion.
    pub tag: u64,
}

/// Completion states in [`Completion::state`].
pub mod completion_state {
    /// Not in use.
    pub const FREE: u32 = 0;
    /// Submitted, waiting in the queue.
    pub const SUBMITTED: u32 = 1;
    /// A worker has started it.
    pub const RUNNING: u32 = 2;
    /// Finished, published with release ordering: the other fields are valid.
    pub const DONE: u32 = 3;
    /// Finished, published together with the other fields, unordered (the GPU's
    /// one-record jobs): they are valid once [`super::Completion::check`] matches them.
    pub const DONE_CHECKED: u32 = 4;
}

/// Job status codes in [`Completion::status`].
pub mod status {
    /// Every record ran.
    pub const OK: i32 = 0;
    /// A buffer lies outside the arena, or lengths disagree with `n` and the record sizes.
    pub const BAD_DESCRIPTOR: i32 = -1;
    /// No program with that id.
    pub const UNKNOWN_PROGRAM: i32 = -2;
    /// A record size of zero.
    pub const ZERO_RECORD_SIZE: i32 = -3;
    /// `n` above the region's `max_records`.
    pub const TOO_MANY_RECORDS: i32 = -4;
    /// The program failed at run time on some record.
    pub const RUNTIME_ERROR: i32 = -5;
    /// Cancelled by `stop --now`.
    pub const CANCELLED: i32 = -6;
    /// The submitting client died: the job was dropped from the queue, or stopped at the
    /// record boundary after its death was noticed (CPU backend).
    pub const CLIENT_GONE: i32 = -7;
    /// The completion slot named by the descriptor does not belong to the client.
    pub const BAD_COMPLETION: i32 = -8;
    /// The GPU faulted (or lost its context) while the job was running; the service
    /// recreated the context and carried on with the queue.
    pub const DEVICE_FAULT: i32 = -9;
    /// The service died while the job ran, or after a worker had taken it from the queue;
    /// the service that adopted the region (`run --recover`) ended it with this status.
    /// Records of a job that was running may have run (and changed maps) before the crash.
    pub const SERVICE_RESTARTED: i32 = -10;
}

/// Where the result of one job goes. Written by the client at submit (state, tag,
/// submitted time) and by the service afterwards.
#[repr(C, align(128))]
pub struct Completion {
    /// One of [`completion_state`]; the service publishes `DONE` with release ordering, and
    /// the GPU's one-record jobs `DONE_CHECKED`, whose fields the check word vouches for.
    pub state: AtomicU32,
    /// One of [`status`].
    pub status: i32,
    /// Message slot with the error text (valid when `status != OK`), see [`Message`].
    pub message: u32,
    /// Version of the program the job ran on.
    pub prog_version: u32,
    /// Program id the job ran on.
    pub prog_id: u32,
    /// Pc of the failing instruction for `RUNTIME_ERROR`.
    pub err_pc: u32,
    /// Records that ran successfully.
    pub records_done: u64,
    /// Records that failed.
    pub records_failed: u64,
    /// r0 of the last record.
    pub r0: u64,
    /// Client's tag for the job, echoed back.
    pub tag: u64,
    /// Monotonic ns when submitted (client clock).
    pub submitted_ns: u64,
    /// Monotonic ns when a worker started it.
    pub started_ns: u64,
    /// Monotonic ns when it finished.
    pub finished_ns: u64,
    /// CUDA backend, one-record jobs: ns of the dispatcher's poll round trip that found the
    /// job, and from its loads' return to `started_ns` (the slot check, and the acquire fence
    /// when the job reads memory outside its slot). 0 elsewhere.
    pub gpu_hops: [u32; 2],
    /// The queue the job was submitted to (the GPU of a multi-GPU service), written by the
    /// client at submit: a fault on one GPU ends only that GPU's jobs.
    pub queue: u32,
    /// With `DONE_CHECKED`: [`completion_check`] of the fields the GPU wrote, published with
    /// them and no fence in between, so a client takes the fields only when this word
    /// matches them. The client clears it at submit.
    pub check: u64,
}

/// How many words [`completion_check`] covers.
pub const COMPLETION_CHECK_WORDS: usize = 9;

/// The check word of a completion whose service-written fields are `w`: `status` as a u32,
/// then the little-endian u64 words at offsets 8, 16, 24, 32, 40, 64, 72 and 80 (message and
/// version, id and pc, records done and failed, r0, start, finish, hops). It is the XOR of
/// `check_mix(w[i] + (i + 1) * CHECK_WORD_MUL)`, never 0. A read that mixes fields of two
/// jobs, or fields not yet arrived, matches only by a 64-bit coincidence; the client
/// clears the word at submit, so the previous job's check cannot vouch for anything.
pub fn completion_check(w: &[u64; COMPLETION_CHECK_WORDS]) -> u64 {
    let mut h = 0;
    for (i, x) in w.iter().enumerate() {
        h ^= check_mix(x.wrapping_add((i as u64 + 1).wrapping_mul(CHECK_WORD_MUL)));
    }
    if h == 0 { 1 } else { h }
}

/// Client slot states.
pub mod client_state {
    /// Free for a new client.
    pub const FREE: u32 = 0;
    /// Attached and alive.
    pub const ACTIVE: u32 = 1;
    /// The client died; the service reclaims its buffers once its jobs are done.
    pub const DEAD: u32 = 2;
}

/// One attached client.
///
/// Its jobs in flight are `submitted - completed` ([`ClientSlot::in_flight`]): two counters
/// with one writer each, on lines of their own, so that a submit writes a line only its
/// client writes. (One counter that both sides changed cost each one-job submit a locked
/// RMW on a line the service had just written: about 0.1 µs on the H200 machine's host.)
#[repr(C, align(128))]
pub struct ClientSlot {
    /// One of [`client_state`]; claimed by CAS `FREE → ACTIVE`.
    pub state: AtomicU32,
    /// Process id.
    pub pid: AtomicU32,
    /// Process start time (clock ticks since boot), to tell pid reuse apart.
    pub start_time: AtomicU64,
    /// Bumped on each claim, so stale references can be told apart.
    pub generation: AtomicU32,
    _pad0: u32,
    /// Jobs the client has queued, counted before each push (written by the client alone).
    pub submitted: AtomicU64,
    _pad1: [u8; 96],
    /// Jobs of the client the service has finished (written by the service alone).
    pub completed: AtomicU64,
    _pad2: [u8; 120],
}

impl ClientSlot {
    /// Jobs queued and not yet finished. Exact for a client that no longer submits (a dead
    /// one, or the client itself); otherwise a snapshot that may count a job twice (never
    /// one too few: `completed` is read first), so 0 always means none.
    pub fn in_flight(&self) -> u64 {
        let done = self.completed.load(Ordering::Acquire);
        self.submitted.load(Ordering::Acquire).wrapping_sub(done)
    }

    /// The client counts `n` more jobs queued, before it pushes them (the client alone
    /// writes `submitted`, so this is a load and a store, not a locked RMW). ORDERING:
    /// release, so the service, which reads the count after it took the job, sees it.
    pub fn add_submitted(&self, n: u64) {
        let s = self.submitted.load(Ordering::Relaxed);
        self.submitted.store(s.wrapping_add(n), Ordering::Release);
    }

    /// The client takes back `n` jobs it counted but did not queue.
    pub fn sub_submitted(&self, n: u64) {
        let s = self.submitted.load(Ordering::Relaxed);
        self.submitted.store(s.wrapping_sub(n), Ordering::Release);
    }

    /// The service finished `n` of the client's jobs (any service thread).
    pub fn add_completed(&self, n: u64) {
        self.completed.fetch_add(n, Ordering::AcqRel);
    }
}

/// An error text written by the service.
#[repr(C)]
pub struct Message {
    /// Sequence number of the write (the completion's `message` must match its slot).
    pub seq: AtomicU64,
    /// Text length.
    pub len: u32,
    _pad: u32,
    /// UTF-8 text, not NUL-terminated.
    pub text: [u8; 240],
}

/// Bit of [`MapEntry::flags`]: the map lives in GPU memory (CUDA backend); its storage in the
/// arena is the service's host mirror, refreshed only by `map dump`, so other processes
/// must not attach to it.
pub const MAP_FLAG_DEVICE: u32 = 1 << 31;

/// A map in the directory; its storage lives in the arena.
#[repr(C, align(128))]
pub struct MapEntry {
    /// Nonzero when the entry is used; bumped each time it is reassigned.
    pub generation: AtomicU32,
    /// `MapKind::id()`.
    pub kind: u32,
    /// Key size.
    pub key_size: u32,
    /// Value size.
    pub value_size: u32,
    /// Entries (ring buffers: data size).
    pub max_entries: u32,
    /// Flags from the definition.
    pub flags: u32,
    /// Arena offset of the map's storage.
    pub data_off: u64,
    /// Storage size in bytes.
    pub data_len: u64,
    /// Name length.
    pub name_len: u32,
    /// Slot sets of a per-thread array (the service's worker count); 1 otherwise.
    pub threads: u32,
    /// Name bytes.
    pub name: [u8; 64],
}

/// `(struct, field, offset)` rows for each listed field of each struct.
macro_rules! fields {
    ($($ty:ident: $($f:ident),+;)+) => {
        &[$($((stringify!($ty), stringify!($f), core::mem::offset_of!($ty, $f)),)+)+]
    };
}

/// Every offset the GPU side needs, as `(struct, field, offset)`. The CUDA header of the
/// persistent kernel is generated from this table and [`SIZES`] (`device::cuda::layout`),
/// and the kernel's own C structs are checked against it with `static_assert`, so the two
/// sides cannot drift apart.
pub const FIELDS: &[(&str, &str, usize)] = fields! {
    RegionHeader: magic, version, state, queue_capacity, max_clients, completions_per_client,
        max_records, queue_off, clients_off, completions_off, arena_off, arena_size;
    QueueHeader: head, tail;
    QueueSlot: seq, check, desc, inline;
    JobDesc: prog_id, flags, n, input_off, input_len, output_off, output_len, in_rec_size,
        out_rec_size, offsets_off, results_off, args, client, completion, tag;
    Completion: state, status, message, prog_version, prog_id, err_pc, records_done,
        records_failed, r0, tag, submitted_ns, started_ns, finished_ns, gpu_hops, queue, check;
};

/// Sizes of the structures in [`FIELDS`], as `(struct, size)`.
pub const SIZES: &[(&str, usize)] = &[
    ("RegionHeader", core::mem::size_of::<RegionHeader>()),
    ("QueueHeader", core::mem::size_of::<QueueHeader>()),
    ("QueueSlot", core::mem::size_of::<QueueSlot>()),
    ("JobDesc", core::mem::size_of::<JobDesc>()),
    ("Completion", core::mem::size_of::<Completion>()),
];

#[cfg(not(loom))]
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<RegionHeader>() <= HEADER_SIZE);
    assert!(offset_of!(RegionHeader, magic) == 0);
    assert!(offset_of!(RegionHeader, version) == 8);
    assert!(size_of::<QueueHeader>() == 384);
    assert!(offset_of!(QueueHeader, tail) == 128);
    assert!(offset_of!(QueueHeader, done) == 256);
    assert!(size_of::<JobDesc>() == 120);
    assert!(size_of::<QueueSlot>() == 256);
    assert!(offset_of!(QueueSlot, check) == 8);
    assert!(offset_of!(QueueSlot, desc) == 16);
    assert!(offset_of!(QueueSlot, inline) == 136);
    assert!(size_of::<Completion>() == 128);
    assert!(offset_of!(Completion, gpu_hops) == 80);
    assert!(offset_of!(Completion, check) == 96);
    assert!(size_of::<ClientSlot>() == 256);
    assert!(offset_of!(ClientSlot, submitted) == 24);
    assert!(offset_of!(ClientSlot, completed) == 128);
    assert!(size_of::<Message>() == 256);
    assert!(size_of::<MapEntry>() == 128);
    assert!(offset_of!(MapEntry, name) == 48);
    assert!(size_of::<CheckpointHeader>() == 32);
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The tier slot rides in bits 24..32 without touching the device bits or the flags.
    #[test]
    fn tier_slots_ride_in_the_top_byte() {
        let f = job_flags::on_device(job_flags::RESULTS | job_flags::INLINE, 3);
        let t = job_flags::with_tier(f, 255);
        assert_eq!(t & !job_flags::TIER_MASK, f);
        assert_eq!(job_flags::tier_of(t), 255);
        assert_eq!(job_flags::device_of(t), Some(3));
        assert_eq!(job_flags::with_tier(t, 0), f);
        assert_eq!(job_flags::tier_of(job_flags::with_tier(t, 7)), 7);
        assert_eq!(
            job_flags::TIER_MASK & (job_flags::DEVICE_MASK | job_flags::INJECT_FAULT),
            0
        );
        let o = job_flags::with_out_tier(t, 9);
        assert_eq!((job_flags::out_tier_of(o), job_flags::tier_of(o)), (9, 255));
        assert_eq!(job_flags::with_out_tier(o, 0), t);
        let others = job_flags::RESULTS
            | job_flags::VARLEN
            | job_flags::STOP_ON_ERROR
            | job_flags::DEVICE_INPUT
            | job_flags::DEVICE_OUTPUT
            | job_flags::INLINE
            | job_flags::MAILBOX_PING
            | job_flags::INJECT_FAULT
            | job_flags::DEVICE_MASK
            | job_flags::TIER_MASK;
        assert_eq!(job_flags::OUT_TIER_MASK & others, 0);
    }

    fn sample() -> JobDesc {
        JobDesc {
            prog_id: 7,
            flags: job_flags::RESULTS,
            n: 3,
            input_off: 4096,
            input_len: 192,
            output_off: 8192,
            output_len: 24,
            in_rec_size: 64,
            out_rec_size: 8,
            offsets_off: 0,
            results_off: 12288,
            args: [1, 2, 3, 4],
            client: 2,
            completion: 9,
            tag: 0x1234_5678_9abc,
        }
    }

    #[test]
    fn desc_words_are_the_descriptor_bytes() {
        let d = sample();
        // SAFETY: JobDesc is repr(C), 120 bytes of plain integers with no padding.
        let bytes: [u8; 120] = unsafe { core::mem::transmute(d) };
        let words: Vec<u64> = bytes
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, desc_words(&d));
    }

    #[test]
    fn the_check_word_depends_on_every_word_and_on_seq() {
        let d = sample();
        let z = [0u64; INLINE_WORDS];
        let base = slot_check(101, &d, &z);
        assert_ne!(base, slot_check(102, &d, &z), "seq");
        // The same descriptor one lap later (another seq) checks differently.
        assert_ne!(base, slot_check(101 + 4096, &d, &z));
        let mut seen = std::collections::HashSet::new();
        seen.insert(base);
        for i in 0..15 {
            for bit in [0, 17, 63] {
                // SAFETY: as above; flipping a bit of a plain integer field.
                let mut bytes: [u8; 120] = unsafe { core::mem::transmute(d) };
                bytes[i * 8 + bit / 8] ^= 1 << (bit % 8);
                // SAFETY: any 120 bytes are a valid JobDesc (plain integers, no padding).
                let e: JobDesc = unsafe { core::mem::transmute(bytes) };
                assert!(seen.insert(slot_check(101, &e, &z)), "word {i} bit {bit}");
            }
        }
        // Swapping two words is seen too (the word index is mixed in).
        let mut e = d;
        e.input_off = d.output_off;
        e.output_off = d.input_off;
        assert_ne!(slot_check(101, &e, &z), base);
        // Inline words count only with INLINE, and only the job's own bytes.
        let mut il = z;
        il[0] = 42;
        assert_eq!(
            slot_check(101, &d, &il),
            base,
            "no INLINE: the area is ignored"
        );
        let mut e = d;
        e.flags |= job_flags::INLINE;
        e.n = 1;
        e.in_rec_size = 12; // two words
        assert_eq!(inline_words(&e), 2);
        let with = slot_check(101, &e, &il);
        assert_ne!(
            with,
            slot_check(101, &e, &z),
            "the inline bytes are checked"
        );
        il[2] = 7;
        assert_eq!(
            with,
            slot_check(101, &e, &il),
            "words past the input are not"
        );
        e.in_rec_size = 121;
        assert_eq!(inline_words(&e), 0, "too long to be inline");
    }
}
