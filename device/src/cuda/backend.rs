//! The CUDA backend: a persistent kernel serving the region's queue, generations of native
//! code, the instant tier, host mailboxes and fault recovery.
//!
//! ```text
//!  control plane ── sync_program(id) ──▶ instant tier: relocated bytecode → device, publish
//!                                        index word (the running kernel sees it next job)
//!                   └─ marks dirty ──▶ builder thread: JIT every program → link with the
//!                                      runtime → cuLibraryLoadData (no blocking) → swap
//!  swap:  ctl.stop=1 → kernel drains ring, stores queue head, exits → write native entries
//!         → cuKernelGetFunction + launch (the only blocking steps, with nothing running)
//!  mailbox thread: done log (counters, error messages), forward ring (CPU job runner),
//!                  trace ring (log lines)
//!  fault: stream error → finish jobs the GPU had taken with DEVICE_FAULT → reset context →
//!         rebuild everything → relaunch from the queue head
//! ```
//!
//! Which state lives where (all handles belong to one [`Context`], replaced on recovery):
//!
//! | what                              | memory             | written by              |
//! |-----------------------------------|--------------------|-------------------------|
//! | queue, completions, arena, maps   | shm region (registered) | clients, GPU, host |
//! | `bpft_ctl`, done log, forward ring, trace ring | pinned host | host / GPU       |
//! | `bpft_state`, job ring, program table, bytecode, device buffers | device | GPU / host copies |

use super::bytecode;
use super::driver::{Gpu, Library, Stream, StreamState};
use super::source;
use super::DeviceError;
use crate::cpu::Control;
use crate::job::JobRunner;
use crate::programs::{Installed, ProgramTable};
use crate::stats::WorkerStats;
use ebpf::interp::{Env, TraceSink};
use shm_maps::arena::{Arena, Owner};
use shm_maps::layout::{completion_state, status};
use shm_maps::region::monotonic_ns;
use shm_maps::{CompletionData, JobDesc, ShmRegion};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Program table slots (program ids at or above go to the host runner).
pub const MAX_PROGS: u32 = 1 << 16;
/// Program entries (immutable once published; reused round robin).
pub const MAX_ENTRIES: u32 = 1 << 16;
/// Device job ring slots.
pub const JOB_RING: u32 = 256;
/// Done log entries.
pub const DONE_LOG: u32 = 1 << 16;
/// Forward ring entries.
pub const FWD_RING: u32 = 1 << 12;
/// Trace ring records.
pub const TRACE_RING: u32 = 1 << 12;
/// Threads per block of the persistent kernel.
pub const THREADS: u32 = 256;
/// Device memory for bytecode and map descriptors of instant-tier programs.
pub const CODE_ARENA: u64 = 64 << 20;

const TIER_INTERP: u32 = 1;
const TIER_NATIVE: u32 = 2;
const TIER_HOST: u32 = 3;

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

/// `struct bpft_params` of the runtime.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct Params {
    slots: u64,
    queue_hdr: u64,
    completions: u64,
    arena: u64,
    arena_size: u64,
    dev_arena: u64,
    dev_arena_size: u64,
    ctl: u64,
    state: u64,
    prog_index: u64,
    progs: u64,
    jobs: u64,
    done_log: u64,
    fwd_ring: u64,
    trace_buf: u64,
    time_offset: u64,
    max_insns: u64,
    queue_mask: u32,
    max_progs: u32,
    completions_total: u32,
    max_records: u32,
    job_mask: u32,
    done_mask: u32,
    fwd_mask: u32,
    flags: u32,
    generation: u32,
    lock_pid: u32,
}

/// `struct bpft_ctl` (pinned host memory).
#[repr(C)]
struct Ctl {
    stop: AtomicU32,
    _pad0: u32,
    done_consumed: AtomicU64,
    fwd_consumed: AtomicU64,
    _pad1: [u64; 13],
    head: AtomicU64,
    jobs_taken: AtomicU64,
    polls: AtomicU64,
    running: AtomicU32,
    exited: AtomicU32,
    _pad2: [u64; 12],
}

/// `struct bpft_done`.
#[repr(C)]
struct DoneEntry {
    seq: AtomicU64,
    completion: u32,
    client: u32,
    status: i32,
    err_pc: u32,
    err_record: u64,
    err_code: u32,
    finalize: u32,
    run_ns: u64,
}

/// `struct bpft_fwd`.
#[repr(C)]
struct FwdEntry {
    seq: AtomicU64,
    desc: JobDesc,
}

const STATE_BYTES: usize = 128;
const DJOB_BYTES: usize = 8 + 8 + 120 + 64 + 8 * 12 + 16;

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<ProgEntry>() == 64);
    assert!(offset_of!(ProgEntry, interp) == 16);
    assert!(size_of::<Params>() == 17 * 8 + 10 * 4);
    assert!(size_of::<Ctl>() == 256);
    assert!(offset_of!(Ctl, head) == 128);
    assert!(offset_of!(Ctl, running) == 152);
    assert!(size_of::<DoneEntry>() == 48);
    assert!(size_of::<FwdEntry>() == 128);
};

/// Settings of the CUDA backend.
#[derive(Clone, Debug)]
pub struct CudaConfig {
    /// Device ordinal.
    pub device: i32,
    /// Interpreter instruction budget per record.
    pub max_insns: u64,
    /// Bytes of device memory for device-resident job buffers.
    pub device_arena: u64,
    /// Honour `job_flags::INJECT_FAULT` (tests of fault recovery).
    pub allow_fault_injection: bool,
    /// Wait this long after a program change before building a generation (batches
    /// bursts of `replace`).
    pub debounce: Duration,
    /// Build native generations at all (off: every program stays on the instant tier).
    pub native: bool,
}

