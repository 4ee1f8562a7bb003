//! What the service and its GPU worker process share: the mailbox block in the region's
//! arena, and the JSON-lines commands on the worker's stdin/stdout.
//!
//! The CUDA context lives in a child process (the *GPU worker*, `bpftime-super gpu-worker`)
//! because a GPU fault is sticky: after `CUDA_ERROR_ILLEGAL_ADDRESS` or a `trap`, nothing in
//! that process can use the GPU again (measured: `cuDevicePrimaryCtxReset` does not clear
//! it). The service survives the worker, finishes its jobs, and starts a new one.
//!
//! **Mailbox block** (allocated by the service in the arena, registered with the GPU as part
//! of the region; offsets from its start):
//!
//! | offset                 | what                                   | written by            |
//! |------------------------|----------------------------------------|-----------------------|
//! | 0                      | [`Ctl`] (256 bytes)                    | line 0 service (and the worker's gap words), line 1 service (the stop word alone), lines 2 and 3 GPU |
//! | [`DONE_OFF`]           | done log: [`DONE_LOG`] × [`DoneEntry`] | GPU (seq last, release) |
//! | [`FWD_OFF`]            | forward ring: [`FWD_RING`] × [`FwdEntry`] | GPU              |
//! | [`TRACE_OFF`]          | trace ring (`jit::prelude` layout)     | GPU                   |
//!
//! **Commands** (one JSON object per line; every command gets exactly one reply line):
//!
//! | service → worker | reply        | effect                                                  |
//! |------------------|--------------|---------------------------------------------------------|
//! | `program`        | `ack`        | instant tier at once (bytecode on the device), native at the next generation |
//! | `unload`         | `ack`        | the id maps to nothing on the GPU (jobs go to the host) |
//! | `swap`           | `swapped`    | builds and swaps a generation now                        |
//! | `transfer`       | `ack`        | copies between the shared arena and device buffers       |
//! | `map_sync`       | `ack`        | copies a device map to or from its arena mirror          |
//! | `status`         | `status`     | generation, tiers, swap pauses                           |
//! | `stop`           | `ack`        | the kernel drains and exits, then the worker             |
//!
//! The worker's first line is `ready` (or `failed` with the reason).
//!
//! **Host gaps** ([`CudaConfig::host_gaps`]): while its kernel is stopped for a swap or an
//! idle pause, the worker lends the queue to the service. It stores gap `g` in
//! [`Ctl::gap_open`] once the kernel has exited; the service's mailbox thread then runs the
//! jobs the host can run as the GPU would, in order. Before the launch the worker stores `g`
//! in [`Ctl::gap_close`] and waits until the service, between two jobs, stores it in
//! [`Ctl::gap_done`].

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Done log entries.
pub const DONE_LOG: u32 = 1 << 16;
/// Forward ring entries.
pub const FWD_RING: u32 = 1 << 12;
/// Trace ring records.
pub const TRACE_RING: u32 = 1 << 12;
/// Offset of the done log in the mailbox block.
pub const DONE_OFF: u64 = 256;
/// Offset of the forward ring.
pub const FWD_OFF: u64 = DONE_OFF + DONE_LOG as u64 * 64;
/// Offset of the trace ring.
pub const TRACE_OFF: u64 = FWD_OFF + FWD_RING as u64 * 128;
/// Size of the mailbox block.
pub const MAILBOX_BYTES: u64 = TRACE_OFF + 64 + TRACE_RING as u64 * 64;

/// A C type of the structures the GPU runtime shares with the host: its spelling in the
/// runtime's C, its size and its alignment.
#[derive(Clone, Copy, Debug)]
pub struct CType {
    /// The C spelling.
    pub name: &'static str,
    /// Bytes.
    pub size: usize,
    /// Alignment in bytes.
    pub align: usize,
}

pub(crate) const U32: CType = CType {
    name: "unsigned int",
    size: 4,
    align: 4,
};
pub(crate) const S32: CType = CType {
    name: "int",
    size: 4,
    align: 4,
};
pub(crate) const U64: CType = CType {
    name: "unsigned long long",
    size: 8,
    align: 8,
};
pub(crate) const JOB_DESC: CType = CType {
    name: "struct bpft_job_desc",
    size: 120,
    align: 8,
};

