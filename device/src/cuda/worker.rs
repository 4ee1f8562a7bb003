//! The GPU worker process: owns the CUDA context, the persistent kernel and its
//! generations. Started by [`super::CudaBackend`] as `bpftime-super gpu-worker ARGS`;
//! speaks [`super::wire`] on stdin/stdout.
//!
//! One thread owns the context and does every device operation; a builder thread JIT-
//! compiles, links and loads the next generation (none of which blocks the running kernel,
//! GPU-FACTS §2) and hands the library back; a reader thread turns stdin lines into
//! commands. A fault (a sticky CUDA error, or the kernel exiting unasked) ends the process
//! with [`FAULT_EXIT`]; the service takes it from there.
//!
//! | memory                          | where                  | contents                      |
//! |---------------------------------|------------------------|-------------------------------|
//! | `bpft_state` (256 B)            | device                 | ring, log and queue positions |
//! | program index `u32[MAX_PROGS]`  | device                 | index word per id ([`index_word`]) |
//! | entries `bpft_prog[MAX_ENTRIES]`| device                 | immutable once published      |
//! | code arena                      | device                 | relocated bytecode, map descs |
//! | job ring `bpft_djob[JOB_RING]`  | device                 | multi-record jobs             |
//! | device buffers                  | device                 | clients' device-resident data |

use super::DeviceError;
use super::bytecode;
use super::driver::{Gpu, Library, Stream, StreamState};
use super::source;
use super::wire::*;
use crate::tier::TierSlot;
use shm_maps::ShmRegion;
use shm_maps::arena::{Arena, Owner};
use shm_maps::region::monotonic_ns;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a gap's closing waits for the new kernel to come up before it hands the queue
/// back anyway.
const START_WAIT: Duration = Duration::from_millis(50);

/// Program table slots (ids at or above go to the host runner).
pub const MAX_PROGS: u32 = 1 << 16;
/// Program entries (immutable once published; reused round robin).
pub const MAX_ENTRIES: u32 = 1 << 16;
/// Low bits of an index word that hold the entry (+ 1); the rest hold the round robin's
/// lap (`BPFT_INDEX_ENTRY_BITS` in the runtime).
pub const INDEX_ENTRY_BITS: u32 = 17;
const _: () = assert!(MAX_ENTRIES < 1 << INDEX_ENTRY_BITS);

/// The program index word that names entry `idx`, written in lap `lap` of the round robin:
/// `idx + 1` in the low [`INDEX_ENTRY_BITS`] (0 is "no program"), the lap above. One entry is
/// written at most once a lap, so a word names one write of one entry (until the lap wraps
/// its 15 bits, 2^31 entry writes later): the dispatcher caches an entry by its word.
pub fn index_word(idx: u32, lap: u32) -> u32 {
    (idx + 1) | (lap << INDEX_ENTRY_BITS)
}

/// The entry an index word names (the word is not 0).
pub fn entry_of(word: u32) -> u32 {
    (word & ((1 << INDEX_ENTRY_BITS) - 1)) - 1
}
/// Device job ring slots.
pub const JOB_RING: u32 = 256;
/// Threads per block of the persistent kernel.
pub const THREADS: u32 = 256;
/// Device memory for bytecode and map descriptors.
pub const CODE_ARENA: u64 = 64 << 20;
/// Old generations' libraries kept loaded at most: past it, a swap's pause unloads the
/// oldest (`cuLibraryUnload` waits for the kernel, and one costs about 0.16 ms of pause on
/// an H200: 16 at once made a 2.5 ms pause, `bench/results/gpu_service.md`). Below it they
/// are unloaded only while the queue is idle ([`Worker::tidy`]). `BPFTIME_GPU_STALE_CAP`
/// overrides it (a measurement knob).
pub const STALE_CAP: usize = 32;
/// Stale libraries one idle pause unloads at most (a job arriving meanwhile waits for it:
/// on an H200, idle pauses of 4 took up to 1.1 ms, of 2 up to 1.2 ms).
const TIDY_LIBS: usize = 1;
/// How long the queue must have been empty and its tail still before an idle pause.
const TIDY_IDLE: Duration = Duration::from_millis(20);
/// Exit status of a worker whose context failed.
pub const FAULT_EXIT: i32 = 3;

const TIER_INTERP: u32 = 1;
const TIER_NATIVE: u32 = 2;
const TIER_HOST: u32 = 3;
/// Device scratch of the dispatchers: one 128-byte line per lane for inline job input.
const SCRATCH_BYTES: usize = source::MAX_DISPATCHERS * 32 * 128;
/// Blocks of the persistent kernel an SM, at most (the grid's size, and so how many worker
/// warps need a staging area of `source::STAGE_BYTES`).
const MAX_BLOCKS_PER_SM: u32 = 2;
/// `sizeof(struct bpft_djob)` rounded up.
const DJOB_BYTES: usize = 320;

/// `struct bpft_prog` of the runtime.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProgEntry {
    version: u32,
    tier: u32,
    native_slot: u32,
    prog_id: u32,
    interp: bytecode::ProgDesc,
    reserved: [u64; 2],
}

c_mirror! {
    /// `struct bpft_params` of the runtime: the kernel's parameters, by value.
    #[derive(Clone, Copy, Default, Debug)]
    pub(crate) struct Params as "bpft_params" {
        slots: u64 = U64,
        queue_hdr: u64 = U64,
        completions: u64 = U64,
        arena: u64 = U64,
        arena_size: u64 = U64,
        dev_arena: u64 = U64,
        dev_arena_size: u64 = U64,
        ctl: u64 = U64,
        state: u64 = U64,
        prog_index: u64 = U64,
        progs: u64 = U64,
        jobs: u64 = U64,
        done_log: u64 = U64,
        fwd_ring: u64 = U64,
        trace_buf: u64 = U64,
        time_offset: u64 = U64,
        max_insns: u64 = U64,
        scratch: u64 = U64,
        tier_table: u64 = U64,
        stage: u64 = U64,
        queue_mask: u32 = U32,
        max_progs: u32 = U32,
        completions_total: u32 = U32,
        max_records: u32 = U32,
        job_mask: u32 = U32,
        done_mask: u32 = U32,
        fwd_mask: u32 = U32,
        flags: u32 = U32,
        generation: u32 = U32,
        lock_pid: u32 = U32,
        stage_warps: u32 = U32,
    }
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<ProgEntry>() == 64);
    assert!(offset_of!(ProgEntry, interp) == 16);
    assert!(size_of::<Params>() == (20 * 8 + 11 * 4usize).next_multiple_of(8));
    assert!(size_of::<TierEntry>() == 64);
    assert!(offset_of!(TierEntry, tat) == 40);
    assert!(size_of::<State>() == source::STATE_BYTES);
    // `rearm` clears the two flags with one 8-byte write.
    assert!(offset_of!(State, stop) == offset_of!(State, drain) + 4);
    assert!(offset_of!(State, drain).is_multiple_of(8));
};

c_mirror! {
    /// `struct bpft_state` of the runtime: its state in device memory, kept across
    /// generations (zeroed once; `rearm` clears `drain` and `stop` before each launch).
    pub(crate) struct State as "bpft_state" {
        /// Ring jobs claimed by the dispatchers (atomicAdd).
        job_pub: u64 = U64,
        /// Done-log entries claimed (atomicAdd).
        done_pos: u64 = U64,
        /// Forward-ring entries claimed (atomicAdd).
        fwd_pos: u64 = U64,
        /// Set by dispatcher 0 once the ring is empty at stop.
        drain: u32 = U32,
        /// Dispatcher 0's copy of the control block's stop word, for the others.
        stop: u32 = U32,
        /// `job_pub` at this generation's launch.
        ring_start: u64 = U64,
        /// The last `done_consumed` read from the host (saves a PCIe read).
        done_seen: u64 = U64,
        /// Dispatchers that have stopped (dispatcher 0 counts them, resets).
        stopped: u32 = U32,
        /// 1: `dpos` holds where each dispatcher stopped (same count every launch).
        resume: u32 = U32,
        /// Jobs taken by every dispatcher in this generation.
        taken: u64 = U64,
        /// Polls that took jobs, every dispatcher, this generation.
        batches: u64 = U64,
        /// Slots read again (all generations).
        torn: u64 = U64,
        pad2: [u64; 22 - source::MAX_DISPATCHERS] = U64[22 - source::MAX_DISPATCHERS],
        /// Each dispatcher's next position (at stop; with several, live).
        dpos: [u64; source::MAX_DISPATCHERS] = U64[source::MAX_DISPATCHERS],
    }
}

c_mirror! {
    /// One slot of the GPU tier table (`struct bpft_tier` of the runtime): a job buffer in an
    /// emulated tier, and its link word. Written by the worker while the kernel runs: `len`
    /// is cleared before an entry changes and set last, so a job sees the old buffer, the new
    /// one or none (it then runs at local speed).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub(crate) struct TierEntry as "bpft_tier" {
        off: u64 = U64,
        /// 0: the slot is free.
        len: u64 = U64,
        client: u32 = U32,
        pad: u32 = U32,
        latency_ns: u64 = U64,
        ps_per_byte: u64 = U64,
        /// The link's next free time (%globaltimer ns), the GPU's.
        tat: u64 = U64,
        reserved: [u64; 2] = U64[2],
    }
}