impl Default for CudaConfig {
    fn default() -> Self {
        CudaConfig {
            device: 0,
            max_insns: 1_000_000,
            device_arena: 256 << 20,
            allow_fault_injection: false,
            debounce: Duration::from_millis(2),
            native: true,
        }
    }
}

/// Tier of a program on the GPU, for `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// The device interpreter (right after load).
    Interp,
    /// JIT-compiled code of the current generation.
    Native,
    /// Not runnable on the GPU: jobs go to the host runner.
    Host,
}

/// What `status` shows about the GPU.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CudaStatus {
    /// Device name.
    pub device: String,
    /// Driver version.
    pub driver: String,
    /// Current generation (1 = the first launch).
    pub generation: u32,
    /// Grid of the persistent kernel (blocks × threads).
    pub grid: (u32, u32),
    /// Per program id: (version, tier).
    pub programs: Vec<(u32, u32, Tier)>,
    /// Native generation swaps done.
    pub swaps: u64,
    /// Pause of the last swap, ns (stop requested → new kernel launched).
    pub last_swap_pause_ns: u64,
    /// Contexts recreated after a fault.
    pub recoveries: u64,
    /// Jobs completed with `DEVICE_FAULT`.
    pub fault_jobs: u64,
}

/// Times of the last generation build, for benchmarks.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct SwapTimes {
    /// eBPF → PTX for all programs, ns.
    pub jit_ns: u64,
    /// Driver link, ns.
    pub link_ns: u64,
    /// cuLibraryLoadData, ns.
    pub load_ns: u64,
    /// Stop → old kernel exited, ns.
    pub drain_ns: u64,
    /// Old exited → new launched, ns (table writes, cuKernelGetFunction, launch).
    pub relaunch_ns: u64,
}

/// One CUDA context's worth of state.
struct Context {
    gpu: Gpu,
    kstream: Stream,
    copy: Stream,
    region_host: *mut u8,
    region_dev: u64,
    ctl: *mut Ctl,
    done: *mut DoneEntry,
    fwd: *mut FwdEntry,
    trace: *mut u8,
    trace_dev: u64,
    state: u64,
    prog_index: u64,
    progs: u64,
    code: u64,
    code_alloc: Arena,
    dev_arena: u64,
    lib: Option<Library>,
    params: Params,
    grid: u32,
    next_entry: u32,
    /// prog id → (version, tier, code allocations).
    installed: HashMap<u32, (u32, u32, Vec<u64>)>,
    /// Code allocations of replaced versions, freed at the next swap.
    retired: Vec<u64>,
    native_slots: HashMap<u32, (u32, u32)>,
    generation: u32,
}

// SAFETY: the raw pointers are pinned host memory owned by this context and only
// dereferenced as atomics or by the thread holding the context lock.
unsafe impl Send for Context {}

struct Shared {
    region: Arc<ShmRegion>,
    table: Arc<ProgramTable>,
    cfg: CudaConfig,
    sm: u32,
    runtime_ptx: String,
    ctx: Mutex<Option<Context>>,
    /// Held by the mailbox thread while it touches the pinned rings; recovery takes it.
    mailbox: Mutex<()>,
    dirty: AtomicBool,
    changed_at: AtomicU64,
    control: Arc<Control>,
    stats: Arc<WorkerStats>,
    host_stats: Arc<WorkerStats>,
    swaps: AtomicU64,
    last_pause: AtomicU64,
    recoveries: AtomicU64,
    fault_jobs: AtomicU64,
    generation: AtomicU32,
    last_times: Mutex<SwapTimes>,
    device_name: String,
    quit: AtomicBool,
}