/// One field of such a structure: its name (the same on both sides), C type and element
/// count (an array above 1).
#[derive(Clone, Copy, Debug)]
pub struct CField {
    /// The field's name.
    pub name: &'static str,
    /// Its C type.
    pub ty: CType,
    /// Elements.
    pub n: usize,
}

/// A structure the GPU runtime shares with the host, declared with [`c_mirror!`]: what
/// `source::layout_header` prints the runtime's C `struct` from.
pub trait CMirror {
    /// The structure's name in the runtime's C.
    const C_NAME: &'static str;
    /// Its fields in order.
    const C_FIELDS: &'static [CField];
}

/// Declares a `#[repr(C)]` structure the GPU runtime shares with the host once, for both
/// sides: the Rust struct, and its C fields ([`CMirror`]) from which `source::layout_header`
/// prints the runtime's `struct`. Each field's Rust type is asserted at compile time to
/// have its C type's size and alignment, so the two structures, laid out by the same C
/// rules, have the same offsets and size.
macro_rules! c_mirror {
    ($(#[$sm:meta])* $sv:vis struct $name:ident as $cname:literal {
        $($(#[$fm:meta])* $fv:vis $f:ident : $ty:ty = $cty:ident $([$n:expr])?,)*
    }) => {
        $(#[$sm])*
        #[repr(C)]
        $sv struct $name {
            $($(#[$fm])* $fv $f: $ty,)*
        }
        impl $crate::cuda::wire::CMirror for $name {
            const C_NAME: &'static str = $cname;
            const C_FIELDS: &'static [$crate::cuda::wire::CField] = &[
                $($crate::cuda::wire::CField { name: stringify!($f), ty: $cty, n: c_mirror!(@n $($n)?) },)*
            ];
        }
        const _: () = {
            $(assert!(
                std::mem::size_of::<$ty>() == $cty.size * c_mirror!(@n $($n)?)
                    && std::mem::align_of::<$ty>() == $cty.align
            );)*
        };
    };
    (@n) => { 1 };
    (@n $n:expr) => { $n };
}
pub(crate) use c_mirror;

c_mirror! {
    /// `struct bpft_ctl`: the control block. Line 0: written by the service as it consumes
    /// the logs (and the worker's gap words). Line 1: the stop word alone. Lines 2 and 3:
    /// written by the GPU.
    pub struct Ctl as "bpft_ctl" {
        _reserved0: u32 = U32,
        _pad0: u32 = U32,
        /// Service: done-log entries consumed.
        pub done_consumed: AtomicU64 = U64,
        /// Service: forward-ring entries consumed.
        pub fwd_consumed: AtomicU64 = U64,
        /// Service: trace records consumed (the answer a mailbox ping waits for).
        pub trace_consumed: AtomicU64 = U64,
        /// Worker process (host side): 1 once it found its context failed, just before it
        /// exits; the service starts the warm standby without waiting for the exit.
        pub worker_faulted: AtomicU32 = U32,
        _pad1a: u32 = U32,
        /// Worker process: the number of the last host-served gap it opened (its kernel has
        /// exited and the queue is the service's until [`Ctl::gap_done`] says it is back; a
        /// kernel launched meanwhile waits for that before it takes jobs).
        pub gap_open: AtomicU64 = U64,
        /// Worker process: the gap it wants closed (its next kernel is ready to launch).
        pub gap_close: AtomicU64 = U64,
        /// Service: the last gap in which it stopped taking jobs (every job it took there has
        /// finished and its slot is released).
        pub gap_done: AtomicU64 = U64,
        /// Service: the kernel stops taking jobs, drains and exits. Alone on its cache line:
        /// dispatcher 0 reads it with every 8th poll (`BPFT_STOP_EVERY`), and the words
        /// above change with every job.
        pub stop: AtomicU32 = U32,
        _pad1b: u32 = U32,
        _pad1: [u64; 7] = U64[7],
        /// GPU: queue head at exit.
        pub head: AtomicU64 = U64,
        /// GPU: jobs taken in this generation.
        pub jobs_taken: AtomicU64 = U64,
        /// GPU: queue slots whose check word did not match the descriptor words read with it
        /// (a read that raced the producer); each was read again in order.
        pub torn_reads: AtomicU64 = U64,
        /// GPU: 1 while the dispatcher runs.
        pub running: AtomicU32 = U32,
        /// GPU: generation number once drained.
        pub exited: AtomicU32 = U32,
        /// GPU: polls that took at least one job, in this generation (with `jobs_taken`, the
        /// mean batch; refreshed every 256 batches and at exit).
        pub batches: AtomicU64 = U64,
        _pad2: [u64; 11] = U64[11],
    }
}

c_mirror! {
    /// `struct bpft_done`: a job the GPU finished.
    pub struct DoneEntry as "bpft_done" {
        /// Position + 1 once published.
        pub seq: AtomicU64 = U64,
        /// Completion slot.
        pub completion: u32 = U32,
        /// Client slot.
        pub client: u32 = U32,
        /// Job status.
        pub status: i32 = S32,
        /// Pc of the first failure.
        pub err_pc: u32 = U32,
        /// First failing record.
        pub err_record: u64 = U64,
        /// Interpreter error code of that record.
        pub err_code: u32 = U32,
        /// 1: the service writes the message and publishes DONE.
        pub finalize: u32 = U32,
        /// Run time, ns.
        pub run_ns: u64 = U64,
        /// Records that ran.
        pub records_done: u64 = U64,
        /// Records that failed.
        pub records_failed: u64 = U64,
    }
}

c_mirror! {
    /// `struct bpft_fwd`: a job for the host runner.
    pub struct FwdEntry as "bpft_fwd" {
        /// Position + 1 once published.
        pub seq: AtomicU64 = U64,
        /// The job.
        pub desc: shm_maps::JobDesc = JOB_DESC,
    }
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<Ctl>() == 256);
    assert!(offset_of!(Ctl, head) == 128);
    assert!(offset_of!(Ctl, worker_faulted) == 32);
    // The runtime's C structure is generated from the same fields (`c_mirror!`); these
    // pin the offsets the service's code and its documentation rely on.
    assert!(offset_of!(Ctl, gap_open) == 40 && offset_of!(Ctl, gap_done) == 56);
    assert!(offset_of!(Ctl, stop) == 64);
    assert!(offset_of!(Ctl, running) == 152);
    assert!(size_of::<DoneEntry>() == 64);
    assert!(size_of::<FwdEntry>() == 128);
    assert!(FWD_OFF.is_multiple_of(128) && TRACE_OFF.is_multiple_of(64));
};

/// Settings of the CUDA backend.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CudaConfig {
    /// Device ordinal.
    pub device: i32,
    /// Interpreter instruction budget per record.
    pub max_insns: u64,
    /// Bytes of device memory for device-resident job buffers.
    pub device_arena: u64,
    /// Honour `job_flags::INJECT_FAULT` (tests of fault recovery).
    pub allow_fault_injection: bool,
    /// Wait this long (µs) after a program change before building a generation.
    pub debounce_us: u64,
    /// Build native generations (off: every program stays on the instant tier).
    pub native: bool,
    /// The `bpftime-super` binary that runs `gpu-worker`; `None`: found next to this one
    /// (or `$BPFTIME_SUPER_BIN`).
    pub worker_exe: Option<std::path::PathBuf>,
    /// Keep a second worker process warm (context created, runtime compiled and loaded,
    /// region registered, kernel not launched), so that after a GPU fault the next job is
    /// served without paying a process and context start. Costs a second context's device
    /// memory.
    #[serde(default = "yes")]
    pub warm_standby: bool,
    /// The region queue this GPU serves (its index among the service's GPUs; 0 on a
    /// one-GPU service).
    #[serde(default)]
    pub queue: u32,
    /// The service runs several GPUs, whose per-thread arrays share one arena mirror: a
    /// worker places its copies from the mirror's header with the values zeroed (after a
    /// fault, a `--recover` or at load), never with another GPU's counts.
    #[serde(default)]
    pub shared_mirrors: bool,
    /// While the kernel is stopped for a generation swap or an idle pause, the service
    /// takes the queue's jobs that the host can run exactly as the GPU would (see
    /// `backend`'s `host_can_stand_in`), so they do not wait for the code upload.
    #[serde(default = "yes")]
    pub host_gaps: bool,
}

fn yes() -> bool {
    true
}

impl Default for CudaConfig {
    fn default() -> Self {
        CudaConfig {
            device: 0,
            max_insns: 1_000_000,
            device_arena: 256 << 20,
            allow_fault_injection: false,
            debounce_us: 2_000,
            native: true,
            worker_exe: None,
            warm_standby: true,
            queue: 0,
            shared_mirrors: false,
            host_gaps: true,
        }
    }
}

/// Tier of a program on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// The device interpreter (right after load).
    Interp,
    /// JIT-compiled code of the current generation.
    Native,
    /// Not runnable on the GPU: its jobs go to the host runner.
    Host,
}

/// What `status` shows about the GPU.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CudaStatus {
    /// Device name.
    pub device: String,
    /// Whether this GPU's atomics on host memory are atomic with other devices' (see
    /// `Gpu::host_native_atomics`).
    #[serde(default)]
    pub host_native_atomics: bool,
    /// Driver version.
    pub driver: String,
    /// Current generation (1 = the first launch of this worker).
    pub generation: u32,
    /// Grid of the persistent kernel (blocks, threads per block).
    pub grid: (u32, u32),
    /// Per program: (id, version, tier).
    pub programs: Vec<(u32, u32, Tier)>,
    /// Native generation swaps done by this worker.
    pub swaps: u64,
    /// Pause of the last swap, ns (stop requested → new kernel launched).
    pub last_swap_pause_ns: u64,
    /// GPU workers restarted after a fault.
    pub recoveries: u64,
    /// Milliseconds from the last fault's detection to the new worker's kernel running
    /// with every program sent (0 before any fault).
    #[serde(default)]
    pub last_restart_ms: f64,
    /// Whether that restart used the warm standby.
    #[serde(default)]
    pub last_restart_warm: bool,
    /// Whether a warm standby worker is ready now.
    #[serde(default)]
    pub standby_ready: bool,
    /// Jobs completed with `DEVICE_FAULT`.
    pub fault_jobs: u64,
    /// Pid of the GPU worker process.
    pub worker_pid: u32,
    /// Trace-ring records the host consumed since the worker started.
    pub trace_records: u64,
    /// Queue slots whose one-burst read raced the producer and were read again in order
    /// (see `shm_maps::layout::slot_check`), since the worker started.
    #[serde(default)]
    pub torn_reads: u64,
    /// Jobs the dispatcher took from the queue, and in how many polls, in this generation
    /// (refreshed every 256 polls that took jobs).
    #[serde(default)]
    pub jobs_taken: u64,
    /// See `jobs_taken`.
    #[serde(default)]
    pub batches: u64,
    /// Old generations' libraries still loaded (unloaded in idle pauses, or one a swap
    /// past the cap).
    #[serde(default)]
    pub stale_libs: u32,
    /// Idle pauses that unloaded old libraries, and the longest of them, ns.
    #[serde(default)]
    pub tidy_pauses: u64,
    /// See `tidy_pauses`.
    #[serde(default)]
    pub tidy_max_ns: u64,
    /// Jobs the service ran on the host while the kernel was stopped (swaps and idle
    /// pauses; [`CudaConfig::host_gaps`]), since the service started.
    #[serde(default)]
    pub gap_jobs: u64,
}