const TIER_TABLE_BYTES: usize = shm_maps::job_flags::TIER_SLOTS as usize * 64;

/// The writes that turn the GPU tier table holding `have` into one holding `want`, in
/// order: `(slot, entry)`, an entry with `len` 0 clearing its slot. A slot that changes is
/// cleared first and its new entry written with `len` 0, then its `len` (the kernel reads
/// an entry with its `len` and checks `len` again after a fence: a read that overlaps a
/// rewrite is taken as local); a new entry's link starts idle.
fn tier_writes(have: &[TierSlot], want: &[TierSlot]) -> Vec<(u8, TierWrite)> {
    let mut w = Vec::new();
    for h in have {
        if !want.contains(h) {
            w.push((h.slot, TierWrite::Len(0)));
        }
    }
    for t in want {
        if !have.contains(t) {
            w.push((
                t.slot,
                TierWrite::Entry(TierEntry {
                    off: t.off,
                    len: 0,
                    client: t.client,
                    latency_ns: t.latency_ns,
                    ps_per_byte: t.ps_per_byte,
                    ..TierEntry::default()
                }),
            ));
            w.push((t.slot, TierWrite::Len(t.len)));
        }
    }
    w
}

/// One write of [`tier_writes`].
#[derive(Debug, PartialEq)]
enum TierWrite {
    /// The whole entry.
    Entry(TierEntry),
    /// Its `len` word alone.
    Len(u64),
}

/// Drops each entry of `m` (keyed `program:map`) that no installed program names among
/// its `maps`, freeing the GPU memory at its `addr`.
fn drop_unnamed<V>(
    gpu: &Gpu,
    m: &mut HashMap<String, V>,
    installed: &HashMap<u32, Prog>,
    maps: impl Fn(&Prog) -> Vec<String>,
    addr: impl Fn(&V) -> u64,
) {
    let live: std::collections::HashSet<String> = installed
        .values()
        .flat_map(|p| maps(p).into_iter().map(move |n| format!("{}:{n}", p.name)))
        .collect();
    m.retain(|k, v| {
        let keep = live.contains(k);
        if !keep {
            let _ = gpu.free(addr(v));
        }
        keep
    });
}

fn as_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: `T` is a `#[repr(C)]` plain-data struct; the device reads these bytes.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

fn slice_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: as `as_bytes`, for a slice.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// A program as the worker knows it.
#[derive(Clone)]
struct Prog {
    id: u32,
    version: u32,
    name: String,
    program: ebpf::Program,
    stack_depth: u32,
    /// Bytecode allocations in the code arena.
    allocs: Vec<u64>,
    tier: u32,
    /// Its maps that live in GPU memory.
    device_maps: Vec<String>,
    /// Its maps in an emulated tier: (name, latency ns, ps per byte).
    tiered_maps: Vec<(String, u64, u64)>,
}

/// Device maps: `program:map` → (device address, storage bytes).
type DeviceMaps = HashMap<String, (u64, u64)>;

/// Maps in an emulated tier: `program:map` → the tier, its link word in GPU memory.
type TieredMaps = HashMap<String, jit::MapTier>;

/// A generation built off the critical path.
struct Built {
    lib: Result<Library, DeviceError>,
    /// (id, version, slot) of each native program.
    natives: Vec<(u32, u32, u32)>,
    times: SwapTimes,
}

struct Worker {
    args: WorkerArgs,
    region: Arc<ShmRegion>,
    gpu: Arc<Gpu>,
    kstream: Stream,
    copy: Stream,
    region_dev: u64,
    state: u64,
    prog_index: u64,
    progs: u64,
    code: u64,
    code_alloc: Arena,
    dev_arena: u64,
    lib: Option<Library>,
    stale: Vec<Library>,
    /// [`STALE_CAP`], or `BPFTIME_GPU_STALE_CAP`.
    stale_cap: usize,
    /// Idle pauses so far, and the longest, ns.
    tidy_pauses: u64,
    tidy_max_ns: u64,
    /// The queue's tail when last looked at, and since when it has not moved.
    idle_tail: (u64, Instant),
    params: Params,
    grid: u32,
    next_entry: u32,
    /// Laps of `next_entry` round the entries (the high bits of [`index_word`]).
    entry_lap: u32,
    /// The index word of each published id (the kernel may read the entry at any time).
    named: HashMap<u32, u32>,
    installed: HashMap<u32, Prog>,
    dev_maps: DeviceMaps,
    tiered: TieredMaps,
    /// The job buffers the GPU tier table holds.
    tier_slots: Vec<TierSlot>,
    retired: Vec<u64>,
    generation: u32,
    swaps: u64,
    last_pause: u64,
    runtime_ptx: Arc<String>,
    sm: u32,
    device_name: String,
    host_atomics: bool,
}

/// The step a generation swap is in, for the standby's report when its launch is slow.
static SWAP_STEP: Mutex<&str> = Mutex::new("");

fn swap_step(s: &'static str) {
    *SWAP_STEP.lock().unwrap_or_else(|p| p.into_inner()) = s;
}

/// Runs the worker; returns the process exit status.
pub fn main(args_json: &str) -> i32 {
    let args: WorkerArgs = match serde_json::from_str(args_json) {
        Ok(a) => a,
        Err(e) => {
            reply(&Msg::Failed {
                error: format!("bad worker arguments: {e}"),
            });
            return 2;
        }
    };
    let standby = args.standby;
    let t = Instant::now();
    let (mut w, first) = match Worker::prepare(args) {
        Ok(w) => w,
        Err(e) => {
            reply(&Msg::Failed {
                error: e.to_string(),
            });
            return 1;
        }
    };
    if standby {
        // Everything but the launch is done; wait for the service to need us. Only
        // `activate` and `stop` (or the end of stdin) mean anything here.
        reply(&Msg::Standby {
            ms: t.elapsed().as_secs_f64() * 1e3,
        });
        let mut line = String::new();
        loop {
            line.clear();
            match std::io::stdin().read_line(&mut line) {
                Ok(0) | Err(_) => return 0,
                Ok(_) => match serde_json::from_str::<Cmd>(&line) {
                    Ok(Cmd::Activate) => break,
                    Ok(Cmd::Stop) => return 0,
                    _ => reply(&Msg::Ack {
                        error: Some("a standby worker takes only activate and stop".into()),
                    }),
                },
            }
        }
    }
    // A standby that takes long to launch says every 5 s which step of the swap it is in
    // (the service gives up on it after ACTIVATE_LIMIT and starts a new worker).
    let launched = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if standby {
        let launched = launched.clone();
        let _ = std::thread::Builder::new()
            .name("bpftime-standby-watch".into())
            .spawn(move || {
                let t = Instant::now();
                let mut report = Duration::from_secs(5);
                while !launched.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(100));
                    if t.elapsed() >= report {
                        report += Duration::from_secs(5);
                        let secs = t.elapsed().as_secs();
                        tracing::warn!(
                            step = *SWAP_STEP.lock().unwrap_or_else(|p| p.into_inner()),
                            secs,
                            "the activated standby's launch is taking long"
                        );
                    }
                }
            });
    }
    let swapped = w.swap(first);
    launched.store(true, Ordering::Release);
    if let Err(e) = swapped {
        reply(&Msg::Failed {
            error: e.to_string(),
        });
        return 1;
    }
    w.region.claim_helper();
    reply(&Msg::Ready {
        region_dev: w.region_dev,
        value_sets: w.grid * THREADS,
        status: w.status(),
    });
    w.serve()
}

fn reply(m: &Msg) {
    let mut out = std::io::stdout().lock();
    let mut line = serde_json::to_string(m).unwrap_or_else(|e| {
        format!("{{\"msg\":\"ack\",\"error\":\"cannot encode the reply: {e}\"}}")
    });
    line.push('\n');
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
}

fn fault(why: &str) -> ! {
    tracing::error!("GPU fault: {why}; the worker exits so the service can restart it");
    std::process::exit(FAULT_EXIT);
}

impl Worker {
    /// Says in the mailbox that this worker's context failed (the service need not wait
    /// for the exit, which tears the context down), then exits.
    fn fail(&self, why: &str) -> ! {
        self.ctl().worker_faulted.store(1, Ordering::Release);
        fault(why)
    }