/// A running CUDA backend.
pub struct CudaBackend {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    /// `[GPU completions, host runner]` statistics, for `status`.
    pub stats: Vec<Arc<WorkerStats>>,
    /// Stop and cancel flags.
    pub control: Arc<Control>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn as_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: `T` is a `#[repr(C)]` plain-data struct without padding holes that matter
    // (the device reads exactly these bytes).
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

fn slice_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: as `as_bytes`, for a slice.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

impl CudaBackend {
    /// Opens device `cfg.device`, compiles the runtime, registers the region and launches
    /// the first generation. Errors leave nothing running.
    pub fn start(
        region: Arc<ShmRegion>,
        table: Arc<ProgramTable>,
        cfg: CudaConfig,
    ) -> Result<CudaBackend, DeviceError> {
        let gpu = Gpu::open(cfg.device)?;
        let sm = super::device_sm(cfg.device)?;
        let device_name = gpu.name();
        let t = Instant::now();
        let runtime_ptx = source::compile_runtime(sm)?;
        tracing::info!(
            device = %device_name,
            sm,
            ms = t.elapsed().as_secs_f64() * 1e3,
            "compiled the persistent runtime with NVRTC"
        );
        let control = Arc::new(Control::default());
        let shared = Arc::new(Shared {
            region,
            table,
            cfg,
            sm,
            runtime_ptx,
            ctx: Mutex::new(None),
            mailbox: Mutex::new(()),
            dirty: AtomicBool::new(false),
            changed_at: AtomicU64::new(0),
            control: control.clone(),
            stats: Arc::new(WorkerStats::default()),
            host_stats: Arc::new(WorkerStats::default()),
            swaps: AtomicU64::new(0),
            last_pause: AtomicU64::new(0),
            recoveries: AtomicU64::new(0),
            fault_jobs: AtomicU64::new(0),
            generation: AtomicU32::new(0),
            last_times: Mutex::new(SwapTimes::default()),
            device_name,
            quit: AtomicBool::new(false),
        });
        let ctx = shared.new_context(gpu)?;
        *lock(&shared.ctx) = Some(ctx);
        shared.build_and_swap(true)?;
        let mut threads = Vec::new();
        for (name, f) in [
            ("bpftime-gpu-mailbox", Shared::mailbox_loop as fn(&Shared)),
            ("bpftime-gpu-builder", Shared::builder_loop as fn(&Shared)),
        ] {
            let s = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || f(&s))
                    .map_err(|e| DeviceError::Call {
                        call: "thread spawn",
                        code: e.to_string(),
                        log: String::new(),
                    })?,
            );
        }
        Ok(CudaBackend {
            stats: vec![shared.stats.clone(), shared.host_stats.clone()],
            control,
            shared,
            threads,
        })
    }

    /// Value sets the service should give per-thread arrays: one per GPU thread.
    pub fn value_sets(&self) -> u32 {
        let c = lock(&self.shared.ctx);
        c.as_ref().map(|c| c.grid * THREADS).unwrap_or(1)
    }

    /// Makes the GPU follow the program table for `id` (after install, replace, unload):
    /// the instant tier at once, native code at the next generation.
    pub fn sync_program(&self, id: u32) {
        let t = Instant::now();
        let r = {
            let mut c = lock(&self.shared.ctx);
            match c.as_mut() {
                Some(ctx) => self.shared.publish_instant(ctx, id),
                None => Ok(()),
            }
        };
        if let Err(e) = r {
            tracing::error!(id, "cannot publish the program to the GPU: {e}");
        }
        tracing::debug!(id, us = t.elapsed().as_secs_f64() * 1e6, "instant tier published");
        self.shared
            .changed_at
            .store(monotonic_ns(), Ordering::Relaxed);
        self.shared.dirty.store(true, Ordering::Release);
    }

    /// Builds and swaps a generation now (tests, benchmarks); returns the timings.
    pub fn swap_now(&self) -> Result<SwapTimes, DeviceError> {
        self.shared.build_and_swap(false)?;
        Ok(*lock(&self.shared.last_times))
    }

    /// Device buffer arena: (device address, size).
    pub fn device_arena(&self) -> (u64, u64) {
        let c = lock(&self.shared.ctx);
        c.as_ref()
            .map(|c| (c.dev_arena, self.shared.cfg.device_arena))
            .unwrap_or((0, 0))
    }

    /// Copies `len` bytes from the shared arena at `src_off` into the device arena at
    /// `dst_off` (or back with `to_device = false`), on the copy stream.
    pub fn transfer(
        &self,
        to_device: bool,
        shm_off: u64,
        dev_off: u64,
        len: u64,
    ) -> Result<(), String> {
        let c = lock(&self.shared.ctx);
        let ctx = c.as_ref().ok_or("the GPU is being recovered; try again")?;
        if dev_off.checked_add(len).is_none_or(|e| e > self.shared.cfg.device_arena) {
            return Err(format!(
                "device buffer [{dev_off}, +{len}) lies outside the {}-byte device arena",
                self.shared.cfg.device_arena
            ));
        }
        let Some(p) = self.shared.region.arena_ptr(shm_off, len) else {
            return Err(format!(
                "shared buffer [{shm_off}, +{len}) lies outside the arena"
            ));
        };
        // SAFETY: `p..p+len` is inside the mapped arena (checked); the client owns it
        // and does not write it during the transfer (the request protocol).
        let bytes = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len as usize) };
        let r = if to_device {
            ctx.gpu.upload(ctx.copy, ctx.dev_arena + dev_off, bytes)
        } else {
            ctx.gpu.download(ctx.copy, bytes, ctx.dev_arena + dev_off)
        };
        r.map_err(|e| e.to_string())
    }

    /// GPU facts for `status`.
    pub fn status(&self) -> CudaStatus {
        let s = &self.shared;
        let c = lock(&s.ctx);
        let mut programs: Vec<(u32, u32, Tier)> = c
            .as_ref()
            .map(|c| {
                c.installed
                    .iter()
                    .map(|(id, (v, t, _))| {
                        let tier = match *t {
                            TIER_NATIVE => Tier::Native,
                            TIER_INTERP => Tier::Interp,
                            _ => Tier::Host,
                        };
                        (*id, *v, tier)
                    })
                    .collect()
            })
            .unwrap_or_default();
        programs.sort();
        CudaStatus {
            device: s.device_name.clone(),
            driver: Gpu::driver_version(),
            generation: s.generation.load(Ordering::Relaxed),
            grid: (c.as_ref().map(|c| c.grid).unwrap_or(0), THREADS),
            programs,
            swaps: s.swaps.load(Ordering::Relaxed),
            last_swap_pause_ns: s.last_pause.load(Ordering::Relaxed),
            recoveries: s.recoveries.load(Ordering::Relaxed),
            fault_jobs: s.fault_jobs.load(Ordering::Relaxed),
        }
    }

    /// Stops the kernel once the queue is drained (or at once with `now`, cancelling
    /// queued jobs on the host), then the threads.
    pub fn stop(self, region: &ShmRegion, now: bool) {
        let s = &self.shared;
        if now {
            self.control.cancel.store(true, Ordering::Relaxed);
        } else {
            let t = Instant::now();
            while !region.queue().is_empty() && t.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        {
            let mut c = lock(&s.ctx);
            if let Some(ctx) = c.as_mut() {
                let _ = s.stop_kernel(ctx);
            }
        }
        s.quit.store(true, Ordering::Release);
        for h in self.threads {
            let _ = h.join();
        }
        // Whatever is left (stop --now): the host runner cancels it.
        s.drain_on_host();
        if let Some(ctx) = lock(&s.ctx).take() {
            ctx.gpu.unregister(ctx.region_host);
        }
        tracing::info!("CUDA backend stopped");
    }
}