/// Times of the last generation build.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct SwapTimes {
    /// eBPF → PTX for all programs, ns.
    pub jit_ns: u64,
    /// Driver link, ns.
    pub link_ns: u64,
    /// `cuLibraryLoadData`, ns.
    pub load_ns: u64,
    /// Stop → old kernel exited, ns.
    pub drain_ns: u64,
    /// Old exited → new launched, ns (the sum of the three below).
    pub relaunch_ns: u64,
    /// Of which: unloading the previous generation's library.
    pub unload_ns: u64,
    /// Of which: publishing the native programs' table entries.
    pub publish_ns: u64,
    /// Of which: `cuKernelGetFunction` (the code upload) and the launch.
    pub launch_ns: u64,
    /// Of `launch_ns`: `cuKernelGetFunction` alone.
    pub getfunc_ns: u64,
    /// Programs compiled to native code.
    pub native: u32,
    /// Old libraries unloaded in this pause (past the cap).
    #[serde(default)]
    pub unloaded: u32,
    /// Whether the service took the queue's jobs during the pause ([`CudaConfig::host_gaps`]).
    #[serde(default)]
    pub host_served: bool,
    /// The time in which nobody took jobs, ns: with `host_served`, the drain and the
    /// handback (not the service's notice of the opening, one turn of its mailbox loop,
    /// nor the kernel's of the closing, one poll); otherwise the pause and the new
    /// kernel's start (`start_ns`).
    #[serde(default)]
    pub unserved_ns: u64,
    /// After the pause: from the launch's return until the new kernel was up, ns (it then
    /// waits for the gap to close).
    #[serde(default)]
    pub start_ns: u64,
    /// From asking the service to close the gap, once the new kernel was up, until it
    /// answered (it finishes the job it is running first), ns.
    #[serde(default)]
    pub handback_ns: u64,
}