    /// Everything before the first launch: the context, the runtime compiled and the first
    /// generation loaded, the region registered, device memory allocated, the clock
    /// calibrated. Returns the worker and the generation to launch with [`Worker::swap`].
    fn prepare(args: WorkerArgs) -> Result<(Worker, Built), DeviceError> {
        let region =
            Arc::new(
                ShmRegion::open_as_helper(&args.region).map_err(|e| DeviceError::Call {
                    call: "shm open",
                    code: e.to_string(),
                    log: String::new(),
                })?,
            );
        if region.queue_at(args.cfg.queue).is_none() {
            return Err(DeviceError::Call {
                call: "shm open",
                code: format!(
                    "the region has {} job queues, this GPU was given queue {}",
                    region.queue_count(),
                    args.cfg.queue
                ),
                log: String::new(),
            });
        }
        let gpu = Gpu::open(args.cfg.device)?;
        // A measurement knob: BPFTIME_GPU_STACK=BYTES sizes local memory up front (does its
        // sizing cost a generation's code upload? bench/results/gpu_service.md).
        let stack = std::env::var("BPFTIME_GPU_STACK")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map(|b| gpu.set_stack_limit(b))
            .transpose()?;
        if !gpu.lmem_resize_to_max() {
            tracing::warn!(
                "the GPU context resizes local memory per launch (CU_CTX_LMEM_RESIZE_TO_MAX \
                 not in force): generation swaps may pay for it"
            );
        }
        if let Some(b) = stack {
            tracing::warn!(stack = b, "BPFTIME_GPU_STACK: stack limit set");
        }
        let sm = super::device_sm(args.cfg.device)?;
        let t = Instant::now();
        let runtime_ptx = Arc::new(source::compile_runtime(sm)?);
        tracing::info!(
            sm,
            ms = t.elapsed().as_secs_f64() * 1e3,
            "compiled the persistent runtime with NVRTC"
        );
        let h = region.header();
        let region_host = region.base().as_ptr();
        let region_dev = gpu.register(region_host, region.len())?;
        let kstream = gpu.stream()?;
        let copy = gpu.stream()?;
        let state = gpu.alloc(source::STATE_BYTES)?;
        let prog_index = gpu.alloc(MAX_PROGS as usize * 4)?;
        let progs = gpu.alloc(MAX_ENTRIES as usize * 64)?;
        let jobs = gpu.alloc(JOB_RING as usize * DJOB_BYTES)?;
        let code = gpu.alloc(CODE_ARENA as usize)?;
        let dev_arena = gpu.alloc(args.cfg.device_arena as usize)?;
        let scratch = gpu.alloc(SCRATCH_BYTES)?;
        let stage_warps = gpu.sm_count()? * MAX_BLOCKS_PER_SM * (THREADS / 32);
        let stage = gpu.alloc(stage_warps as usize * source::STAGE_BYTES)?;
        let tier_table = gpu.alloc(TIER_TABLE_BYTES)?;
        gpu.memset32(copy, tier_table, 0, TIER_TABLE_BYTES / 4)?;
        gpu.memset32(copy, state, 0, source::STATE_BYTES / 4)?;
        gpu.memset32(copy, prog_index, 0, MAX_PROGS as usize)?;
        gpu.memset32(copy, progs, 0, MAX_ENTRIES as usize * 16)?;
        gpu.memset32(copy, jobs, 0, JOB_RING as usize * DJOB_BYTES / 4)?;
        let mb = region_dev + h.arena_off + args.mailbox_off;
        // %globaltimer counts wall-clock ns; completions carry CLOCK_MONOTONIC.
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let params = Params {
            slots: region_dev
                + region.queue_off(args.cfg.queue)
                + std::mem::size_of::<shm_maps::layout::QueueHeader>() as u64,
            queue_hdr: region_dev + region.queue_off(args.cfg.queue),
            completions: region_dev + h.completions_off,
            arena: region_dev + h.arena_off,
            arena_size: h.arena_size,
            dev_arena,
            dev_arena_size: args.cfg.device_arena,
            ctl: mb,
            state,
            prog_index,
            progs,
            jobs,
            done_log: mb + DONE_OFF,
            fwd_ring: mb + FWD_OFF,
            trace_buf: mb + TRACE_OFF,
            time_offset: monotonic_ns().wrapping_sub(wall),
            max_insns: args.cfg.max_insns,
            scratch,
            tier_table,
            stage,
            queue_mask: h.queue_capacity - 1,
            max_progs: MAX_PROGS,
            completions_total: h.max_clients * h.completions_per_client,
            max_records: h.max_records,
            job_mask: JOB_RING - 1,
            done_mask: DONE_LOG - 1,
            fwd_mask: FWD_RING - 1,
            flags: args.cfg.allow_fault_injection as u32,
            generation: 0,
            lock_pid: std::process::id(),
            stage_warps,
        };
        let device_name = gpu.name();
        let host_atomics = gpu.host_native_atomics();
        let mut w = Worker {
            args,
            region,
            gpu: Arc::new(gpu),
            kstream,
            copy,
            region_dev,
            state,
            prog_index,
            progs,
            code,
            code_alloc: Arena::new(CODE_ARENA, 256),
            dev_arena,
            lib: None,
            stale: Vec::new(),
            stale_cap: std::env::var("BPFTIME_GPU_STALE_CAP")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(STALE_CAP),
            tidy_pauses: 0,
            tidy_max_ns: 0,
            idle_tail: (0, Instant::now()),
            params,
            grid: 0,
            next_entry: 0,
            entry_lap: 0,
            named: HashMap::new(),
            installed: HashMap::new(),
            dev_maps: HashMap::new(),
            tiered: HashMap::new(),
            tier_slots: Vec::new(),
            retired: Vec::new(),
            generation: 0,
            swaps: 0,
            last_pause: 0,
            runtime_ptx,
            sm,
            device_name,
            host_atomics,
        };
        // The first generation: the runtime alone (programs arrive as commands).
        let mut built = build(&w.gpu, &w.runtime_ptx, w.sm, &[], w.params.trace_buf);
        if let Ok(lib) = &built.lib {
            w.params.time_offset = w.calibrate(lib)?;
        }
        if let Ok(lib) = &mut built.lib {
            w.gpu.prepare(lib)?;
        }
        Ok((w, built))
    }

    /// CLOCK_MONOTONIC minus `%globaltimer`, from the fastest of 20 launches of a kernel
    /// that reads the timer (the error is at most half that launch's round trip, a few
    /// µs). Completion times are host-clock values, comparable with the clients'.
    fn calibrate(&self, lib: &Library) -> Result<u64, DeviceError> {
        let out = self.gpu.alloc(8)?;
        let mut best = (u64::MAX, 0u64);
        for _ in 0..20 {
            let t0 = monotonic_ns();
            self.gpu.launch_clock(lib, self.copy, out)?;
            self.gpu.sync(self.copy)?;
            let t1 = monotonic_ns();
            let mut v = [0u8; 8];
            self.gpu.download(self.copy, &mut v, out)?;
            let gpu = u64::from_le_bytes(v);
            if t1 - t0 < best.0 {
                best = (t1 - t0, (t0 / 2 + t1 / 2).wrapping_sub(gpu));
            }
        }
        self.gpu.free(out)?;
        tracing::debug!(round_trip_ns = best.0, "GPU clock calibrated");
        Ok(best.1)
    }

    fn ctl(&self) -> &Ctl {
        let off = self.region.header().arena_off + self.args.mailbox_off;
        // SAFETY: the mailbox block lies in the mapped arena (the service allocated
        // MAILBOX_BYTES there) and starts 64-byte aligned.
        unsafe { &*(self.region.base().as_ptr().add(off as usize) as *const Ctl) }
    }

    fn status(&self) -> CudaStatus {
        let mut programs: Vec<_> = self
            .installed
            .values()
            .map(|p| {
                let t = match p.tier {
                    TIER_NATIVE => Tier::Native,
                    TIER_INTERP => Tier::Interp,
                    _ => Tier::Host,
                };
                (p.id, p.version, t)
            })
            .collect();
        programs.sort();
        CudaStatus {
            device: self.device_name.clone(),
            host_native_atomics: self.host_atomics,
            driver: Gpu::driver_version(),
            generation: self.generation,
            grid: (self.grid, THREADS),
            programs,
            swaps: self.swaps,
            last_swap_pause_ns: self.last_pause,
            worker_pid: std::process::id(),
            torn_reads: self.ctl().torn_reads.load(Ordering::Relaxed),
            jobs_taken: self.ctl().jobs_taken.load(Ordering::Relaxed),
            batches: self.ctl().batches.load(Ordering::Relaxed),
            stale_libs: self.stale.len() as u32,
            tidy_pauses: self.tidy_pauses,
            tidy_max_ns: self.tidy_max_ns,
            ..Default::default()
        }
    }

    /// The device address of each of `p`'s maps' headers, from the map directory, and the
    /// tiers `p` asks for.
    fn bindings(&self, p: &Prog) -> Result<Vec<jit::MapBinding>, String> {
        bindings(
            &self.region,
            self.region_dev,
            &self.dev_maps,
            &self.tiered,
            &p.tiered_maps,
            &p.name,
            &p.program,
        )
    }