impl Shared {
    /// Allocates everything one context needs and registers the region.
    fn new_context(&self, gpu: Gpu) -> Result<Context, DeviceError> {
        let region = &self.region;
        let h = region.header();
        let region_host = region.base().as_ptr();
        let region_dev = gpu.register(region_host, region.len())?;
        let kstream = gpu.stream()?;
        let copy = gpu.stream()?;
        let (ctl_h, ctl_dev) = gpu.host_alloc(std::mem::size_of::<Ctl>())?;
        let (done_h, done_dev) =
            gpu.host_alloc(DONE_LOG as usize * std::mem::size_of::<DoneEntry>())?;
        let (fwd_h, fwd_dev) = gpu.host_alloc(FWD_RING as usize * std::mem::size_of::<FwdEntry>())?;
        let (trace_h, trace_dev) = gpu.host_alloc(64 + TRACE_RING as usize * 64)?;
        // SAFETY: trace_h is a fresh 64 + 64·n byte pinned allocation; capacity at +8.
        unsafe { (trace_h.add(8) as *mut u64).write_volatile(TRACE_RING as u64) };
        let state = gpu.alloc(STATE_BYTES)?;
        let prog_index = gpu.alloc(MAX_PROGS as usize * 4)?;
        let progs = gpu.alloc(MAX_ENTRIES as usize * 64)?;
        let jobs = gpu.alloc(JOB_RING as usize * DJOB_BYTES)?;
        let code = gpu.alloc(CODE_ARENA as usize)?;
        let dev_arena = gpu.alloc(self.cfg.device_arena as usize)?;
        gpu.memset32(copy, state, 0, STATE_BYTES / 4)?;
        gpu.memset32(copy, prog_index, 0, MAX_PROGS as usize)?;
        gpu.memset32(copy, progs, 0, MAX_ENTRIES as usize * 16)?;
        gpu.memset32(copy, jobs, 0, JOB_RING as usize * DJOB_BYTES / 4)?;
        // Host CLOCK_MONOTONIC minus %globaltimer, sampled around a tiny kernel is overkill:
        // the kernel adds this offset; %globaltimer is wall-clock ns on current drivers.
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let time_offset = monotonic_ns().wrapping_sub(wall);
        let params = Params {
            slots: region_dev + h.queue_off + std::mem::size_of::<shm_maps::layout::QueueHeader>() as u64,
            queue_hdr: region_dev + h.queue_off,
            completions: region_dev + h.completions_off,
            arena: region_dev + h.arena_off,
            arena_size: h.arena_size,
            dev_arena,
            dev_arena_size: self.cfg.device_arena,
            ctl: ctl_dev,
            state,
            prog_index,
            progs,
            jobs,
            done_log: done_dev,
            fwd_ring: fwd_dev,
            trace_buf: trace_dev,
            time_offset,
            max_insns: self.cfg.max_insns,
            queue_mask: h.queue_capacity - 1,
            max_progs: MAX_PROGS,
            completions_total: h.max_clients * h.completions_per_client,
            max_records: h.max_records,
            job_mask: JOB_RING - 1,
            done_mask: DONE_LOG - 1,
            fwd_mask: FWD_RING - 1,
            flags: self.cfg.allow_fault_injection as u32,
            generation: 0,
            lock_pid: std::process::id(),
        };
        Ok(Context {
            gpu,
            kstream,
            copy,
            region_host,
            region_dev,
            ctl: ctl_h as *mut Ctl,
            done: done_h as *mut DoneEntry,
            fwd: fwd_h as *mut FwdEntry,
            trace: trace_h,
            trace_dev,
            state,
            prog_index,
            progs,
            code,
            code_alloc: Arena::new(CODE_ARENA, 256),
            dev_arena,
            lib: None,
            params,
            grid: 0,
            next_entry: 0,
            installed: HashMap::new(),
            retired: Vec::new(),
            native_slots: HashMap::new(),
            generation: 0,
        })
    }