/// Service → worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Cmd {
    /// Install or replace program `id` (reloaded from its object file).
    Program {
        /// Program id.
        id: u32,
        /// Version.
        version: u32,
        /// Installed name (its maps are `name:map` in the map directory).
        name: String,
        /// Source file name (for messages).
        file: String,
        /// The `--prog` selector given at load.
        selector: Option<String>,
        /// The object file's bytes (a JSON array: objects are a few KB).
        object: Vec<u8>,
        /// Verifier's deepest stack use, bytes.
        stack_depth: u32,
        /// Its maps that live in GPU memory (names within the program). The worker copies
        /// each from its arena mirror to device memory the first time it sees it.
        #[serde(default)]
        device_maps: Vec<String>,
        /// Its maps in an emulated memory tier: (name within the program, latency ns,
        /// picoseconds per byte at the cap or 0). Every helper access to one waits it out
        /// on the GPU, in native code and in the device interpreter alike.
        #[serde(default)]
        tiered_maps: Vec<(String, u64, u64)>,
    },
    /// Copy a device map between GPU memory and its arena mirror: bytes `[off, off + len)`
    /// of the map's storage.
    MapSync {
        /// `program:map`.
        map: String,
        /// Mirror → GPU (true) or GPU → mirror.
        to_device: bool,
        /// Offset in the map's storage.
        off: u64,
        /// Bytes.
        len: u64,
    },
    /// Every job buffer now placed in an emulated tier (the whole set, after each change):
    /// the worker rewrites the slots of its GPU tier table that differ.
    TierBuffers {
        /// By slot.
        slots: Vec<crate::tier::TierSlot>,
    },
    /// Program `id` is gone.
    Unload {
        /// Program id.
        id: u32,
    },
    /// Build and swap a generation now.
    Swap,
    /// Copy between the shared arena and the device arena.
    Transfer {
        /// Upload (true) or download.
        to_device: bool,
        /// Shared arena offset.
        shm_off: u64,
        /// Device arena offset.
        dev_off: u64,
        /// Bytes.
        len: u64,
    },
    /// Report status.
    Status,
    /// Drain the kernel and exit.
    Stop,
    /// To a standby worker: launch the persistent kernel now and answer `ready`.
    Activate,
}