    /// Copies each of `p`'s device maps not on the GPU yet from its arena mirror.
    fn place_maps(&mut self, p: &Prog) -> Result<(), String> {
        let h = self.region.header();
        for m in &p.device_maps {
            let q = format!("{}:{m}", p.name);
            if self.dev_maps.contains_key(&q) {
                continue;
            }
            let e = self
                .region
                .find_map(&q)
                .ok_or_else(|| format!("map `{q}` is not in the map directory"))?;
            let mut mirror = self
                .region
                .read_arena(e.data_off, e.data_len)
                .ok_or_else(|| format!("map `{q}` lies outside the arena"))?;
            let _ = h;
            if self.args.cfg.shared_mirrors {
                // Several GPUs share this mirror (it holds whichever was synced last): this
                // GPU's new copy of the per-thread array starts from zero after its header.
                let head = std::mem::size_of::<shm_maps::maps::MapHeader>().min(mirror.len());
                mirror[head..].fill(0);
            }
            let dev = self
                .gpu
                .alloc(e.data_len as usize)
                .map_err(|e| e.to_string())?;
            self.gpu
                .upload(self.copy, dev, &mirror)
                .map_err(|e| e.to_string())?;
            tracing::info!(map = %q, bytes = e.data_len, "map placed in GPU memory");
            self.dev_maps.insert(q, (dev, e.data_len));
        }
        Ok(())
    }

    /// Records `p`'s maps in an emulated tier, each with a zeroed link word in GPU memory
    /// (kept while the map is: code of an older generation may still read it).
    fn place_tiers(&mut self, p: &Prog) -> Result<(), String> {
        for (m, latency_ns, ps_per_byte) in &p.tiered_maps {
            let q = format!("{}:{m}", p.name);
            let tat_addr = match self.tiered.get(&q) {
                Some(t) => t.tat_addr,
                None => {
                    let dev = self.gpu.alloc(64).map_err(|e| e.to_string())?;
                    self.gpu
                        .upload(self.copy, dev, &[0u8; 64])
                        .map_err(|e| e.to_string())?;
                    dev
                }
            };
            tracing::info!(map = %q, latency_ns, ps_per_byte, "map in an emulated tier");
            self.tiered.insert(
                q,
                jit::MapTier {
                    latency_ns: *latency_ns,
                    ps_per_byte: *ps_per_byte,
                    tat_addr,
                },
            );
        }
        Ok(())
    }

    /// Makes the GPU tier table hold `want` (every job buffer now in a tier).
    fn set_tier_slots(&mut self, want: Vec<TierSlot>) -> Result<(), String> {
        for (slot, w) in tier_writes(&self.tier_slots, &want) {
            let at = self.params.tier_table + slot as u64 * 64;
            let r = match w {
                TierWrite::Entry(e) => self.gpu.upload(self.copy, at, as_bytes(&e)),
                TierWrite::Len(len) => self.gpu.upload(self.copy, at + 8, &len.to_le_bytes()),
            };
            if let Err(e) = r {
                // What the table holds is unknown now: entries that match nothing real
                // make the next change clear every slot first.
                self.tier_slots = (1..shm_maps::job_flags::TIER_SLOTS)
                    .map(|s| TierSlot {
                        slot: s as u8,
                        off: u64::MAX,
                        len: 0,
                        client: u32::MAX,
                        latency_ns: 0,
                        ps_per_byte: 0,
                    })
                    .collect();
                return Err(format!("tier table slot {slot}: {e}"));
            }
        }
        tracing::info!(buffers = want.len(), "job buffers in an emulated tier");
        self.tier_slots = want;
        Ok(())
    }