    fn ctl<'a>(&self, ctx: &'a Context) -> &'a Ctl {
        // SAFETY: `ctl` is this context's pinned allocation, alive as long as the context.
        unsafe { &*ctx.ctl }
    }

    /// The device address of the map header of `p.maps[i]` (host shm maps: the region is
    /// registered, so the device address is the region's device base plus the offset).
    fn bindings(&self, ctx: &Context, p: &Installed) -> Result<Vec<jit::MapBinding>, String> {
        let h = self.region.header();
        p.program
            .maps
            .iter()
            .map(|def| {
                let name = format!("{}:{}", p.name, def.name);
                let e = self
                    .region
                    .find_map(&name)
                    .ok_or_else(|| format!("map `{name}` is not in the map directory"))?;
                let mut b =
                    jit::MapBinding::for_def(def, ctx.region_dev + h.arena_off + e.data_off, e.threads);
                b.threads = e.threads.max(1);
                Ok(b)
            })
            .collect()
    }

    /// Writes an entry for the current version of `id` and publishes it.
    fn publish_instant(&self, ctx: &mut Context, id: u32) -> Result<(), String> {
        let Some(p) = self.table.get(id) else {
            // Unloaded.
            if id < MAX_PROGS {
                ctx.gpu
                    .upload(ctx.copy, ctx.prog_index + id as u64 * 4, &0u32.to_le_bytes())
                    .map_err(|e| e.to_string())?;
            }
            if let Some((_, _, allocs)) = ctx.installed.remove(&id) {
                ctx.retired.extend(allocs);
            }
            return Ok(());
        };
        if id >= MAX_PROGS {
            return Err(format!("program id {id} is beyond the GPU table; jobs run on the host"));
        }
        let (entry, allocs) = match self.interp_entry(ctx, &p) {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(id, name = %p.name, "program stays on the host runner: {e}");
                (
                    ProgEntry {
                        version: p.version,
                        tier: TIER_HOST,
                        prog_id: id,
                        ..Default::default()
                    },
                    Vec::new(),
                )
            }
        };
        self.write_entry(ctx, id, &entry).map_err(|e| e.to_string())?;
        if let Some((_, _, old)) = ctx.installed.insert(id, (p.version, entry.tier, allocs)) {
            ctx.retired.extend(old);
        }
        Ok(())
    }

    fn interp_entry(&self, ctx: &mut Context, p: &Installed) -> Result<(ProgEntry, Vec<u64>), String> {
        let maps = self.bindings(ctx, p)?;
        let code = bytecode::relocate(&p.program, &maps).map_err(|e| e.to_string())?;
        let descs: Vec<bytecode::MapDesc> = maps.iter().map(bytecode::map_desc).collect();
        let code_len = (code.len() * 8) as u64;
        let maps_len = (descs.len() * 32).max(32) as u64;
        let off = ctx
            .code_alloc
            .alloc(code_len + maps_len, Owner::Service)
            .map_err(|e| format!("device code arena: {e}"))?;
        let base = ctx.code + off;
        let mut bytes = slice_bytes(&code).to_vec();
        bytes.extend_from_slice(slice_bytes(&descs));
        ctx.gpu
            .upload(ctx.copy, base, &bytes)
            .map_err(|e| e.to_string())?;
        let stack = ebpf::verifier::verify(&p.program, &Default::default())
            .map(|v| v.max_stack_depth.clamp(8, 512) as u32)
            .unwrap_or(512);
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
                    stack_size: stack,
                    reserved: 0,
                },
                reserved: [0; 2],
            },
            vec![off],
        ))
    }

    /// Writes `e` into a fresh entry, then publishes its index for `id`.
    fn write_entry(&self, ctx: &mut Context, id: u32, e: &ProgEntry) -> Result<(), DeviceError> {
        let idx = ctx.next_entry;
        ctx.next_entry = (ctx.next_entry + 1) % MAX_ENTRIES;
        ctx.gpu
            .upload(ctx.copy, ctx.progs + idx as u64 * 64, as_bytes(e))?;
        // A 4-byte aligned word: the device sees the old or the new index, never a mix.
        ctx.gpu.upload(
            ctx.copy,
            ctx.prog_index + id as u64 * 4,
            &(idx + 1).to_le_bytes(),
        )
    }

    /// Asks the kernel to drain and waits until it has exited.
    fn stop_kernel(&self, ctx: &mut Context) -> Result<(), DeviceError> {
        if ctx.lib.is_none() {
            return Ok(());
        }
        self.ctl(ctx).stop.store(1, Ordering::Release);
        loop {
            match ctx.gpu.query(ctx.kstream) {
                StreamState::Idle => break,
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
        Ok(())
    }

    /// Compiles every installed program, links a generation and swaps it in.
    fn build_and_swap(&self, first: bool) -> Result<(), DeviceError> {
        let mut times = SwapTimes::default();
        // 1. JIT, off the lock: the programs as they are now.
        let progs = self.table.list();
        let t = Instant::now();
        let (region_dev, trace_dev) = {
            let c = lock(&self.ctx);
            let Some(ctx) = c.as_ref() else { return Ok(()) };
            (ctx.region_dev, ctx.trace_dev)
        };
        let _ = region_dev;
        let mut ptx = Vec::new();
        let mut funcs = Vec::new();
        let mut natives = Vec::new();
        if self.cfg.native {
            for p in &progs {
                if p.id >= MAX_PROGS {
                    continue;
                }
                let maps = {
                    let c = lock(&self.ctx);
                    let Some(ctx) = c.as_ref() else { return Ok(()) };
                    match self.bindings(ctx, p) {
                        Ok(m) => m,
                        Err(e) => {
                            tracing::warn!(id = p.id, "not compiled: {e}");
                            continue;
                        }
                    }
                };
                let mut prog = p.program.clone();
                prog.name = format!("p{}v{}", p.id, p.version);
                let opts = jit::JitOptions {
                    sm: self.sm,
                    maps,
                    trace_buf: trace_dev,
                    lock_pid: std::process::id(),
                    entry: false,
                    unaligned: true,
                    stack_size: ebpf::verifier::verify(&p.program, &Default::default())
                        .ok()
                        .map(|v| v.max_stack_depth.clamp(8, 512) as u32),
                    ..Default::default()
                };
                match jit::compile(&prog, &opts) {
                    Ok(m) => {
                        funcs.push(m.prog_func().to_string());
                        natives.push((p.id, p.version, natives.len() as u32));
                        ptx.push((format!("{}.ptx", prog.name), m.text()));
                    }
                    Err(e) => tracing::warn!(id = p.id, "JIT failed, stays on the interpreter: {e}"),
                }
            }
        }
        times.jit_ns = t.elapsed().as_nanos() as u64;
        let dispatch = source::dispatch_ptx(&funcs, (8, 0), self.sm);
        let mut inputs: Vec<(&str, &str)> = vec![
            ("bpftime_runtime.ptx", self.runtime_ptx.as_str()),
            ("bpftime_dispatch.ptx", dispatch.as_str()),
        ];
        for (n, t) in &ptx {
            inputs.push((n.as_str(), t.as_str()));
        }
        // 2. Link and load, still with the old generation serving.
        let t = Instant::now();
        let (cubin, lib) = {
            let c = lock(&self.ctx);
            let Some(ctx) = c.as_ref() else { return Ok(()) };
            let cubin = ctx.gpu.link(&inputs)?;
            times.link_ns = t.elapsed().as_nanos() as u64;
            let t = Instant::now();
            let lib = ctx.gpu.load_library(&cubin)?;
            times.load_ns = t.elapsed().as_nanos() as u64;
            (cubin, lib)
        };
        drop(cubin);
        // 3. Swap.
        let mut c = lock(&self.ctx);
        let Some(ctx) = c.as_mut() else { return Ok(()) };
        let t0 = Instant::now();
        self.stop_kernel(ctx)?;
        times.drain_ns = t0.elapsed().as_nanos() as u64;
        let t1 = Instant::now();
        if let Some(old) = ctx.lib.take() {
            ctx.gpu.unload(old);
        }
        for off in ctx.retired.drain(..) {
            let _ = ctx.code_alloc.free(off, Owner::Service);
        }
        // Native entries for programs whose version is still the one compiled.
        ctx.native_slots.clear();
        for (id, version, slot) in &natives {
            let Some((v, _, _)) = ctx.installed.get(id).cloned() else { continue };
            if v != *version {
                continue;
            }
            let Some(p) = self.table.get(*id) else { continue };
            let mut entry = match self.interp_entry(ctx, &p) {
                Ok((e, allocs)) => {
                    if let Some(x) = ctx.installed.get_mut(id) {
                        ctx.retired.extend(std::mem::replace(&mut x.2, allocs));
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
            self.write_entry(ctx, *id, &entry)?;
            if let Some(x) = ctx.installed.get_mut(id) {
                x.1 = TIER_NATIVE;
            }
            ctx.native_slots.insert(*id, (*version, *slot));
        }
        if first {
            let threads = THREADS;
            let per_sm = ctx.gpu.occupancy(&lib, threads)?.clamp(1, 2);
            ctx.grid = ctx.gpu.sm_count()? * per_sm;
        }
        // Drain flag and counters of the pinned control block for the new kernel.
        ctx.gpu.memset32(ctx.copy, ctx.state + 24, 0, 1)?;
        let ctl = self.ctl(ctx);
        ctl.stop.store(0, Ordering::Release);
        ctl.running.store(0, Ordering::Relaxed);
        ctx.generation += 1;
        ctx.params.generation = ctx.generation;
        ctx.gpu
            .launch_persistent(&lib, ctx.kstream, ctx.grid, THREADS, &ctx.params)?;
        ctx.lib = Some(lib);
        times.relaunch_ns = t1.elapsed().as_nanos() as u64;
        let pause = t0.elapsed().as_nanos() as u64;
        self.generation.store(ctx.generation, Ordering::Relaxed);
        if !first {
            self.swaps.fetch_add(1, Ordering::Relaxed);
        }
        self.last_pause.store(pause, Ordering::Relaxed);
        *lock(&self.last_times) = times;
        tracing::info!(
            generation = ctx.generation,
            native = natives.len(),
            pause_us = pause as f64 / 1e3,
            link_ms = times.link_ns as f64 / 1e6,
            "generation launched"
        );
        Ok(())
    }

    /// Rebuilds when programs changed (after the debounce), and watches for faults.
    fn builder_loop(&self) {
        while !self.quit.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_micros(500));
            if let Some(e) = self.check_fault() {
                self.recover(&e);
                continue;
            }
            if self.cfg.native && self.dirty.load(Ordering::Acquire) {
                let since = monotonic_ns().saturating_sub(self.changed_at.load(Ordering::Relaxed));
                if since < self.cfg.debounce.as_nanos() as u64 {
                    continue;
                }
                self.dirty.store(false, Ordering::Release);
                if let Err(e) = self.build_and_swap(false) {
                    tracing::error!("generation build failed: {e}");
                    if let Some(e) = self.check_fault() {
                        self.recover(&e);
                    }
                }
            }
        }
    }

    fn check_fault(&self) -> Option<String> {
        let c = lock(&self.ctx);
        let ctx = c.as_ref()?;
        ctx.lib.as_ref()?;
        match ctx.gpu.query(ctx.kstream) {
            StreamState::Failed(e) => Some(e),
            StreamState::Idle if !self.quit.load(Ordering::Acquire) => {
                // The kernel exited without being asked: treat as a fault.
                (self.ctl(ctx).stop.load(Ordering::Acquire) == 0)
                    .then(|| "the persistent kernel exited unexpectedly".to_string())
            }
            _ => None,
        }
    }

    /// Finishes what the dead context had taken, resets it, rebuilds, relaunches.
    fn recover(&self, why: &str) {
        tracing::error!("GPU fault: {why}; recovering");
        let _mb = lock(&self.mailbox);
        let mut c = lock(&self.ctx);
        let Some(ctx) = c.take() else { return };
        // Published done-log and forward entries first: they are finished or host work.
        self.drain_done(&ctx, usize::MAX);
        drop(_mb);
        self.drain_fwd(&ctx, usize::MAX);
        let _mb = lock(&self.mailbox);
        // Every job the GPU marked RUNNING but did not finish.
        let h = self.region.header();
        let total = h.max_clients * h.completions_per_client;
        let msg = self.region.post_message(&format!(
            "the GPU failed while running this job ({why}); the service recreated the CUDA \
             context and carried on"
        ));
        let mut n = 0;
        for i in 0..total {
            let Some(comp) = self.region.completion(i) else { continue };
            if comp.state.load(Ordering::Acquire) != completion_state::RUNNING {
                continue;
            }
            let client = i / h.completions_per_client;
            let now = monotonic_ns();
            self.region.finish_completion(
                i,
                &CompletionData {
                    status: status::DEVICE_FAULT,
                    message: msg,
                    started_ns: now,
                    finished_ns: now,
                    ..Default::default()
                },
            );
            if let Some(cl) = self.region.client(client) {
                cl.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
            self.stats.jobs_done.fetch_add(1, Ordering::Relaxed);
            self.stats.jobs_failed.fetch_add(1, Ordering::Relaxed);
            h.jobs_done.fetch_add(1, Ordering::Relaxed);
            h.jobs_failed.fetch_add(1, Ordering::Relaxed);
            n += 1;
        }
        self.fault_jobs.fetch_add(n, Ordering::Relaxed);
        // The queue head as the GPU last stored it stays in shared memory.
        let gpu = ctx.gpu;
        let ordinal = gpu.ordinal();
        if let Err(e) = gpu.reset() {
            tracing::error!("context reset failed: {e}");
        }
        let fresh = Gpu::open(ordinal).and_then(|g| self.new_context(g));
        match fresh {
            Ok(mut ctx) => {
                for p in self.table.list() {
                    if let Err(e) = self.publish_instant(&mut ctx, p.id) {
                        tracing::error!(id = p.id, "cannot republish: {e}");
                    }
                }
                *c = Some(ctx);
                drop(c);
                drop(_mb);
                self.recoveries.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = self.build_and_swap(true) {
                    tracing::error!("relaunch after the fault failed: {e}");
                } else {
                    tracing::warn!(failed_jobs = n, "recovered from the GPU fault");
                }
            }
            Err(e) => tracing::error!("cannot recreate the CUDA context: {e}; jobs wait in the queue"),
        }
    }

    /// Processes up to `max` done-log entries. Returns how many.
    fn drain_done(&self, ctx: &Context, max: usize) -> usize {
        let ctl = self.ctl(ctx);
        let mut pos = ctl.done_consumed.load(Ordering::Relaxed);
        let mut n = 0;
        let h = self.region.header();
        while n < max {
            // SAFETY: index masked into the DONE_LOG-entry pinned allocation.
            let e = unsafe { &*ctx.done.add((pos & (DONE_LOG as u64 - 1)) as usize) };
            if e.seq.load(Ordering::Acquire) != pos + 1 {
                break;
            }
            let comp = e.completion;
            if e.finalize != 0 {
                let text = if e.status == status::RUNTIME_ERROR {
                    format!(
                        "record {}: the program failed on the GPU at insn {}: {}",
                        e.err_record,
                        e.err_pc,
                        bytecode::code::describe(e.err_code as i32)
                    )
                } else {
                    format!("job failed on the GPU with status {}", e.status)
                };
                let msg = self.region.post_message(&text);
                if let Some(c) = self.region.completion(comp) {
                    // SAFETY: the GPU wrote every other field before publishing the log
                    // entry; DONE is not yet set, so the client does not read the slot.
                    unsafe {
                        let p = c as *const shm_maps::layout::Completion as *mut shm_maps::layout::Completion;
                        std::ptr::addr_of_mut!((*p).message).write(msg);
                    }
                    c.state.store(completion_state::DONE, Ordering::Release);
                }
            }
            if let Some(cl) = self.region.client(e.client) {
                cl.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
            let s = &self.stats;
            s.jobs_done.fetch_add(1, Ordering::Relaxed);
            h.jobs_done.fetch_add(1, Ordering::Relaxed);
            if e.status != status::OK {
                s.jobs_failed.fetch_add(1, Ordering::Relaxed);
                h.jobs_failed.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(c) = self.region.read_completion(comp) {
                s.records.fetch_add(c.records_done, Ordering::Relaxed);
                s.records_failed
                    .fetch_add(c.records_failed, Ordering::Relaxed);
                s.latency
                    .record(c.finished_ns.saturating_sub(c.submitted_ns));
            }
            s.run_time.record(e.run_ns);
            pos += 1;
            n += 1;
            ctl.done_consumed.store(pos, Ordering::Release);
        }
        n
    }

    /// Runs forwarded jobs on the host runner.
    fn drain_fwd(&self, ctx: &Context, max: usize) -> usize {
        let ctl = self.ctl(ctx);
        let mut pos = ctl.fwd_consumed.load(Ordering::Relaxed);
        let mut n = 0;
        let mut runner = self.runner();
        while n < max {
            // SAFETY: index masked into the FWD_RING-entry pinned allocation.
            let e = unsafe { &*ctx.fwd.add((pos & (FWD_RING as u64 - 1)) as usize) };
            if e.seq.load(Ordering::Acquire) != pos + 1 {
                break;
            }
            let d = e.desc;
            pos += 1;
            ctl.fwd_consumed.store(pos, Ordering::Release);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.run(&d)));
            if r.is_err() {
                tracing::error!("forwarded job panicked: {}", self.region.describe(&d));
            }
            n += 1;
        }
        n
    }

    fn runner(&self) -> JobRunner<'_> {
        let mut env = Env::new(0).with_max_insns(self.cfg.max_insns);
        env.sink = TraceSink::Callback(Box::new(|line| {
            tracing::info!(target: "bpftime::trace", worker = "host", "{line}")
        }));
        JobRunner {
            region: &self.region,
            table: &self.table,
            stats: &self.host_stats,
            cancel: &self.control.cancel,
            env,
        }
    }

    /// Prints new trace records.
    fn drain_trace(&self, ctx: &Context, next: &mut u64) {
        // SAFETY: header word 0 of the pinned trace ring is the GPU's record counter.
        let head = unsafe { (*(ctx.trace as *const AtomicU64)).load(Ordering::Acquire) };
        if head.saturating_sub(*next) > TRACE_RING as u64 {
            tracing::warn!(lost = head - *next - TRACE_RING as u64, "trace ring overran");
            *next = head - TRACE_RING as u64;
        }
        while *next < head {
            let k = *next;
            // SAFETY: record k mod capacity of the ring, 64 bytes at 64 + 64·i.
            let rec = unsafe { ctx.trace.add(64 + 64 * (k % TRACE_RING as u64) as usize) };
            // SAFETY: as above; seq is the first word, published last with release.
            let seq = unsafe { (*(rec as *const AtomicU64)).load(Ordering::Acquire) };
            if seq != k + 1 {
                break; // still being written
            }
            // SAFETY: a published record of 8 words.
            let w: [u64; 8] = unsafe { std::ptr::read_volatile(rec as *const [u64; 8]) };
            let helper = w[1] as u32;
            let fmt_len = (w[1] >> 32) as usize;
            let read = |addr: u64, max: usize| -> Option<Vec<u8>> {
                let off = addr.checked_sub(ctx.region_dev)?;
                let base = self.region.header().arena_off;
                let a = off.checked_sub(base)?;
                let mut v = self.region.read_arena(a, max as u64).or_else(|| {
                    let rest = self.region.header().arena_size.saturating_sub(a);
                    self.region.read_arena(a, rest.min(max as u64))
                })?;
                if let Some(z) = v.iter().position(|b| *b == 0) {
                    v.truncate(z);
                }
                Some(v)
            };
            let line = if helper == 501 {
                read(w[2], 256).map(|s| String::from_utf8_lossy(&s).into_owned())
            } else {
                read(w[2], fmt_len.min(256)).and_then(|f| {
                    ebpf::interp::printk::format_printk(&f, &[w[3], w[4], w[5]], |p| {
                        read(p, 256).ok_or_else(|| "bad string pointer".to_string())
                    })
                    .ok()
                })
            };
            tracing::info!(
                target: "bpftime::trace",
                thread = w[6],
                "{}",
                line.unwrap_or_else(|| format!("<unreadable trace record from helper {helper}>"))
            );
            *next += 1;
        }
    }

    /// The host mailbox thread: busy-polls the done log, the forward ring and the trace
    /// ring; after a while with nothing to do it polls every 50 µs instead.
    fn mailbox_loop(&self) {
        let mut idle = 0u32;
        let mut trace_next = 0u64;
        let mut seen_gen = 0;
        while !self.quit.load(Ordering::Acquire) {
            let mut work = 0;
            {
                let _mb = lock(&self.mailbox);
                let c = lock(&self.ctx);
                if let Some(ctx) = c.as_ref() {
                    if ctx.generation != seen_gen && ctx.generation == 1 {
                        trace_next = 0;
                    }
                    seen_gen = ctx.generation;
                    // SAFETY of the raw reads: the pinned rings live as long as `ctx`,
                    // which the held lock keeps alive.
                    work += self.drain_done(ctx, 4096);
                    self.drain_trace(ctx, &mut trace_next);
                    let fwd_pending = {
                        let ctl = self.ctl(ctx);
                        let pos = ctl.fwd_consumed.load(Ordering::Relaxed);
                        // SAFETY: masked index into the forward ring.
                        let e = unsafe { &*ctx.fwd.add((pos & (FWD_RING as u64 - 1)) as usize) };
                        e.seq.load(Ordering::Acquire) == pos + 1
                    };
                    if fwd_pending {
                        work += self.drain_fwd(ctx, 64);
                    }
                }
            }
            if work > 0 {
                idle = 0;
            } else {
                idle += 1;
                if idle > 20_000 {
                    std::thread::sleep(Duration::from_micros(50));
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        // Final pass.
        let c = lock(&self.ctx);
        if let Some(ctx) = c.as_ref() {
            self.drain_done(ctx, usize::MAX);
            self.drain_fwd(ctx, usize::MAX);
        }
    }

    /// After the kernel stopped: jobs still queued run (or are cancelled) on the host.
    fn drain_on_host(&self) {
        let q = self.region.queue();
        let mut runner = self.runner();
        let mut buf = [JobDesc::default(); 32];
        loop {
            let n = q.pop_batch(&mut buf);
            if n == 0 {
                break;
            }
            for d in &buf[..n] {
                runner.run(d);
            }
        }
    }
}