/// Worker → service.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Msg {
    /// The first generation runs.
    Ready {
        /// Device address of the region in the worker.
        region_dev: u64,
        /// Value sets per-thread arrays get (GPU threads).
        value_sets: u32,
        /// Status at start.
        status: CudaStatus,
    },
    /// A standby worker's first line: prepared, waiting for `activate`.
    Standby {
        /// Milliseconds it took to prepare.
        ms: f64,
    },
    /// The worker could not start.
    Failed {
        /// Why.
        error: String,
    },
    /// Reply to `program`, `unload`, `transfer`, `stop`.
    Ack {
        /// Error text, if it failed.
        error: Option<String>,
    },
    /// Reply to `swap`.
    Swapped {
        /// Error text, if it failed.
        error: Option<String>,
        /// Timings.
        times: SwapTimes,
    },
    /// Reply to `status`.
    Status(CudaStatus),
}

/// Arguments of `bpftime-super gpu-worker` (one JSON argument).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerArgs {
    /// Region name.
    pub region: String,
    /// Arena offset of the mailbox block.
    pub mailbox_off: u64,
    /// Settings.
    pub cfg: CudaConfig,
    /// The service's pid (written into map lock words).
    pub service_pid: u32,
    /// Start as the warm standby: prepare everything, answer `standby`, and launch the
    /// persistent kernel only on `activate`.
    #[serde(default)]
    pub standby: bool,
}