    /// `map_sync`: bytes `[off, off + len)` of device map `map` to or from its mirror.
    fn map_sync(&self, map: &str, to_device: bool, off: u64, len: u64) -> Result<(), String> {
        let &(dev, size) = self
            .dev_maps
            .get(map)
            .ok_or_else(|| format!("map `{map}` is not in GPU memory"))?;
        if off.checked_add(len).is_none_or(|e| e > size) {
            return Err(format!(
                "[{off}, +{len}) lies outside map `{map}` ({size} bytes)"
            ));
        }
        let e = self
            .region
            .find_map(map)
            .ok_or_else(|| format!("map `{map}` is not in the map directory"))?;
        let p = self
            .region
            .arena_ptr(e.data_off + off, len)
            .ok_or_else(|| format!("map `{map}` lies outside the arena"))?;
        // SAFETY: `p..p+len` is inside the mirror's arena allocation (checked); the service
        // holds its control lock for the map while it asks for the copy.
        let bytes = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len as usize) };
        if to_device {
            self.gpu.upload(self.copy, dev + off, bytes)
        } else {
            self.gpu.download(self.copy, bytes, dev + off)
        }
        .map_err(|e| e.to_string())
    }

    /// Publishes the instant tier of `p` (or the host tier if it cannot run on the GPU).
    fn publish_instant(&mut self, mut p: Prog) -> Result<(), String> {
        if p.id >= MAX_PROGS {
            return Err(format!(
                "program id {} is beyond the GPU table; its jobs run on the host",
                p.id
            ));
        }
        let entry = match self.interp_entry(&p) {
            Ok((e, allocs)) => {
                p.allocs = allocs;
                e
            }
            Err(e) => {
                tracing::warn!(id = p.id, name = %p.name, "program stays on the host runner: {e}");
                ProgEntry {
                    version: p.version,
                    tier: TIER_HOST,
                    prog_id: p.id,
                    ..Default::default()
                }
            }
        };
        p.tier = entry.tier;
        self.write_entry(p.id, &entry).map_err(|e| e.to_string())?;
        if let Some(old) = self.installed.insert(p.id, p) {
            self.retired.extend(old.allocs);
        }
        Ok(())
    }

    fn interp_entry(&mut self, p: &Prog) -> Result<(ProgEntry, Vec<u64>), String> {
        let maps = self.bindings(p)?;
        let code = bytecode::relocate(&p.program, &maps).map_err(|e| e.to_string())?;
        let descs: Vec<bytecode::MapDesc> = maps.iter().map(bytecode::map_desc).collect();
        let code_len = (code.len() * 8) as u64;
        let desc = std::mem::size_of::<bytecode::MapDesc>();
        let maps_len = (descs.len() * desc).max(desc) as u64;
        let off = self
            .code_alloc
            .alloc(code_len + maps_len, Owner::Service)
            .map_err(|e| format!("device code arena: {e}"))?;
        let base = self.code + off;
        let mut bytes = slice_bytes(&code).to_vec();
        bytes.extend_from_slice(slice_bytes(&descs));
        self.gpu
            .upload(self.copy, base, &bytes)
            .map_err(|e| e.to_string())?;
        Ok((
            ProgEntry {
                version: p.version,
                tier: TIER_INTERP,
                native_slot: 0,
                prog_id: p.id,
                interp: bytecode::ProgDesc {
                    insns: base,
                    maps: base + code_len,
                    n_insns: code.len() as u32,
                    n_maps: descs.len() as u32,
                    stack_size: p.stack_depth.clamp(8, 512),
                    reserved: 0,
                },
                reserved: [0; 2],
            },
            vec![off],
        ))
    }

    /// The index word of the next entry round robin that no published index names:
    /// entries are immutable while named, and one that was named a moment ago is reused
    /// only a lap later.
    fn fresh_entry(&mut self) -> u32 {
        next_unnamed(&mut self.next_entry, &mut self.entry_lap, &self.named)
    }

    /// Writes `e` into a fresh entry, then publishes its index word for `id` (4 bytes: the
    /// kernel sees the old or the new word, never a mix).
    fn write_entry(&mut self, id: u32, e: &ProgEntry) -> Result<(), DeviceError> {
        let word = self.fresh_entry();
        self.gpu.upload(
            self.copy,
            self.progs + entry_of(word) as u64 * 64,
            as_bytes(e),
        )?;
        self.gpu.upload(
            self.copy,
            self.prog_index + id as u64 * 4,
            &word.to_le_bytes(),
        )?;
        self.named.insert(id, word);
        Ok(())
    }

    fn unpublish(&mut self, id: u32) -> Result<(), DeviceError> {
        if let Some(p) = self.installed.remove(&id) {
            self.retired.extend(p.allocs);
        }
        if id < MAX_PROGS {
            self.gpu.upload(
                self.copy,
                self.prog_index + id as u64 * 4,
                &0u32.to_le_bytes(),
            )?;
            self.named.remove(&id);
        }
        Ok(())
    }

    /// Asks the kernel to drain and waits until it has exited.
    fn stop_kernel(&mut self) -> Result<(), DeviceError> {
        if self.lib.is_none() {
            return Ok(());
        }
        self.ctl().stop.store(1, Ordering::Release);
        loop {
            match self.gpu.query(self.kstream) {
                StreamState::Idle => return Ok(()),
                StreamState::Busy => std::hint::spin_loop(),
                StreamState::Failed(e) => {
                    return Err(DeviceError::Call {
                        call: "cuStreamQuery",
                        code: e,
                        log: String::new(),
                    });
                }
            }
        }
    }

    /// Once the kernel has exited: hands the queue to the service, which takes the jobs
    /// the host can run as the GPU would until [`Worker::close_gap`]
    /// ([`CudaConfig::host_gaps`]). Returns the gap's number, 0 for none (gaps off, or no
    /// kernel was running: at a worker's first launch the service may be busy restarting
    /// it and would never answer).
    fn open_gap(&self, was_running: bool) -> u64 {
        if !self.args.cfg.host_gaps || !was_running {
            return 0;
        }
        let c = self.ctl();
        let g = c.gap_done.load(Ordering::Acquire) + 1;
        c.gap_open.store(g, Ordering::Release);
        g
    }

    /// After a launch: waits until the new kernel is up, at most [`START_WAIT`] (it waits
    /// for the gap's end itself, so its start-up overlaps the host's serving), then closes
    /// the gap. Returns (launch returned → kernel up, the handback), ns.
    fn hand_over(&self, gap: u64) -> (u64, u64) {
        let t = Instant::now();
        while self.ctl().running.load(Ordering::Acquire) == 0 && t.elapsed() < START_WAIT {
            std::hint::spin_loop();
        }
        let up = t.elapsed().as_nanos() as u64;
        (up, self.close_gap(gap))
    }

    /// Hands the queue back to the kernel: asks the service to stop taking jobs and waits
    /// until it has (it finishes the job it is running first, and releases its slot); the
    /// kernel, already launched, then takes jobs. Returns the wait, ns.
    fn close_gap(&self, g: u64) -> u64 {
        if g == 0 {
            return 0;
        }
        let c = self.ctl();
        let t = Instant::now();
        c.gap_close.store(g, Ordering::Release);
        let mut report = Duration::from_secs(1);
        while c.gap_done.load(Ordering::Acquire) < g {
            std::hint::spin_loop();
            if t.elapsed() >= report {
                report += Duration::from_secs(1);
                // The service's own pid (not this process's parent, which may be a
                // wrapper that outlives it).
                let pid = self.args.service_pid;
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    tracing::warn!(
                        "the service went away during a gap: the kernel takes the queue"
                    );
                    c.gap_done.store(g, Ordering::Release);
                    break;
                }
                tracing::warn!(
                    secs = t.elapsed().as_secs(),
                    "the service has not handed the queue back yet (it finishes the job it runs)"
                );
            }
        }
        t.elapsed().as_nanos() as u64
    }

    /// Before a launch: clears the drain and stop flags of `bpft_state` (one 8-byte write)
    /// after the uploads already queued on the copy stream, waits for them, and clears the
    /// host's stop word.
    fn rearm(&self) -> Result<(), DeviceError> {
        let flags = std::mem::offset_of!(State, drain) as u64;
        self.gpu
            .upload_async(self.copy, self.state + flags, &0u64.to_le_bytes())?;
        self.gpu.sync(self.copy)?;
        self.ctl().stop.store(0, Ordering::Release);
        Ok(())
    }

    /// Swaps in a built generation: the old kernel drains and exits, native entries are
    /// written, the new kernel is fetched and launched.
    fn swap(&mut self, built: Built) -> Result<SwapTimes, DeviceError> {
        let mut times = built.times;
        let lib = built.lib?;
        // Off the pause: write the native entries into fresh slots (unpublished, so the
        // running generation cannot see them) and find the grid size.
        let mut publish: Vec<(u32, u32)> = Vec::new();
        swap_step("writing native entries");
        for (id, version, slot) in &built.natives {
            let Some(p) = self.installed.get(id).cloned() else {
                continue;
            };
            if p.version != *version || p.tier == TIER_HOST {
                continue; // replaced while this generation was built: stays interpreted
            }
            let mut entry = match self.interp_entry(&p) {
                Ok((e, allocs)) => {
                    if let Some(x) = self.installed.get_mut(id) {
                        self.retired
                            .extend(std::mem::replace(&mut x.allocs, allocs));
                    }
                    e
                }
                Err(_) => ProgEntry {
                    version: *version,
                    prog_id: *id,
                    ..Default::default()
                },
            };
            entry.tier = TIER_NATIVE;
            entry.native_slot = *slot;
            let word = self.fresh_entry();
            self.gpu.upload(
                self.copy,
                self.progs + entry_of(word) as u64 * 64,
                as_bytes(&entry),
            )?;
            publish.push((*id, word));
        }
        swap_step("sizing the grid");
        if self.grid == 0 {
            let per_sm = self
                .gpu
                .occupancy(&lib, THREADS)?
                .clamp(1, MAX_BLOCKS_PER_SM);
            self.grid = self.gpu.sm_count()? * per_sm;
        }
        // The pause.
        let t0 = Instant::now();
        swap_step("stopping the old kernel");
        let was_running = self.lib.is_some();
        self.stop_kernel()?;
        times.drain_ns = t0.elapsed().as_nanos() as u64;
        let gap = self.open_gap(was_running);
        let t1 = Instant::now();
        swap_step("unloading old libraries and maps");
        // Old libraries can be unloaded only with no kernel running. A swap's pause unloads
        // one only past the cap; the rest go in idle pauses (`tidy`).
        if let Some(old) = self.lib.take() {
            self.stale.push(old);
        }
        if self.stale.len() > self.stale_cap {
            let l = self.stale.remove(0);
            self.gpu.unload(l);
            times.unloaded = 1;
        }
        // Device maps and tier link words no installed program uses any more (no kernel
        // runs now).
        let installed = &self.installed;
        drop_unnamed(
            &self.gpu,
            &mut self.dev_maps,
            installed,
            |p| p.device_maps.clone(),
            |(dev, _)| *dev,
        );
        drop_unnamed(
            &self.gpu,
            &mut self.tiered,
            installed,
            |p| p.tiered_maps.iter().map(|(m, _, _)| m.clone()).collect(),
            |t| t.tat_addr,
        );
        times.unload_ns = t1.elapsed().as_nanos() as u64;
        let t2 = Instant::now();
        swap_step("publishing entries");
        for (id, word) in &publish {
            self.gpu.upload_async(
                self.copy,
                self.prog_index + *id as u64 * 4,
                &word.to_le_bytes(),
            )?;
            self.named.insert(*id, *word);
            if let Some(x) = self.installed.get_mut(id) {
                x.tier = TIER_NATIVE;
            }
        }
        // One wait for the index words above and the cleared flags.
        self.rearm()?;
        times.publish_ns = t2.elapsed().as_nanos() as u64;
        let t3 = Instant::now();
        let mut lib = lib;
        swap_step("fetching the kernel (code upload)");
        self.gpu.prepare(&mut lib)?;
        times.getfunc_ns = t3.elapsed().as_nanos() as u64;
        self.generation += 1;
        self.params.generation = self.generation;
        swap_step("launching");
        self.gpu
            .launch_persistent(&mut lib, self.kstream, self.grid, THREADS, &self.params)?;
        self.lib = Some(lib);
        times.launch_ns = t3.elapsed().as_nanos() as u64;
        times.relaunch_ns = t1.elapsed().as_nanos() as u64;
        times.native = publish.len() as u32;
        let pause = t0.elapsed().as_nanos() as u64;
        swap_step("taking the queue back from the service");
        (times.start_ns, times.handback_ns) = self.hand_over(gap);
        times.host_served = gap != 0;
        times.unserved_ns = if gap != 0 {
            times.drain_ns + times.handback_ns
        } else {
            pause + times.start_ns
        };
        // Bytecode of replaced versions: no kernel ran between the stop and the launch
        // above, and entries that pointed at it are unpublished, so it can be reused.
        for off in std::mem::take(&mut self.retired) {
            let _ = self.code_alloc.free(off, Owner::Service);
        }
        if self.generation > 1 {
            self.swaps += 1;
        }
        self.last_pause = pause;
        tracing::info!(
            generation = self.generation,
            native = times.native,
            pause_us = pause as f64 / 1e3,
            link_ms = times.link_ns as f64 / 1e6,
            "generation launched"
        );
        Ok(times)
    }

    /// While the queue is idle (every job finished, its tail still for [`TIDY_IDLE`]): a short pause
    /// that unloads up to [`TIDY_LIBS`] old libraries and launches the running generation
    /// again, already fetched (no code upload). Its dispatchers resume where they stopped.
    fn tidy(&mut self) -> Result<(), DeviceError> {
        if self.stale.is_empty() || self.lib.is_none() {
            return Ok(());
        }
        let q = self
            .region
            .queue_at(self.args.cfg.queue)
            .expect("checked at start");
        let tail = q.tail();
        // Idle: nothing queued and nothing running (a pause would wait for a running job,
        // and the jobs submitted meanwhile with it).
        if tail != self.idle_tail.0 || q.load() != 0 {
            self.idle_tail = (tail, Instant::now());
            return Ok(());
        }
        if self.idle_tail.1.elapsed() < TIDY_IDLE {
            return Ok(());
        }
        let t0 = Instant::now();
        self.stop_kernel()?;
        let gap = self.open_gap(true);
        let n = self.stale.len().min(TIDY_LIBS);
        for l in self.stale.drain(..n) {
            self.gpu.unload(l);
        }
        self.rearm()?;
        let mut lib = self.lib.take().expect("checked above");
        let launched =
            self.gpu
                .launch_persistent(&mut lib, self.kstream, self.grid, THREADS, &self.params);
        self.lib = Some(lib);
        launched?;
        self.hand_over(gap);
        let ns = t0.elapsed().as_nanos() as u64;
        self.tidy_pauses += 1;
        self.tidy_max_ns = self.tidy_max_ns.max(ns);
        self.idle_tail.1 = Instant::now();
        tracing::debug!(unloaded = n, pause_us = ns as f64 / 1e3, "idle pause");
        Ok(())
    }

    fn snapshot(&self) -> Vec<Prog> {
        self.installed
            .values()
            .filter(|p| p.tier != TIER_HOST)
            .cloned()
            .collect()
    }

    fn check_fault(&self) {
        match self.gpu.query(self.kstream) {
            StreamState::Failed(e) => self.fail(&e),
            StreamState::Idle if self.lib.is_some() => {
                self.fail("the persistent kernel exited unexpectedly")
            }
            _ => {}
        }
    }

    fn handle(
        &mut self,
        cmd: Cmd,
        swap_waiters: &mut SwapWaiters,
        build_now: &mut bool,
    ) -> Option<Msg> {
        let ack = |r: Result<(), String>| Msg::Ack { error: r.err() };
        match cmd {
            Cmd::Program {
                id,
                version,
                name,
                file,
                selector,
                object,
                stack_depth,
                device_maps,
                tiered_maps,
            } => {
                let r = ebpf::elf::load(&object, &file, selector.as_deref())
                    .map_err(|e| e.to_string())
                    .and_then(|program| {
                        let p = Prog {
                            id,
                            version,
                            name,
                            program,
                            stack_depth,
                            allocs: Vec::new(),
                            tier: TIER_INTERP,
                            device_maps,
                            tiered_maps,
                        };
                        self.place_maps(&p)?;
                        self.place_tiers(&p)?;
                        self.publish_instant(p)
                    });
                Some(ack(r))
            }
            Cmd::MapSync {
                map,
                to_device,
                off,
                len,
            } => Some(ack(self.map_sync(&map, to_device, off, len))),
            Cmd::TierBuffers { slots } => Some(ack(self.set_tier_slots(slots))),
            Cmd::Unload { id } => Some(ack(self.unpublish(id).map_err(|e| e.to_string()))),
            Cmd::Swap => {
                swap_waiters.request();
                *build_now = true;
                None
            }
            Cmd::Transfer {
                to_device,
                shm_off,
                dev_off,
                len,
            } => Some(ack(self.transfer(to_device, shm_off, dev_off, len))),
            Cmd::Status => Some(Msg::Status(self.status())),
            Cmd::Stop => None,
            Cmd::Activate => Some(Msg::Ack {
                error: Some("this worker is already active".into()),
            }),
        }
    }

    fn transfer(
        &self,
        to_device: bool,
        shm_off: u64,
        dev_off: u64,
        len: u64,
    ) -> Result<(), String> {
        if dev_off
            .checked_add(len)
            .is_none_or(|e| e > self.args.cfg.device_arena)
        {
            return Err(format!(
                "device buffer [{dev_off}, +{len}) lies outside the {}-byte device arena",
                self.args.cfg.device_arena
            ));
        }
        let p = self
            .region
            .arena_ptr(shm_off, len)
            .ok_or_else(|| format!("shared buffer [{shm_off}, +{len}) lies outside the arena"))?;
        // SAFETY: `p..p+len` is inside the mapped arena (checked); the requesting client
        // owns it and leaves it alone during the request.
        let bytes = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len as usize) };
        if to_device {
            self.gpu.upload(self.copy, self.dev_arena + dev_off, bytes)
        } else {
            self.gpu
                .download(self.copy, bytes, self.dev_arena + dev_off)
        }
        .map_err(|e| e.to_string())
    }

    /// The command loop. Returns the exit status.
    fn serve(&mut self) -> i32 {
        let (tx, rx) = mpsc::channel::<Option<Cmd>>();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<Cmd>(&line) {
                    Ok(c) => {
                        if tx.send(Some(c)).is_err() {
                            return;
                        }
                    }
                    Err(e) => tracing::error!("bad command `{line}`: {e}"),
                }
            }
            let _ = tx.send(None); // the service went away
        });
        let (btx, brx) = mpsc::channel::<Built>();
        let mut building = false;
        let mut dirty_since: Option<u64> = None;
        let mut swap_waiters = SwapWaiters::default();
        let mut build_now = false;
        let mut last_check = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_micros(200)) {
                Ok(None) => {
                    // The service is gone (its stdin closed): nobody will read what the
                    // kernel would finish, and a service adopting the region (`run
                    // --recover`) waits for this process. Leave without draining; the
                    // driver tears the running kernel down with the context. A build still
                    // linking must finish first (exiting under it corrupted the heap).
                    if building {
                        let _ = brx.recv();
                    }
                    tracing::warn!("the service went away: exiting without draining");
                    return 0;
                }
                Ok(Some(Cmd::Stop)) => {
                    // A build still linking must finish before the process tears the
                    // driver down at exit (exiting under it corrupted the heap).
                    if building {
                        let _ = brx.recv();
                    }
                    let r = self.stop_kernel();
                    for l in self.stale.drain(..).chain(self.lib.take()) {
                        self.gpu.unload(l);
                    }
                    self.gpu.unregister(self.region.base().as_ptr());
                    reply(&Msg::Ack {
                        error: r.err().map(|e| e.to_string()),
                    });
                    return 0;
                }
                Ok(Some(cmd)) => {
                    let changes = matches!(cmd, Cmd::Program { .. } | Cmd::Unload { .. });
                    if let Some(m) = self.handle(cmd, &mut swap_waiters, &mut build_now) {
                        reply(&m);
                    }
                    if changes {
                        dirty_since = Some(monotonic_ns());
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return 0,
            }
            if let Ok(built) = brx.try_recv() {
                building = false;
                let r = self.swap(built);
                if let Err(e) = &r {
                    if self.gpu.query(self.kstream) != StreamState::Busy {
                        self.fail(&format!("generation swap failed: {e}"));
                    }
                    tracing::error!("generation build failed: {e}");
                }
                for _ in 0..swap_waiters.build_done() {
                    reply(&match &r {
                        Ok(t) => Msg::Swapped {
                            error: None,
                            times: *t,
                        },
                        Err(e) => Msg::Swapped {
                            error: Some(e.to_string()),
                            times: SwapTimes::default(),
                        },
                    });
                }
            }
            let debounced = dirty_since.is_some_and(|t| {
                self.args.cfg.native
                    && monotonic_ns().saturating_sub(t) >= self.args.cfg.debounce_us * 1000
            });
            if !building && (build_now || debounced) {
                building = true;
                build_now = false;
                swap_waiters.build_started();
                dirty_since = None;
                let (gpu, ptx, sm, progs) = (
                    self.gpu.clone(),
                    self.runtime_ptx.clone(),
                    self.sm,
                    if self.args.cfg.native {
                        self.snapshot()
                    } else {
                        Vec::new()
                    },
                );
                let (region, region_dev, trace, dev_maps, tiered) = (
                    self.region.clone(),
                    self.region_dev,
                    self.params.trace_buf,
                    self.dev_maps.clone(),
                    self.tiered.clone(),
                );
                let btx = btx.clone();
                std::thread::spawn(move || {
                    let progs: Vec<(Prog, Vec<jit::MapBinding>)> = progs
                        .into_iter()
                        .filter_map(|p| {
                            let b = bindings(
                                &region,
                                region_dev,
                                &dev_maps,
                                &tiered,
                                &p.tiered_maps,
                                &p.name,
                                &p.program,
                            )
                            .ok()?;
                            Some((p, b))
                        })
                        .collect();
                    let _ = btx.send(build(&gpu, &ptx, sm, &progs, trace));
                });
            }
            if last_check.elapsed() > Duration::from_millis(1) {
                last_check = Instant::now();
                if !building || self.lib.is_some() {
                    self.check_fault();
                }
                if !building && let Err(e) = self.tidy() {
                    self.fail(&format!("idle pause failed: {e}"));
                }
            }
        }
    }
}

