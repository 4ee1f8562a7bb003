//! The shared-memory layout: one definition of every structure that lives in the region.
//!
//! All structures are `#[repr(C)]`, hold offsets from the region base instead of pointers,
//! and have compile-time size and offset asserts. The GPU side reads the same layout; its
//! view is generated from [`FIELDS`] so both sides come from this file.
//!
//! ```text
//! offset 0          RegionHeader (4 KiB): magic, version, sizes, offsets of every part
//! queue_off         QueueHeader (head and tail on their own 128-byte lines)
//!                   QueueSlot[queue_capacity]            128 bytes each
//! clients_off       ClientSlot[max_clients]               64 bytes each
//! completions_off   Completion[max_clients * per_client]  128 bytes each
//! messages_off      Message[message_slots]                256 bytes each (error texts)
//! maps_off          MapEntry[max_maps]                    128 bytes each (directory)
//! checkpoint_off    2 x checkpoint_size: the service's control-plane checkpoint, double
//!                   buffered (CheckpointHeader + bytes), read back by `run --recover`
//! arena_off         data arena: job buffers and map storage, 4 KiB aligned
//! ```

use crate::sync::{AtomicU32, AtomicU64};

/// `"BPFTSHM\x01"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"BPFTSHM\x01");
/// Bumped on every incompatible layout change (2: the checkpoint area).
pub const LAYOUT_VERSION: u32 = 2;
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

/// The queue's control block. Head and tail sit on their own 128-byte lines.
#[repr(C, align(128))]
pub struct QueueHeader {
    /// Next position a consumer takes. Written by consumers (CAS).
    pub head: AtomicU64,
    _pad0: [u8; 120],
    /// Next position a producer fills. Written by producers (CAS).
    pub tail: AtomicU64,
    _pad1: [u8; 120],
}

impl QueueHeader {
    /// A header with head and tail at 0 (for queues outside a region: tests, loom).
    pub fn new() -> Self {
        QueueHeader {
            head: AtomicU64::new(0),
            _pad0: [0; 120],
            tail: AtomicU64::new(0),
            _pad1: [0; 120],
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
#[repr(C, align(128))]
pub struct QueueSlot {
    /// The sequence word described above.
    pub seq: AtomicU64,
    /// The job.
    pub desc: JobDesc,
}

impl QueueSlot {
    /// A slot with sequence `seq` and an empty descriptor.
    pub fn new(seq: u64) -> Self {
        QueueSlot {
            seq: AtomicU64::new(seq),
            desc: JobDesc::default(),
        }
    }
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
    /// Benchmark: the GPU runtime writes `n` records into its host mailbox and waits for
    /// the host's answer to each; r0 = the total round-trip ns (CUDA backend only).
    pub const MAILBOX_PING: u32 = 1 << 14;
    /// Testing only: the GPU runtime executes `trap` on this job, which kills the CUDA
    /// context. Honoured only by a service started with `--allow-fault-injection`; refused
    /// (`BAD_DESCRIPTOR`) otherwise.
    pub const INJECT_FAULT: u32 = 1 << 15;
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
    /// Finished; the other fields are valid.
    pub const DONE: u32 = 3;
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
    /// One of [`completion_state`]; the service publishes `DONE` with release ordering.
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
#[repr(C, align(64))]
pub struct ClientSlot {
    /// One of [`client_state`]; claimed by CAS `FREE → ACTIVE`.
    pub state: AtomicU32,
    /// Process id.
    pub pid: AtomicU32,
    /// Process start time (clock ticks since boot), to tell pid reuse apart.
    pub start_time: AtomicU64,
    /// Bumped on each claim, so stale references can be told apart.
    pub generation: AtomicU32,
    /// Jobs submitted and not yet completed.
    pub in_flight: AtomicU32,
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
    QueueSlot: seq, desc;
    JobDesc: prog_id, flags, n, input_off, input_len, output_off, output_len, in_rec_size,
        out_rec_size, offsets_off, results_off, args, client, completion, tag;
    Completion: state, status, message, prog_version, prog_id, err_pc, records_done,
        records_failed, r0, tag, submitted_ns, started_ns, finished_ns;
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
    assert!(size_of::<QueueHeader>() == 256);
    assert!(offset_of!(QueueHeader, tail) == 128);
    assert!(size_of::<JobDesc>() == 120);
    assert!(size_of::<QueueSlot>() == 128);
    assert!(offset_of!(QueueSlot, desc) == 8);
    assert!(size_of::<Completion>() == 128);
    assert!(size_of::<ClientSlot>() == 64);
    assert!(size_of::<Message>() == 256);
    assert!(size_of::<MapEntry>() == 128);
    assert!(offset_of!(MapEntry, name) == 48);
    assert!(size_of::<CheckpointHeader>() == 32);
};