/// The device address of each of `program`'s maps: in GPU memory for device maps (with
/// `.gpu` atomics: the host never touches them while the kernel runs), else in the
/// registered region.
fn bindings(
    region: &ShmRegion,
    region_dev: u64,
    dev_maps: &DeviceMaps,
    tiered: &TieredMaps,
    own_tiers: &[(String, u64, u64)],
    name: &str,
    program: &ebpf::Program,
) -> Result<Vec<jit::MapBinding>, String> {
    let h = region.header();
    program
        .maps
        .iter()
        .map(|def| {
            let qualified = format!("{name}:{}", def.name);
            let e = region
                .find_map(&qualified)
                .ok_or_else(|| format!("map `{qualified}` is not in the map directory"))?;
            let (base, scope) = match dev_maps.get(&qualified) {
                Some(&(dev, _)) => (dev, jit::AtomicScope::Gpu),
                None => (region_dev + h.arena_off + e.data_off, jit::AtomicScope::Sys),
            };
            // `for_def` gives a per-thread array the directory's slot sets and every other
            // map one: a plain array laid out for one set must not be addressed as if it
            // had one per GPU thread (its values would land past its storage).
            let mut b = jit::MapBinding::for_def(def, base, e.threads);
            b.scope = scope;
            // Only the tiers this version asks for: an entry can outlive a version that
            // dropped it until the next swap frees it.
            b.tier = own_tiers
                .iter()
                .any(|(m, _, _)| *m == def.name)
                .then(|| tiered.get(&qualified).copied())
                .flatten();
            Ok(b)
        })
        .collect()
}

/// JIT-compiles `progs`, links them with the runtime and loads the library. Runs on the
/// builder thread while the current generation serves.
fn build(
    gpu: &Gpu,
    runtime_ptx: &str,
    sm: u32,
    progs: &[(Prog, Vec<jit::MapBinding>)],
    trace: u64,
) -> Built {
    let mut times = SwapTimes::default();
    let t = Instant::now();
    let mut funcs = Vec::new();
    let mut natives = Vec::new();
    let mut ptx = Vec::new();
    for (p, maps) in progs {
        let mut prog = p.program.clone();
        prog.name = format!("p{}v{}", p.id, p.version);
        let opts = jit::JitOptions {
            sm,
            maps: maps.clone(),
            trace_buf: trace,
            lock_pid: std::process::id(),
            entry: false,
            chunk_loop: true,
            unaligned: true,
            stack_size: Some(p.stack_depth.clamp(8, 512)),
            ..Default::default()
        };
        match jit::compile(&prog, &opts) {
            Ok(m) => {
                // No chunk loop: the program ends GPU threads (helper 507), which the
                // persistent kernel cannot allow; it stays on the interpreter.
                let Some(f) = source::NativeFuncs::of(&m) else {
                    tracing::info!(
                        id = p.id,
                        "calls helper 507 (exit): stays on the interpreter"
                    );
                    continue;
                };
                natives.push((p.id, p.version, funcs.len() as u32));
                funcs.push(f);
                ptx.push((format!("{}.ptx", prog.name), m.text()));
            }
            Err(e) => tracing::warn!(id = p.id, "JIT failed, stays on the interpreter: {e}"),
        }
    }
    times.jit_ns = t.elapsed().as_nanos() as u64;
    let dispatch = source::dispatch_ptx(&funcs, (8, 0), sm);
    let mut inputs: Vec<(&str, &str)> = vec![
        ("bpftime_runtime.ptx", runtime_ptx),
        ("bpftime_dispatch.ptx", dispatch.as_str()),
    ];
    for (n, t) in &ptx {
        inputs.push((n.as_str(), t.as_str()));
    }
    let t = Instant::now();
    // The kernel's __launch_bounds__(256, 2) allow 128 registers, and bind what it calls
    // (BPFTIME_GPU_MAX_REGS, a tuning knob, for a runtime built with BPFT_MIN_BLOCKS 1).
    let max_regs = std::env::var("BPFTIME_GPU_MAX_REGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128);
    let lib = gpu.link_max_regs(&inputs, max_regs).and_then(|cubin| {
        times.link_ns = t.elapsed().as_nanos() as u64;
        // Debugging and SASS reading: BPFTIME_DUMP_CUBIN=DIR keeps every generation.
        if let Some(dir) = std::env::var_os("BPFTIME_DUMP_CUBIN") {
            let path = std::path::Path::new(&dir).join(format!("generation-{}.cubin", funcs.len()));
            if let Err(e) = std::fs::write(&path, &cubin) {
                tracing::warn!("cannot write {}: {e}", path.display());
            }
        }
        let t = Instant::now();
        let lib = gpu.load_library(&cubin);
        times.load_ns = t.elapsed().as_nanos() as u64;
        lib
    });
    Built {
        lib,
        natives,
        times,
    }
}

/// Who waits for a swap (`Cmd::Swap`, the service's `cuda_swap_now`): a request is answered
/// by the first build that starts after it, so that its generation holds every program
/// loaded before the request. One that arrives while a build runs waits for the next build
/// (answering it with the running one swapped in a snapshot taken before some of its
/// programs were loaded: seen as a flaky row t of `gpu_service`).
#[derive(Debug, Default)]
struct SwapWaiters {
    /// Requests since the running build started (or since the last build, when none runs).
    next: u32,
    /// Requests the running build answers.
    current: u32,
}

impl SwapWaiters {
    fn request(&mut self) {
        self.next += 1;
    }

    /// A build starts: it answers every request so far.
    fn build_started(&mut self) {
        self.current += std::mem::take(&mut self.next);
    }

    /// A build finished: how many requests to answer with it.
    fn build_done(&mut self) -> u32 {
        std::mem::take(&mut self.current)
    }
}

/// The index word of the entry at `*next` or after it, round robin over [`MAX_ENTRIES`],
/// that no id in `named` (id → index word) names; advances `*next` past it, and `*lap` when
/// it wraps.
fn next_unnamed(next: &mut u32, lap: &mut u32, named: &HashMap<u32, u32>) -> u32 {
    let taken: std::collections::HashSet<u32> = named.values().map(|&w| entry_of(w)).collect();
    loop {
        let idx = *next;
        let word = index_word(idx, *lap);
        *next = (*next + 1) % MAX_ENTRIES;
        if *next == 0 {
            *lap = (*lap + 1) % (1 << (32 - INDEX_ENTRY_BITS));
        }
        if !taken.contains(&idx) {
            return word;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebpf::{MapDef, MapKind, MapOrigin};

    /// The structures `layout_header` generates from Rust (`c_mirror!`: the kernel's
    /// parameters, state and tier table here, the mailbox block's in `wire`) have, by the host
    /// C++ compiler's own `offsetof`, the offsets and sizes Rust gives the same fields.
    #[test]
    fn the_generated_structures_match_rust() {
        use super::super::source::layout_header;
        use std::mem::{offset_of, size_of};
        let want = [
            ("bpft_ctl", "done_consumed", offset_of!(Ctl, done_consumed)),
            (
                "bpft_ctl",
                "worker_faulted",
                offset_of!(Ctl, worker_faulted),
            ),
            ("bpft_ctl", "gap_open", offset_of!(Ctl, gap_open)),
            ("bpft_ctl", "gap_done", offset_of!(Ctl, gap_done)),
            ("bpft_ctl", "stop", offset_of!(Ctl, stop)),
            ("bpft_ctl", "head", offset_of!(Ctl, head)),
            ("bpft_ctl", "torn_reads", offset_of!(Ctl, torn_reads)),
            ("bpft_ctl", "running", offset_of!(Ctl, running)),
            ("bpft_ctl", "exited", offset_of!(Ctl, exited)),
            ("bpft_ctl", "batches", offset_of!(Ctl, batches)),
            ("bpft_done", "completion", offset_of!(DoneEntry, completion)),
            ("bpft_done", "status", offset_of!(DoneEntry, status)),
            ("bpft_done", "err_record", offset_of!(DoneEntry, err_record)),
            ("bpft_done", "finalize", offset_of!(DoneEntry, finalize)),
            (
                "bpft_done",
                "records_failed",
                offset_of!(DoneEntry, records_failed),
            ),
            ("bpft_fwd", "desc", offset_of!(FwdEntry, desc)),
            ("bpft_params", "ctl", offset_of!(Params, ctl)),
            ("bpft_params", "tier_table", offset_of!(Params, tier_table)),
            ("bpft_params", "queue_mask", offset_of!(Params, queue_mask)),
            ("bpft_params", "flags", offset_of!(Params, flags)),
            ("bpft_params", "lock_pid", offset_of!(Params, lock_pid)),
            ("bpft_state", "drain", offset_of!(State, drain)),
            ("bpft_state", "stop", offset_of!(State, stop)),
            ("bpft_state", "torn", offset_of!(State, torn)),
            ("bpft_state", "dpos", offset_of!(State, dpos)),
            ("bpft_tier", "client", offset_of!(TierEntry, client)),
            ("bpft_tier", "tat", offset_of!(TierEntry, tat)),
            ("bpft_tier", "reserved", offset_of!(TierEntry, reserved)),
        ];
        let sizes = [
            ("bpft_ctl", size_of::<Ctl>()),
            ("bpft_done", size_of::<DoneEntry>()),
            ("bpft_fwd", size_of::<FwdEntry>()),
            ("bpft_params", size_of::<Params>()),
            ("bpft_state", size_of::<State>()),
            ("bpft_tier", size_of::<TierEntry>()),
        ];
        let mut prog = String::from("#include <cstddef>\n#include <cstdio>\n");
        prog.push_str(&layout_header());
        prog.push_str("int main() {\n");
        for (st, f, _) in want {
            prog.push_str(&format!(
                "    printf(\"%zu\\n\", offsetof(struct {st}, {f}));\n"
            ));
        }
        for (st, _) in sizes {
            prog.push_str(&format!("    printf(\"%zu\\n\", sizeof(struct {st}));\n"));
        }
        prog.push_str("    return 0;\n}\n");
        let scratch = bpftime_tests::scratch_dir("layout");
        let (src, exe) = (scratch.path().join("p.cpp"), scratch.path().join("p"));
        std::fs::write(&src, prog).unwrap();
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let out = std::process::Command::new(&cxx)
            .args(["-std=c++17", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .expect("running the C++ compiler ($CXX or c++)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = std::process::Command::new(&exe).output().unwrap();
        let got: Vec<usize> = String::from_utf8_lossy(&run.stdout)
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        let expect: Vec<usize> = want
            .iter()
            .map(|w| w.2)
            .chain(sizes.iter().map(|s| s.1))
            .collect();
        assert_eq!(got, expect, "{want:?} {sizes:?}");
        // The runtime reads the stop word alone on the block's second line.
        assert_eq!(offset_of!(Ctl, stop), 64);
    }

    /// Entries are immutable while an id names them: after a lap of publications by other
    /// programs, the round robin skips the entries still named (the kernel may be reading
    /// them) and wraps.
    #[test]
    fn a_named_entry_is_never_reused() {
        let mut named = HashMap::from([
            (7u32, index_word(2, 0)),
            (9, index_word(MAX_ENTRIES - 1, 0)),
        ]);
        let (mut next, mut lap) = (0, 0);
        let mut fresh = |next: &mut u32, named: &HashMap<u32, u32>| {
            entry_of(next_unnamed(next, &mut lap, named))
        };
        let got: Vec<u32> = (0..3).map(|_| fresh(&mut next, &named)).collect();
        assert_eq!(got, [0, 1, 3]);
        next = MAX_ENTRIES - 2;
        assert_eq!(fresh(&mut next, &named), MAX_ENTRIES - 2);
        // Wraps past the named last entry and the named entry 2.
        assert_eq!(fresh(&mut next, &named), 0);
        named.insert(8, index_word(1, 1));
        assert_eq!(fresh(&mut next, &named), 3);
        assert_eq!(next, 4);
    }

    /// A swap requested while a build runs is answered by the next build, not that one;
    /// one requested before a build starts is answered by it.
    #[test]
    fn a_swap_is_answered_by_a_build_that_started_after_it() {
        let mut w = SwapWaiters::default();
        w.request();
        w.build_started();
        w.request(); // while the first build runs
        assert_eq!(
            w.build_done(),
            1,
            "the first build answers the first request only"
        );
        w.build_started();
        assert_eq!(w.build_done(), 1, "the second build answers the second");
        assert_eq!(w.build_done(), 0);
        w.build_started();
        assert_eq!(w.build_done(), 0, "a build nobody asked for answers nobody");
    }

    /// An index word names one write of one entry: the same entry in the next lap gets
    /// another word (the dispatcher's entry cache is keyed by it), and every word gives its
    /// entry back and is never 0 (no program).
    #[test]
    fn index_words_tell_laps_apart() {
        let named = HashMap::new();
        let (mut next, mut lap) = (MAX_ENTRIES - 1, 0);
        let last = next_unnamed(&mut next, &mut lap, &named);
        assert_eq!((entry_of(last), lap, next), (MAX_ENTRIES - 1, 1, 0));
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2 * MAX_ENTRIES {
            let w = next_unnamed(&mut next, &mut lap, &named);
            assert_ne!(w, 0);
            assert!(entry_of(w) < MAX_ENTRIES);
            assert!(seen.insert(w), "word {w:#x} handed out twice");
        }
        assert_eq!(lap, 3);
        // The lap wraps in its 15 bits.
        let (mut next, mut lap) = (MAX_ENTRIES - 1, (1 << (32 - INDEX_ENTRY_BITS)) - 1);
        let w = next_unnamed(&mut next, &mut lap, &named);
        assert_eq!((entry_of(w), lap), (MAX_ENTRIES - 1, 0));
    }

    /// The tier table changes slot by slot: a slot whose buffer goes is cleared (its `len`
    /// first), a new one is written with `len` 0 and then given its `len`, an unchanged
    /// one is not touched (its link word keeps counting).
    #[test]
    fn tier_table_writes_clear_before_they_fill() {
        let t = |slot: u8, off: u64, latency_ns: u64| TierSlot {
            slot,
            off,
            len: 4096,
            client: 3,
            latency_ns,
            ps_per_byte: 125,
        };
        let entry = |x: TierSlot| {
            TierWrite::Entry(TierEntry {
                off: x.off,
                len: 0,
                client: x.client,
                pad: 0,
                latency_ns: x.latency_ns,
                ps_per_byte: x.ps_per_byte,
                tat: 0,
                reserved: [0; 2],
            })
        };
        assert_eq!(
            tier_writes(&[], &[t(1, 0, 100)]),
            vec![(1, entry(t(1, 0, 100))), (1, TierWrite::Len(4096))]
        );
        assert!(tier_writes(&[t(1, 0, 100)], &[t(1, 0, 100)]).is_empty());
        assert_eq!(
            tier_writes(
                &[t(1, 0, 100), t(2, 8192, 100)],
                &[t(2, 8192, 100), t(1, 0, 400)]
            ),
            vec![
                (1, TierWrite::Len(0)),
                (1, entry(t(1, 0, 400))),
                (1, TierWrite::Len(4096))
            ]
        );
        assert_eq!(
            tier_writes(&[t(5, 0, 100)], &[]),
            vec![(5, TierWrite::Len(0))]
        );
    }
    use shm_maps::{DirEntry, OnStale, RegionConfig};

    /// Found on the H200 (issue 18's recovery check): the worker bound a plain array with
    /// the directory's slot-set count (one per GPU thread), so the GPU addressed its
    /// values 8 × 67,584 bytes past their place: the counter lived outside the map's
    /// storage and `map dump` read zeros. Every value address must lie inside the storage.
    #[test]
    fn array_bindings_address_inside_their_storage() {
        let name = format!("bpftime-bind-{}", std::process::id());
        let r = ShmRegion::create(&name, &RegionConfig::default(), 0o600, OnStale::Replace)
            .expect("region");
        let _ = r.unlink();
        let def = |n: &str, kind| MapDef {
            name: n.into(),
            kind,
            key_size: 4,
            value_size: 8,
            max_entries: 4,
            flags: 0,
            origin: MapOrigin::Manual,
            init: None,
        };
        let defs = [
            def("plain", MapKind::Array),
            def("per", MapKind::PerThreadArray),
        ];
        let threads = 1024;
        let mut off = 0;
        for d in &defs {
            let len = shm_maps::maps::layout_size(d, threads).unwrap();
            r.register_map(&DirEntry {
                name: format!("p:{}", d.name),
                kind: d.kind.id(),
                key_size: 4,
                value_size: 8,
                max_entries: 4,
                flags: 0,
                data_off: off,
                data_len: len,
                // What older services wrote for every map: the worker count.
                threads,
            });
            off += len.div_ceil(4096) * 4096;
        }
        let prog = ebpf::Program {
            maps: defs.to_vec(),
            ..ebpf::Program::from_insns("p", vec![])
        };
        let region_dev = 1 << 40;
        // `plain` in an emulated tier: its binding carries it; `per` stays local.
        let tier = jit::MapTier {
            latency_ns: 170,
            ps_per_byte: 38,
            tat_addr: 0x9000_0040,
        };
        let tiered: TieredMaps = [("p:plain".to_string(), tier)].into_iter().collect();
        let own = [("plain".to_string(), 170, 38)];
        let b = bindings(
            &r,
            region_dev,
            &DeviceMaps::default(),
            &tiered,
            &own,
            "p",
            &prog,
        )
        .unwrap();
        assert_eq!(b[0].tier, Some(tier));
        assert_eq!(b[1].tier, None);
        // A version that no longer asks for the tier does not get the entry left behind.
        let b2 = bindings(
            &r,
            region_dev,
            &DeviceMaps::default(),
            &tiered,
            &[],
            "p",
            &prog,
        )
        .unwrap();
        assert_eq!(b2[0].tier, None);
        assert_eq!(bytecode::map_desc(&b[0]).tier_tat, 0x9000_0040);
        let arena = region_dev + r.header().arena_off;
        for (bind, d) in b.iter().zip(&defs) {
            let e = r.find_map(&format!("p:{}", d.name)).unwrap();
            let (lo, hi) = (arena + e.data_off, arena + e.data_off + e.data_len);
            let sets = if d.kind == MapKind::PerThreadArray {
                threads as u64
            } else {
                1
            };
            for t in 0..sets {
                for i in 0..4 {
                    let a = jit::prelude::array_value_addr(bind, t, i);
                    assert!(
                        lo <= a && a + 8 <= hi,
                        "{}: value {t}/{i} at {a:#x} outside [{lo:#x}, {hi:#x})",
                        d.name
                    );
                }
            }
        }
        assert_eq!(b[0].threads, 1);
        assert_eq!(b[1].threads, threads);
    }
}
