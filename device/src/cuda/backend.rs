//! The CUDA backend as the service sees it: a supervised GPU worker process, plus the host
//! side of the mailboxes.
//!
//! ```text
//!  service ── Cmd (stdin) ──▶ GPU worker process ── persistent kernel ──┐
//!          ◀─ Msg (stdout) ──                                          │ polls the queue
//!  mailbox thread ◀── done log / forward ring / trace ring (region arena) ◀┘
//!      │ counters, error messages, CPU runs of forwarded jobs, trace lines
//!      └ worker died (GPU fault) → finish its RUNNING jobs with DEVICE_FAULT,
//!        clear the mailbox, start a new worker, send every program again
//! ```
//!
//! Why a process: CUDA errors like a misaligned or illegal address are sticky. The
//! context, and in practice the whole process, cannot use the GPU again (we measured
//! `cuDevicePrimaryCtxRetain` failing with the same error after a reset). The queue,
//! completions, maps and arena live in the shared region, so nothing the clients see is
//! lost with the worker.

use super::DeviceError;
use super::wire::*;
use crate::cpu::Control;
use crate::job::JobRunner;
use crate::programs::ProgramTable;
use crate::stats::WorkerStats;
use crate::tier::TierBuffers;
use ebpf::interp::{Env, TraceSink};
use shm_maps::layout::status;
use shm_maps::{JobDesc, ShmRegion};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a restart that takes long says what it is doing.
const RESTART_REPORT: Duration = Duration::from_secs(5);
/// How long a warm standby may take to launch its kernel when activated before the service
/// gives up on it and starts a new worker. A standby has done everything but the launch
/// (tens of ms); on an H200 one was seen never to answer after a fault (stuck in its first
/// generation), which hung the recovery.
const ACTIVATE_LIMIT: Duration = Duration::from_secs(10);

/// How long a new worker may take to say it is ready (context, runtime compile, module
/// load, launch: seconds) before the service gives up on it (and a restart tries again).
const START_LIMIT: Duration = Duration::from_secs(120);

/// How long a worker that failed or stopped answering is given to exit before the service
/// goes on without waiting for it.
const REAP_WAIT: Duration = Duration::from_secs(1);

/// Waits up to `limit` for `child` to exit; whether it did.
fn reap_within(child: &mut Child, limit: Duration) -> bool {
    let t = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if t.elapsed() >= limit => return false,
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Kills a worker process and reaps it on a thread of its own: the driver may hold a
/// process whose context it tears down for a long time, and a recovery must not wait.
fn discard(mut child: Child) {
    let _ = child.kill();
    let _ = std::thread::Builder::new()
        .name("bpftime-gpu-reap".into())
        .spawn(move || {
            let _ = child.wait();
        });
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The running worker process and its pipes.
struct Link {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Link {
    fn send(&mut self, cmd: &Cmd) -> Result<(), String> {
        let mut line = serde_json::to_string(cmd).map_err(|e| e.to_string())?;
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("the GPU worker is gone ({e})"))
    }

    fn request(&mut self, cmd: &Cmd) -> Result<Msg, String> {
        self.send(cmd)?;
        self.read()
    }

    /// [`Link::request`], giving up when no reply line comes within `limit`.
    fn request_within(&mut self, cmd: &Cmd, limit: Duration) -> Result<Msg, String> {
        self.send(cmd)?;
        self.read_within(limit)
    }

    /// [`Link::read`], giving up when no line comes within `limit`.
    fn read_within(&mut self, limit: Duration) -> Result<Msg, String> {
        if self.stdout.buffer().is_empty() {
            use std::os::fd::AsFd;
            let fd = self.stdout.get_ref().as_fd();
            let mut fds = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            let t = rustix::time::Timespec {
                tv_sec: limit.as_secs() as i64,
                tv_nsec: limit.subsec_nanos() as i64,
            };
            match rustix::event::poll(&mut fds, Some(&t)) {
                Ok(0) => return Err(format!("no answer within {limit:?}")),
                Ok(_) => {}
                Err(e) => return Err(format!("cannot wait for the GPU worker: {e}")),
            }
        }
        self.read()
    }

    fn read(&mut self) -> Result<Msg, String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) => Err("the GPU worker exited".into()),
            Ok(_) => serde_json::from_str(&line)
                .map_err(|e| format!("bad reply from the GPU worker `{}`: {e}", line.trim())),
            Err(e) => Err(format!("cannot read from the GPU worker: {e}")),
        }
    }
}

struct Shared {
    region: Arc<ShmRegion>,
    table: Arc<ProgramTable>,
    /// Job buffers in an emulated tier: the worker's GPU table follows them
    /// ([`CudaBackend::sync_tier_buffers`]), and the host runner fetches forwarded jobs'
    /// records through them.
    tiers: Arc<TierBuffers>,
    cfg: CudaConfig,
    mailbox_off: u64,
    exe: PathBuf,
    link: Mutex<Option<Link>>,
    /// A prepared worker whose kernel is not launched (`CudaConfig::warm_standby`).
    standby: Mutex<Option<Link>>,
    /// A standby is being started.
    standby_starting: AtomicBool,
    /// `(ms, warm)` of the last restart after a fault.
    last_restart: Mutex<(f64, bool)>,
    /// What a restart in progress is doing (logged when it takes long).
    restart_step: Mutex<&'static str>,
    control: Arc<Control>,
    stats: Arc<WorkerStats>,
    host_stats: Arc<WorkerStats>,
    recoveries: AtomicU64,
    fault_jobs: AtomicU64,
    /// Jobs run on the host while the kernel was stopped ([`Shared::serve_gap`]).
    gap_jobs: AtomicU64,
    /// The version of each program the worker has acknowledged: the host stands in for
    /// the GPU only on the version the GPU runs (a load or unload not yet taken by the
    /// worker must not run on the host in a gap and then be undone after it).
    acked: Mutex<std::collections::HashMap<u32, u32>>,
    value_sets: AtomicU32,
    quit: AtomicBool,
    /// The worker's device address of the region (to read trace format strings).
    region_dev: AtomicU64,
    last_status: Mutex<CudaStatus>,
    /// Held while the done log or the forward ring is drained: the mailbox thread drains
    /// them, and during a restart a helper does (`recover`); never both at once.
    drain: Mutex<()>,
}

/// A running CUDA backend.
pub struct CudaBackend {
    shared: Arc<Shared>,
    mailbox: Option<JoinHandle<()>>,
    /// `[GPU jobs, host-runner jobs]` statistics, for `status`.
    pub stats: Vec<Arc<WorkerStats>>,
    /// Stop and cancel flags.
    pub control: Arc<Control>,
}

/// The largest job the host takes during a swap's gap: the gap lasts about the code
/// upload (0.3–0.5 ms on an H100 or H200), and the new kernel waits for the job the host
/// is running. Larger jobs wait for the next kernel.
pub const GAP_MAX_RECORDS: u64 = 256;

/// The most instructions a job the host takes in a gap may run, by a bound from its code:
/// records × the program's length when it has no loop, else × the instruction budget per
/// record (about a millisecond on the CPU JIT).
pub const GAP_MAX_INSNS: u64 = 1 << 20;

/// The `bpftime-super` binary to run `gpu-worker` with.
fn worker_exe(cfg: &CudaConfig) -> Result<PathBuf, DeviceError> {
    let missing = |what: String| DeviceError::Call {
        call: "gpu-worker",
        code: what,
        log: String::new(),
    };
    if let Some(p) = &cfg.worker_exe {
        return Ok(p.clone());
    }
    if let Some(p) = std::env::var_os("BPFTIME_SUPER_BIN") {
        return Ok(p.into());
    }
    let me = std::env::current_exe().map_err(|e| missing(e.to_string()))?;
    if me.file_name().is_some_and(|n| n == "bpftime-super") {
        return Ok(me);
    }
    // Tests and benchmarks: target/<profile>/deps/x → target/<profile>/bpftime-super.
    for dir in me.ancestors().skip(1).take(3) {
        let p = dir.join("bpftime-super");
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(missing(format!(
        "cannot find the bpftime-super binary next to {} (set BPFTIME_SUPER_BIN)",
        me.display()
    )))
}

impl CudaBackend {
    /// Starts the GPU worker on `cfg.device`. `mailbox_off` is an arena allocation of
    /// [`MAILBOX_BYTES`] the service made for the mailboxes; `tiers` are the job buffers
    /// placed in an emulated tier (the worker gets them at once). Errors leave nothing
    /// running.
    pub fn start(
        region: Arc<ShmRegion>,
        table: Arc<ProgramTable>,
        tiers: Arc<TierBuffers>,
        cfg: CudaConfig,
        mailbox_off: u64,
    ) -> Result<CudaBackend, DeviceError> {
        if !super::driver_present() {
            return Err(DeviceError::NoDriver);
        }
        if region.queue_at(cfg.queue).is_none() {
            return Err(DeviceError::Call {
                call: "start",
                code: format!(
                    "GPU {} was given queue {}, the region has {}",
                    cfg.device,
                    cfg.queue,
                    region.queue_count()
                ),
                log: String::new(),
            });
        }
        let exe = worker_exe(&cfg)?;
        let control = Arc::new(Control::default());
        let shared = Shared::new(region, table, tiers, cfg, mailbox_off, exe, control.clone());
        let link = shared.spawn_first().map_err(|e| DeviceError::Call {
            call: "gpu-worker",
            code: e,
            log: String::new(),
        })?;
        *lock(&shared.link) = Some(link);
        if !shared.tiers.is_empty()
            && let Err(e) = shared.send_tiers()
        {
            tracing::error!("the GPU worker did not take the tiered job buffers: {e}");
        }
        shared.warm_up();
        let s = shared.clone();
        let mailbox = std::thread::Builder::new()
            .name("bpftime-gpu-mailbox".into())
            .spawn(move || s.mailbox_loop())
            .map_err(|e| DeviceError::Call {
                call: "thread spawn",
                code: e.to_string(),
                log: String::new(),
            })?;
        Ok(CudaBackend {
            stats: vec![shared.stats.clone(), shared.host_stats.clone()],
            control,
            shared,
            mailbox: Some(mailbox),
        })
    }

    /// Value sets per-thread arrays should have: one per GPU thread.
    pub fn value_sets(&self) -> u32 {
        self.shared.value_sets.load(Ordering::Relaxed)
    }

    /// Makes the GPU follow the program table for `id` (after install, replace, unload):
    /// the instant tier when this returns, native code at the next generation.
    pub fn sync_program(&self, id: u32) {
        if let Err(e) = self.shared.send_program(id) {
            tracing::error!(id, "the GPU worker did not take the program: {e}");
        }
    }

    /// Makes the GPU's tier table hold every job buffer now placed in a tier (after an
    /// `alloc` with a placement, or a free of one): when this returns, jobs naming the
    /// buffer's slot pay its tier on the GPU.
    pub fn sync_tier_buffers(&self) -> Result<(), String> {
        self.shared.send_tiers()
    }

    /// Builds and swaps a generation now; returns its timings.
    pub fn swap_now(&self) -> Result<SwapTimes, String> {
        let mut l = lock(&self.shared.link);
        let link = l.as_mut().ok_or("the GPU worker is restarting")?;
        match link.request(&Cmd::Swap)? {
            Msg::Swapped { error: None, times } => Ok(times),
            Msg::Swapped { error: Some(e), .. } => Err(e),
            other => Err(format!("unexpected reply {other:?}")),
        }
    }

    /// Copies `len` bytes between the shared arena at `shm_off` and the device arena at
    /// `dev_off` (to the device with `to_device`).
    pub fn transfer(
        &self,
        to_device: bool,
        shm_off: u64,
        dev_off: u64,
        len: u64,
    ) -> Result<(), String> {
        self.shared
            .ack("the GPU worker is restarting; try again", || {
                Cmd::Transfer {
                    to_device,
                    shm_off,
                    dev_off,
                    len,
                }
            })
    }

    /// Copies bytes `[off, off + len)` of device map `map` (`program:map`) between GPU
    /// memory and its arena mirror.
    pub fn map_sync(&self, map: &str, to_device: bool, off: u64, len: u64) -> Result<(), String> {
        self.shared
            .ack("the GPU worker is restarting; try again", || Cmd::MapSync {
                map: map.to_string(),
                to_device,
                off,
                len,
            })
    }

    /// Whether this GPU's atomics on host memory are atomic with other devices' (known
    /// from the worker's start, no request).
    pub fn host_native_atomics(&self) -> bool {
        lock(&self.shared.last_status).host_native_atomics
    }

    /// GPU facts for `status` (the last known ones while the worker restarts).
    pub fn status(&self) -> CudaStatus {
        self.shared.status()
    }

    /// Stops: waits until the queue is drained (or cancels it with `now`), stops the
    /// kernel and the worker, and finishes whatever is left on the host.
    pub fn stop(mut self, now: bool) {
        let s = &self.shared;
        if now {
            self.control.cancel.store(true, Ordering::Relaxed);
        } else {
            let t = Instant::now();
            let q = s.queue();
            while !q.is_empty() && t.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        // The mailbox thread runs until the worker is gone: a swap in progress waits for it
        // to hand the queue back (`serve_gap`), and a draining kernel for room in the done
        // log. With the link taken out, it no longer restarts a worker that exits.
        let link = lock(&s.link).take();
        if let Some(mut link) = link {
            let _ = link.request(&Cmd::Stop);
            let _ = link.child.wait();
        }
        let standby = lock(&s.standby).take();
        if let Some(mut sb) = standby {
            // A standby answers nothing: it exits on `stop`.
            let _ = sb.request(&Cmd::Stop);
            let _ = sb.child.wait();
        }
        s.quit.store(true, Ordering::Release);
        if let Some(h) = self.mailbox.take() {
            let _ = h.join();
        }
        s.drain_done(usize::MAX);
        s.drain_fwd(usize::MAX);
        s.drain_on_host();
        tracing::info!("CUDA backend stopped");
    }
}

impl Shared {
    /// The service side with no worker yet, its mailbox block cleared.
    fn new(
        region: Arc<ShmRegion>,
        table: Arc<ProgramTable>,
        tiers: Arc<TierBuffers>,
        cfg: CudaConfig,
        mailbox_off: u64,
        exe: PathBuf,
        control: Arc<Control>,
    ) -> Arc<Shared> {
        let s = Arc::new(Shared {
            region,
            table,
            tiers,
            cfg,
            mailbox_off,
            exe,
            link: Mutex::new(None),
            standby: Mutex::new(None),
            standby_starting: AtomicBool::new(false),
            drain: Mutex::new(()),
            last_restart: Mutex::new((0.0, false)),
            restart_step: Mutex::new(""),
            control,
            stats: Arc::new(WorkerStats::default()),
            host_stats: Arc::new(WorkerStats::default()),
            recoveries: AtomicU64::new(0),
            fault_jobs: AtomicU64::new(0),
            gap_jobs: AtomicU64::new(0),
            acked: Mutex::new(std::collections::HashMap::new()),
            value_sets: AtomicU32::new(1),
            quit: AtomicBool::new(false),
            region_dev: AtomicU64::new(0),
            last_status: Mutex::new(CudaStatus::default()),
        });
        s.clear_mailbox();
        s
    }

    /// The region queue this GPU serves.
    fn queue(&self) -> shm_maps::JobQueue<'_> {
        self.region
            .queue_at(self.cfg.queue)
            .expect("CudaBackend::start checked the queue index")
    }

    fn base(&self) -> *mut u8 {
        let off = self.region.header().arena_off + self.mailbox_off;
        // SAFETY: the mailbox block is an arena allocation of MAILBOX_BYTES.
        unsafe { self.region.base().as_ptr().add(off as usize) }
    }

    fn ctl(&self) -> &Ctl {
        // SAFETY: the block starts with a Ctl, 64-byte aligned (arena alignment).
        unsafe { &*(self.base() as *const Ctl) }
    }

    fn done(&self, pos: u64) -> &DoneEntry {
        // SAFETY: masked index into the done log inside the block.
        unsafe {
            &*(self
                .base()
                .add((DONE_OFF + (pos & (DONE_LOG as u64 - 1)) * 64) as usize)
                as *const DoneEntry)
        }
    }

    fn fwd(&self, pos: u64) -> &FwdEntry {
        // SAFETY: masked index into the forward ring inside the block.
        unsafe {
            &*(self
                .base()
                .add((FWD_OFF + (pos & (FWD_RING as u64 - 1)) * 128) as usize)
                as *const FwdEntry)
        }
    }

    /// Zeroes the mailbox block (no worker is running).
    fn clear_mailbox(&self) {
        // SAFETY: the block is ours and no GPU writes it while no worker runs.
        unsafe {
            std::ptr::write_bytes(self.base(), 0, MAILBOX_BYTES as usize);
            (self.base().add(TRACE_OFF as usize + 8) as *mut u64).write_volatile(TRACE_RING as u64);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Starts a worker and waits for its first generation.
    fn spawn(&self) -> Result<Link, String> {
        let mut link = self.start_process(false)?;
        self.await_ready(&mut link, None)?;
        Ok(link)
    }

    /// The service's first worker. With a warm standby, both are prepared side by side
    /// and the first is launched only once the standby is ready: a context preparing on the
    /// GPU while the persistent kernel runs held round trips up to 1.7 ms (measured, H200),
    /// and a standby started after the launch did that in the service's first seconds.
    fn spawn_first(self: &Arc<Self>) -> Result<Link, String> {
        if !self.cfg.warm_standby {
            return self.spawn();
        }
        let s = self.clone();
        let standby = std::thread::spawn(move || s.spawn_standby());
        let first = self.spawn_standby();
        let standby = standby
            .join()
            .unwrap_or_else(|_| Err("the standby's start panicked".into()));
        let mut first = match (first, standby) {
            (Ok(first), standby) => {
                match standby {
                    Ok(sb) => *lock(&self.standby) = Some(sb),
                    Err(e) => tracing::warn!("no warm standby GPU worker: {e}"),
                }
                first
            }
            // The standby becomes the worker; another standby starts later (`warm_up`).
            (Err(e), Ok(sb)) => {
                tracing::warn!("a GPU worker did not start ({e}): using the other");
                sb
            }
            (Err(e), Err(_)) => return Err(e),
        };
        match first
            .request_within(&Cmd::Activate, ACTIVATE_LIMIT)
            .and_then(|m| self.await_ready(&mut first, Some(m)))
        {
            Ok(()) => Ok(first),
            Err(e) => {
                discard(first.child);
                Err(e)
            }
        }
    }

    /// Starts a standby worker and waits until it is prepared (not launched).
    fn spawn_standby(&self) -> Result<Link, String> {
        let mut link = self.start_process(true)?;
        match link.read_within(START_LIMIT) {
            Ok(Msg::Standby { ms }) => {
                tracing::info!(pid = link.child.id(), ms, "warm standby GPU worker ready");
                Ok(link)
            }
            Ok(Msg::Failed { error }) => {
                discard(link.child);
                Err(error)
            }
            other => {
                discard(link.child);
                Err(format!(
                    "unexpected first message from the standby: {other:?}"
                ))
            }
        }
    }

    /// Keeps a standby worker warm: starts one in the background unless one is ready or
    /// starting (or the backend is stopping).
    fn warm_up(self: &Arc<Self>) {
        if !self.cfg.warm_standby
            || self.quit.load(Ordering::Acquire)
            || lock(&self.standby).is_some()
            || self.standby_starting.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let s = self.clone();
        let spawned = std::thread::Builder::new()
            .name("bpftime-gpu-standby".into())
            .spawn(move || {
                match s.spawn_standby() {
                    Ok(mut link) if s.quit.load(Ordering::Acquire) => {
                        let _ = link.request(&Cmd::Stop);
                        let _ = link.child.wait();
                    }
                    Ok(link) => *lock(&s.standby) = Some(link),
                    Err(e) => tracing::warn!("no warm standby GPU worker: {e}"),
                }
                s.standby_starting.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.standby_starting.store(false, Ordering::Release);
        }
    }

    /// The worker process, its pipes connected, before its first line.
    fn start_process(&self, standby: bool) -> Result<Link, String> {
        let args = WorkerArgs {
            region: self.region.name().to_string(),
            mailbox_off: self.mailbox_off,
            cfg: self.cfg.clone(),
            service_pid: std::process::id(),
            standby,
        };

        let mut child = Command::new(&self.exe)
            .arg("gpu-worker")
            .arg(serde_json::to_string(&args).map_err(|e| e.to_string())?)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {} gpu-worker: {e}", self.exe.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Link {
            child,
            stdin,
            stdout,
        })
    }

    /// Reads a worker's `ready` (after its start, or the reply to `activate`, already
    /// read when `first` is given) and takes its device address and thread count.
    fn await_ready(&self, link: &mut Link, first: Option<Msg>) -> Result<(), String> {
        let t = Instant::now();
        let msg = match first {
            Some(m) => Ok(m),
            None => link.read_within(START_LIMIT),
        };
        match msg {
            Ok(Msg::Ready {
                region_dev,
                value_sets,
                status,
            }) => {
                self.region_dev.store(region_dev, Ordering::Release);
                self.value_sets.store(value_sets, Ordering::Relaxed);
                tracing::info!(
                    device = %status.device,
                    pid = link.child.id(),
                    grid = ?status.grid,
                    ms = t.elapsed().as_secs_f64() * 1e3,
                    "GPU worker ready: persistent kernel running"
                );
                *lock(&self.last_status) = status;
                Ok(())
            }
            Ok(Msg::Failed { error }) => {
                // It exits after saying so, but its exit may hang in the driver (a standby
                // activated after another context's fault did, for minutes): not waited for.
                if !reap_within(&mut link.child, REAP_WAIT) {
                    tracing::warn!(
                        pid = link.child.id(),
                        "the failed GPU worker has not exited: killed, not waited for"
                    );
                    let _ = link.child.kill();
                }
                Err(error)
            }
            Ok(other) => Err(format!("unexpected first message {other:?}")),
            Err(e) => {
                let _ = link.child.kill();
                reap_within(&mut link.child, REAP_WAIT);
                Err(e)
            }
        }
    }

    /// Sends the command `cmd` makes (under the link's lock) and waits for the worker's
    /// acknowledgement; `restarting` says why not while there is no worker.
    fn ack(&self, restarting: &str, cmd: impl FnOnce() -> Cmd) -> Result<(), String> {
        let mut l = lock(&self.link);
        let cmd = cmd();
        let link = l.as_mut().ok_or(restarting)?;
        match link.request(&cmd)? {
            Msg::Ack { error: None } => Ok(()),
            Msg::Ack { error: Some(e) } => Err(e),
            other => Err(format!("unexpected reply {other:?}")),
        }
    }

    fn send_tiers(&self) -> Result<(), String> {
        // The set is read under the link's lock: two threads syncing at once then send
        // in the order they read, and the newer set is the last the worker gets.
        self.ack(
            "the GPU worker is restarting; it will take the tier table when it is back",
            || Cmd::TierBuffers {
                slots: self.tiers.slots(),
            },
        )
    }

    fn send_program(&self, id: u32) -> Result<(), String> {
        let cmd = match self.table.get(id) {
            Some(p) => Cmd::Program {
                id,
                version: p.version,
                name: p.name.clone(),
                file: p.program.file.clone(),
                selector: p.selector.clone(),
                object: p.object.to_vec(),
                stack_depth: p.stack_depth,
                device_maps: p
                    .program
                    .maps
                    .iter()
                    .zip(&p.device_maps)
                    .filter(|(_, d)| **d)
                    .map(|(m, _)| m.name.clone())
                    .collect(),
                tiered_maps: p
                    .program
                    .maps
                    .iter()
                    .zip(&p.tiers)
                    .filter_map(|(m, t)| t.map(|t| (m.name.clone(), t.latency_ns, t.ps_per_byte())))
                    .collect(),
            },
            None => Cmd::Unload { id },
        };
        let version = match &cmd {
            Cmd::Program { version, .. } => Some(*version),
            _ => None,
        };
        let r = self.ack(
            "the GPU worker is restarting; it will load the program when it is back",
            || cmd,
        );
        let mut acked = lock(&self.acked);
        match (&r, version) {
            (Ok(()), Some(v)) => {
                acked.insert(id, v);
            }
            _ => {
                acked.remove(&id);
            }
        }
        r
    }

    /// Processes up to `max` done-log entries.
    fn drain_done(&self, max: usize) -> usize {
        let _one = lock(&self.drain);
        let ctl = self.ctl();
        let h = self.region.header();
        let mut pos = ctl.done_consumed.load(Ordering::Relaxed);
        let mut n = 0;
        let (mut failed, mut records, mut records_failed) = (0u64, 0u64, 0u64);
        let s = &self.stats;
        let flush = |(client, k): (u32, u32)| {
            if k > 0
                && let Some(cl) = self.region.client(client)
            {
                cl.add_completed(k as u64);
            }
        };
        let mut run = (0u32, 0u32);
        while n < max {
            let e = self.done(pos);
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
                        super::bytecode::code::describe(e.err_code as i32)
                    )
                } else {
                    format!("the job failed on the GPU with status {}", e.status)
                };
                let msg = self.region.post_message(&text);
                self.region.finalize_completion(comp, msg);
            }
            // Per client, once per call (runs of one client's jobs are the common case).
            if run.0 != e.client {
                flush(run);
                run = (e.client, 0);
            }
            run.1 += 1;
            failed += (e.status != status::OK) as u64;
            records += e.records_done;
            records_failed += e.records_failed;
            // The client may have read and reused the slot already; count what is there.
            // A sample (every 16th job, and every failure): reading the completion is a
            // cache miss on a line the GPU just wrote.
            if (pos.is_multiple_of(16) || e.status != status::OK)
                && let Some(c) = self.region.read_completion(comp)
                && c.tag != 0
            {
                s.latency
                    .record(c.finished_ns.saturating_sub(c.submitted_ns));
            }
            s.run_time.record(e.run_ns);
            pos += 1;
            n += 1;
            if n % 256 == 0 {
                // The GPU may be waiting for room in the log.
                ctl.done_consumed.store(pos, Ordering::Release);
            }
        }
        // The counters once per call: at millions of jobs a second this thread is on the
        // critical path of the done log.
        flush(run);
        if n > 0 {
            ctl.done_consumed.store(pos, Ordering::Release);
            s.jobs_done.fetch_add(n as u64, Ordering::Relaxed);
            h.jobs_done.fetch_add(n as u64, Ordering::Relaxed);
            self.queue().count_done(n as u64);
            if failed > 0 {
                s.jobs_failed.fetch_add(failed, Ordering::Relaxed);
                h.jobs_failed.fetch_add(failed, Ordering::Relaxed);
            }
            s.records.fetch_add(records, Ordering::Relaxed);
            s.records_failed
                .fetch_add(records_failed, Ordering::Relaxed);
        }
        n
    }

    /// Runs forwarded jobs on the host runner.
    fn drain_fwd(&self, max: usize) -> usize {
        let _one = lock(&self.drain);
        let ctl = self.ctl();
        let mut pos = ctl.fwd_consumed.load(Ordering::Relaxed);
        let mut n = 0;
        let mut runner = None;
        while n < max {
            // Forwarded jobs have no size limit: a kernel waiting for the queue back must
            // not wait for them too.
            self.answer_close();
            let e = self.fwd(pos);
            if e.seq.load(Ordering::Acquire) != pos + 1 {
                break;
            }
            let d = e.desc;
            pos += 1;
            ctl.fwd_consumed.store(pos, Ordering::Release);
            let runner = runner.get_or_insert_with(|| self.runner());
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.run(&d)));
            if r.is_err() {
                tracing::error!("forwarded job panicked: {}", self.region.describe(&d));
            }
            n += 1;
        }
        n
    }

    /// While the worker's kernel is stopped (a gap it opened in the mailbox,
    /// [`CudaConfig::host_gaps`]): runs the queue's jobs that the host can run as the GPU
    /// would ([`Shared::host_can_stand_in`]), up to `max`, in order, stopping at the first
    /// it cannot (that one waits for the next kernel); answers the gap's closing between
    /// jobs. Returns the jobs run, at least 1 while a gap is open (the caller keeps
    /// spinning instead of sleeping).
    fn serve_gap(&self, max: usize) -> usize {
        let ctl = self.ctl();
        let open = ctl.gap_open.load(Ordering::Acquire);
        if open == ctl.gap_done.load(Ordering::Relaxed) {
            return 0;
        }
        let q = self.queue();
        let mut runner = None;
        let mut n = 0;
        while n < max {
            if self.answer_close() {
                break;
            }
            let shm_maps::Alone::Taken(pos, d) = q.take_alone(|d| self.host_can_stand_in(d)) else {
                break;
            };
            let runner = runner.get_or_insert_with(|| self.runner());
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                runner.run_then(&d, || q.release(pos))
            }));
            if r.is_err() {
                tracing::error!(
                    "job run in a swap's gap panicked: {}",
                    self.region.describe(&d)
                );
            }
            n += 1;
        }
        self.gap_jobs.fetch_add(n as u64, Ordering::Relaxed);
        n.max(1)
    }

    /// Answers a gap's closing if the worker asked for it: every job taken in the gap has
    /// finished and released its slot (they run on this thread), so the new kernel may
    /// take the queue (its dispatchers see those positions as taken). Whether it did.
    fn answer_close(&self) -> bool {
        let ctl = self.ctl();
        let open = ctl.gap_open.load(Ordering::Acquire);
        if open != ctl.gap_done.load(Ordering::Relaxed)
            && ctl.gap_close.load(Ordering::Acquire) == open
        {
            ctl.gap_done.store(open, Ordering::Release);
            return true;
        }
        false
    }

    /// Whether the host may run `d` in the GPU's stead during a gap: with the same
    /// results and effects as the GPU, on memory both reach, and soon. Not: device-resident
    /// buffers, a mailbox ping or a fault injection (GPU-only), an input in an emulated
    /// tier (its link state lives on the GPU), more than [`GAP_MAX_RECORDS`] records or
    /// [`GAP_MAX_INSNS`] instructions, or a program with a map in GPU memory or in a tier,
    /// that asks where it runs ([`ebpf::helpers::PLACE_DEPENDENT`]), or that waits
    /// (`wait_until`: a GPU waits once for all its records, the host once per record) or
    /// reads a clock (`ktime_get_ns` and `get_globaltimer` read `%globaltimer` on the GPU,
    /// other clocks on the host: a program subtracting two stamps would see them mixed).
    /// The program must be the version the worker has acknowledged; an id the worker does
    /// not have either is fine (the GPU would hand the job to the host runner too).
    fn host_can_stand_in(&self, d: &JobDesc) -> bool {
        use shm_maps::layout::job_flags as f;
        if d.flags
            & (f::DEVICE_INPUT
                | f::DEVICE_OUTPUT
                | f::MAILBOX_PING
                | f::INJECT_FAULT
                | f::TIER_MASK)
            != 0
            || d.n > GAP_MAX_RECORDS
            || !self.tiers.is_empty()
        {
            return false;
        }
        let acked = lock(&self.acked).get(&d.prog_id).copied();
        let Some(p) = self.table.get(d.prog_id) else {
            return acked.is_none();
        };
        let per_record = p.program.straight_line_len().unwrap_or(self.cfg.max_insns);
        {
            use ebpf::helpers::{GET_GLOBALTIMER, KTIME_GET_NS, WAIT_UNTIL};
            acked == Some(p.version)
                && !p.device_maps.iter().any(|m| *m)
                && p.tiers.iter().all(Option::is_none)
                && !p.program.may_call(ebpf::helpers::PLACE_DEPENDENT)
                && !p
                    .program
                    .may_call(&[WAIT_UNTIL, KTIME_GET_NS, GET_GLOBALTIMER])
                && d.n.saturating_mul(per_record) <= GAP_MAX_INSNS
        }
    }

    fn runner(&self) -> JobRunner<'_> {
        let mut env = Env::new(0).with_max_insns(self.cfg.max_insns);
        env.sink = TraceSink::Callback(Box::new(
            |line| tracing::info!(target: "bpftime::trace", worker = "host", "{line}"),
        ));
        JobRunner {
            region: &self.region,
            table: &self.table,
            stats: &self.host_stats,
            cancel: &self.control.cancel,
            env,
            queue: self.cfg.queue,
            tiers: Some(&self.tiers),
        }
    }

    /// Logs new trace records (the GPU's `trace_printk`/`puts`).
    fn drain_trace(&self, region_dev: u64, next: &mut u64) {
        let ring = self.base().wrapping_add(TRACE_OFF as usize);
        // SAFETY: word 0 of the trace ring header is the GPU's record counter.
        let head = unsafe { (*(ring as *const AtomicU64)).load(Ordering::Acquire) };
        if head.saturating_sub(*next) > TRACE_RING as u64 {
            tracing::warn!(
                lost = head - *next - TRACE_RING as u64,
                "trace ring overran"
            );
            *next = head - TRACE_RING as u64;
        }
        while *next < head {
            let k = *next;
            // SAFETY: record k mod capacity, 64 bytes at 64 + 64·i of the ring.
            let rec = unsafe { ring.add(64 + 64 * (k % TRACE_RING as u64) as usize) };
            // SAFETY: as above; seq is the first word, stored last with release.
            let seq = unsafe { (*(rec as *const AtomicU64)).load(Ordering::Acquire) };
            if seq != k + 1 {
                break;
            }
            // SAFETY: a published record of 8 words.
            let w: [u64; 8] = unsafe { std::ptr::read_volatile(rec as *const [u64; 8]) };
            let helper = w[1] as u32;
            let fmt_len = (w[1] >> 32) as usize;
            if helper == 0 {
                // A mailbox ping: answered by the consumed counter below.
                *next += 1;
                self.ctl().trace_consumed.store(*next, Ordering::Release);
                continue;
            }
            let h = self.region.header();
            let read = |addr: u64, max: usize| -> Option<Vec<u8>> {
                let a = addr.checked_sub(region_dev)?.checked_sub(h.arena_off)?;
                let len = (max as u64).min(h.arena_size.saturating_sub(a));
                let mut v = self.region.read_arena(a, len)?;
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
                line.unwrap_or_else(|| format!("<trace record of helper {helper}: format not readable>"))
            );
            *next += 1;
            self.ctl().trace_consumed.store(*next, Ordering::Release);
        }
    }

    /// The host mailbox thread: busy-polls the done log, the forward ring and the trace
    /// ring (then every 50 µs after a quiet spell), and restarts a worker that died.
    fn mailbox_loop(self: &Arc<Self>) {
        let mut idle = 0u32;
        let mut trace_next = 0u64;
        let mut since_check = 0u32;
        while !self.quit.load(Ordering::Acquire) {
            let mut work = self.drain_done(4096) + self.serve_gap(64);
            let pos = self.ctl().fwd_consumed.load(Ordering::Relaxed);
            if self.fwd(pos).seq.load(Ordering::Acquire) == pos + 1 {
                work += self.drain_fwd(64);
            }
            // Never wait for the link here: a request may be waiting on the worker, and
            // the worker's GPU may be waiting on this thread (a full done log).
            let region_dev = self.region_dev.load(Ordering::Acquire);
            if region_dev != 0 {
                self.drain_trace(region_dev, &mut trace_next);
            }
            since_check += 1;
            if since_check >= 2_000 || idle > 20_000 {
                since_check = 0;
                if let Some(why) = self.worker_died() {
                    self.recover(&why);
                    trace_next = 0;
                    continue;
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
    }

    /// GPU facts for `status` (the last known ones while the worker restarts). Takes one
    /// lock at a time: a restart holds the standby's lock while it activates it and then
    /// takes `last_status`, so holding `last_status` while asking for `standby` deadlocked
    /// a recovery (two full runs on an H200 hung at "activating the warm standby").
    fn status(&self) -> CudaStatus {
        let fresh = {
            let mut l = lock(&self.link);
            l.as_mut()
                .and_then(|link| match link.request(&Cmd::Status) {
                    Ok(Msg::Status(st)) => Some(st),
                    _ => None,
                })
        };
        let standby_ready = lock(&self.standby).is_some();
        let last_restart = *lock(&self.last_restart);
        let mut st = lock(&self.last_status);
        if let Some(f) = fresh {
            *st = f;
        }
        st.recoveries = self.recoveries.load(Ordering::Relaxed);
        st.gap_jobs = self.gap_jobs.load(Ordering::Relaxed);
        st.fault_jobs = self.fault_jobs.load(Ordering::Relaxed);
        (st.last_restart_ms, st.last_restart_warm) = last_restart;
        st.standby_ready = standby_ready;
        st.trace_records = self.ctl().trace_consumed.load(Ordering::Relaxed);
        st.clone()
    }

    fn worker_died(&self) -> Option<String> {
        let faulted = self.ctl().worker_faulted.load(Ordering::Acquire) != 0;
        let mut l = if faulted {
            // The worker said so in the mailbox: its context is gone and a request in
            // flight will fail; do not wait for its exit (context teardown) either.
            self.link.lock().unwrap_or_else(|p| p.into_inner())
        } else {
            match self.link.try_lock() {
                Ok(l) => l,
                Err(_) => return None, // a request is in flight; check next time
            }
        };
        let link = l.as_mut()?;
        if faulted {
            let pid = link.child.id();
            let _ = link.child.kill();
            // Reap it in the background: the driver may take a while to let it go.
            if let Some(mut link) = l.take() {
                std::thread::spawn(move || {
                    let _ = link.child.wait();
                });
            }
            return Some(format!(
                "the GPU worker (pid {pid}) reported that its CUDA context failed"
            ));
        }
        match link.child.try_wait() {
            Ok(Some(st)) => {
                l.take();
                Some(format!("the GPU worker exited ({st})"))
            }
            _ => None,
        }
    }

    /// After the worker died: finish what it had taken, restart it, resend programs.
    fn recover(self: &Arc<Self>, why: &str) {
        tracing::error!("{why}: recovering");
        let t = Instant::now();
        let finished = std::sync::atomic::AtomicBool::new(false);
        let drained = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|sc| {
            // Says, every RESTART_REPORT, what a recovery that takes long is doing.
            sc.spawn(|| {
                let mut next_report = RESTART_REPORT;
                while !finished.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(50));
                    if t.elapsed() >= next_report {
                        next_report += RESTART_REPORT;
                        tracing::warn!(
                            step = *lock(&self.restart_step),
                            secs = t.elapsed().as_secs(),
                            "the recovery from the GPU fault is taking long"
                        );
                    }
                }
            });
            *lock(&self.restart_step) = "failing the jobs the dead worker had taken";
            // The new worker has no program until `restart` sends them.
            lock(&self.acked).clear();
            let n = self.fail_taken(why);
            self.region_dev.store(0, Ordering::Release);
            self.clear_mailbox();
            // While the new worker starts and receives the programs, this thread waits on
            // the worker's replies. Its kernel serves the queue meanwhile and, at a million
            // jobs a second, fills the done log (or the forward ring) within tens of
            // milliseconds, then waits for room; a worker that waits for that kernel (a
            // generation swap) would then wait forever. A helper drains both until the
            // restart is over, so GPU progress never depends on the restart's requests.
            sc.spawn(|| {
                // A swap the new worker starts between two programs opens a host gap, and
                // waits for it to be handed back (the mailbox thread is in `restart`).
                while !drained.load(Ordering::Acquire) {
                    if self.drain_done(4096) + self.serve_gap(64) + self.drain_fwd(64) == 0 {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
            });
            self.restart(n);
            drained.store(true, Ordering::Release);
            finished.store(true, Ordering::Release);
        });
    }

    /// The accounting half of recovery, with no worker running: finishes what the dead
    /// worker published, fails every job it had taken with `DEVICE_FAULT`, and repairs the
    /// queue. Returns the number of failed jobs.
    fn fail_taken(&self, why: &str) -> u64 {
        // What the GPU finished and published stays valid in shared memory.
        self.drain_done(usize::MAX);
        self.drain_fwd(usize::MAX);
        let n = crate::job::fail_taken(
            &self.region,
            Some(self.cfg.queue),
            status::DEVICE_FAULT,
            &format!(
                "the GPU failed while running this job ({why}); the service restarted the GPU \
                 worker and carried on with the queue"
            ),
        );
        self.stats.jobs_done.fetch_add(n, Ordering::Relaxed);
        self.stats.jobs_failed.fetch_add(n, Ordering::Relaxed);
        self.fault_jobs.fetch_add(n, Ordering::Relaxed);
        // No worker runs: every position below the head has finished, whatever was
        // counted on the way (a DONE whose log entry never landed was not).
        self.queue().settle_done();
        n
    }

    /// Starts a new worker (the warm standby if one is ready, else a new process,
    /// retrying with backoff) and sends it every program.
    fn restart(self: &Arc<Self>, failed: u64) {
        let t = Instant::now();
        let mut warm = false;
        let step = |s: &'static str| *lock(&self.restart_step) = s;
        // Out of its lock first: the activation below takes other locks (`link`,
        // `last_status`), and `status` takes `standby` (a lock-order deadlock otherwise).
        let standby = lock(&self.standby).take();
        if let Some(mut sb) = standby {
            step("activating the warm standby");
            match sb
                .request_within(&Cmd::Activate, ACTIVATE_LIMIT)
                .and_then(|m| self.await_ready(&mut sb, Some(m)))
            {
                Ok(()) => {
                    *lock(&self.link) = Some(sb);
                    warm = true;
                }
                Err(e) => {
                    tracing::warn!(
                        "the warm standby did not take over ({e}): starting a new worker"
                    );
                    discard(sb.child);
                }
            }
        }
        let mut delay = Duration::from_millis(10);
        while !warm && !self.quit.load(Ordering::Acquire) {
            step("starting a new worker");
            match self.spawn() {
                Ok(link) => {
                    *lock(&self.link) = Some(link);
                    break;
                }
                Err(e) => {
                    tracing::error!("cannot restart the GPU worker: {e}; retrying in {delay:?}");
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
        if !self.tiers.is_empty() {
            step("sending the tier table to the new worker");
            if let Err(e) = self.send_tiers() {
                tracing::error!("cannot send the tier table to the new worker: {e}");
            }
        }
        for p in self.table.list() {
            step("sending the programs to the new worker");
            if let Err(e) = self.send_program(p.id) {
                tracing::error!(id = p.id, "cannot send the program to the new worker: {e}");
            }
        }
        step("");
        self.recoveries.fetch_add(1, Ordering::Relaxed);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        *lock(&self.last_restart) = (ms, warm);
        tracing::warn!(
            failed_jobs = failed,
            ms,
            warm,
            "recovered from the GPU fault"
        );
        self.warm_up();
    }

    /// After the kernel stopped: jobs still queued run (or are cancelled) on the host.
    fn drain_on_host(&self) {
        // The only consumer now; positions past the head that a dispatcher took out of
        // order are passed over (a batch pop would wait for them forever).
        let q = self.queue();
        let mut runner = self.runner();
        while let shm_maps::Alone::Taken(pos, d) = q.take_alone(|_| true) {
            runner.run_then(&d, || q.release(pos));
        }
    }
}

#[cfg(test)]
mod tests {
    //! The service side of the GPU protocol against a simulated device: the test writes
    //! the done log, forward ring and queue exactly as the kernel does, and checks what the
    //! host makes of it.
    use super::*;
    use shm_maps::layout::job_flags;
    use shm_maps::region::monotonic_ns;
    use shm_maps::{CompletionData, RegionConfig};

    fn shared(name: &str) -> Arc<Shared> {
        shared_on(name, 1, 0)
    }

    /// A stand-in worker process: `script` reads the command line from stdin and answers.
    fn fake_link(script: &str) -> Link {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh");
        Link {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child,
        }
    }

    /// The standby's activation has a deadline: a worker that never answers costs the
    /// limit, not the recovery; one that answers is read as before.
    #[test]
    fn an_activation_without_an_answer_gives_up_at_its_limit() {
        let mut silent = fake_link("read l; sleep 30");
        let t = Instant::now();
        let r = silent.request_within(&Cmd::Activate, Duration::from_millis(300));
        let took = t.elapsed();
        assert!(
            matches!(&r, Err(e) if e.contains("no answer within")),
            "{r:?}"
        );
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(5),
            "{took:?}"
        );
        let _ = silent.child.kill();
        let _ = silent.child.wait();
        let mut answers = fake_link(r#"read l; echo '{"msg":"ack","error":null}'; sleep 30"#);
        let r = answers.request_within(&Cmd::Activate, Duration::from_secs(20));
        assert!(matches!(r, Ok(Msg::Ack { error: None })), "{r:?}");
        let _ = answers.child.kill();
        let _ = answers.child.wait();
    }

    /// A recovery that activates the warm standby while `status` is asked for, over and
    /// over, finishes: the two once took the standby's and `last_status`'s locks in
    /// opposite orders and deadlocked (the fault check hung on an H200).
    #[test]
    fn status_during_a_standby_activation_does_not_deadlock() {
        let s = shared(&format!("bpftime-test-activate-{}", std::process::id()));
        let ready = serde_json::to_string(&Msg::Ready {
            region_dev: 0,
            value_sets: 0,
            status: CudaStatus::default(),
        })
        .unwrap();
        let status = serde_json::to_string(&Msg::Status(CudaStatus::default())).unwrap();
        // The standby answers `activate` after 200 ms, then every request with its status.
        *lock(&s.standby) = Some(fake_link(&format!(
            "read l; sleep 0.2; echo '{ready}'; while read l; do echo '{status}'; done"
        )));
        // Both sides on threads of their own: a deadlock must fail the test, not hang it.
        let (tx, rx) = std::sync::mpsc::channel();
        let (r, tx2) = (s.clone(), tx.clone());
        std::thread::spawn(move || {
            r.restart(0);
            let _ = tx.send("restart");
        });
        let q = s.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(600) {
                let _ = q.status();
            }
            let _ = tx2.send("status");
        });
        for _ in 0..2 {
            let done = rx.recv_timeout(Duration::from_secs(10));
            assert!(done.is_ok(), "the restart deadlocked against status()");
        }
        assert_eq!(s.recoveries.load(Ordering::Relaxed), 1);
        if let Some(mut l) = lock(&s.link).take() {
            let _ = l.child.kill();
            let _ = l.child.wait();
        }
    }

    /// The host side of the GPU serving queue `queue` of a region with `queues` queues.
    fn shared_on(name: &str, queues: u32, queue: u32) -> Arc<Shared> {
        let region = Arc::new(
            ShmRegion::create(
                name,
                &RegionConfig {
                    queue_capacity: 8,
                    max_clients: 2,
                    completions_per_client: 16,
                    arena_size: 16 << 20,
                    queues,
                    ..RegionConfig::default()
                },
                0o600,
                shm_maps::region::OnStale::Replace,
            )
            .expect("region"),
        );
        region.set_ready();
        // Nothing reopens it by name: the name goes now, so tests leave nothing in /dev/shm.
        let _ = region.unlink();
        Shared::new(
            region,
            Arc::new(ProgramTable::default()),
            Arc::new(TierBuffers::default()),
            CudaConfig {
                queue,
                ..CudaConfig::default()
            },
            0,
            PathBuf::from("/nonexistent"),
            Arc::new(Control::default()),
        )
    }

    /// A client's submit: stamp completion `c`, count it in flight, queue the job.
    fn submit(s: &Shared, c: u32, tag: u64, prog: u32) {
        submit_to(s, 0, c, tag, prog)
    }

    /// [`submit`] into queue `q`.
    fn submit_to(s: &Shared, q: u32, c: u32, tag: u64, prog: u32) {
        s.region
            .begin_completion_on(c, tag, monotonic_ns(), q)
            .unwrap();
        s.region.client(0).unwrap().add_submitted(1);
        let d = JobDesc {
            prog_id: prog,
            n: 1,
            in_rec_size: 8,
            input_len: 8,
            client: 0,
            completion: c,
            tag,
            ..Default::default()
        };
        assert_eq!(s.region.queue_at(q).unwrap().push_batch(&[d]), 1);
    }

    /// What the kernel does on taking the job at the head: mark RUNNING, move the head.
    fn gpu_take(s: &Shared, mark: bool, move_head: bool) -> JobDesc {
        let q = s.region.queue();
        let d = q.peek(q.head()).expect("a full slot");
        if mark {
            s.region.start_completion(d.completion).unwrap();
        }
        if move_head {
            q.set_head(q.head() + 1);
        }
        d
    }

    fn post_done(s: &Shared, pos: u64, comp: u32, status: i32, finalize: bool) {
        let e = s.done(pos);
        // SAFETY: test-only writes into the mailbox block, as the GPU makes them.
        unsafe {
            let p = e as *const DoneEntry as *mut DoneEntry;
            (*p).completion = comp;
            (*p).client = 0;
            (*p).status = status;
            (*p).err_pc = 3;
            (*p).err_record = 0;
            (*p).err_code = 1;
            (*p).finalize = finalize as u32;
            (*p).run_ns = 1000;
            (*p).records_done = (status == status::OK) as u64;
            (*p).records_failed = (status != status::OK) as u64;
        }
        e.seq.store(pos + 1, Ordering::Release);
    }

    #[test]
    fn done_log_counts_and_finalizes_errors() {
        let s = shared(&format!("bpftime-test-done-{}", std::process::id()));
        submit(&s, 0, 10, 1);
        submit(&s, 1, 11, 1);
        // Job 0 finished OK: the GPU wrote DONE itself.
        s.region.finish_completion(
            0,
            &CompletionData {
                tag: 10,
                r0: 5,
                ..Default::default()
            },
        );
        post_done(&s, 0, 0, status::OK, false);
        // Job 1 failed: fields written, DONE left to the host.
        post_done(&s, 1, 1, status::RUNTIME_ERROR, true);
        assert!(
            s.region.read_completion(1).is_none(),
            "not DONE before the host finalizes"
        );
        assert_eq!(s.drain_done(usize::MAX), 2);
        let c = s.region.read_completion(1).expect("finalized");
        let text = s.region.message(c.message).unwrap();
        assert!(
            text.contains("record 0") && text.contains("insn 3"),
            "{text}"
        );
        assert!(
            text.contains("budget"),
            "the interpreter's error is named: {text}"
        );
        assert_eq!(s.region.client(0).unwrap().in_flight(), 0);
        assert_eq!(s.stats.jobs_done.load(Ordering::Relaxed), 2);
        assert_eq!(s.stats.jobs_failed.load(Ordering::Relaxed), 1);
        assert_eq!(s.stats.records.load(Ordering::Relaxed), 1);
        assert_eq!(s.stats.records_failed.load(Ordering::Relaxed), 1);
        assert_eq!(s.ctl().done_consumed.load(Ordering::Relaxed), 2);
        assert_eq!(s.drain_done(usize::MAX), 0, "nothing new");
    }

    #[test]
    fn forwarded_jobs_get_the_host_runners_errors() {
        let s = shared(&format!("bpftime-test-fwd-{}", std::process::id()));
        submit(&s, 2, 7, 99); // no program 99
        let d = gpu_take(&s, true, true);
        s.region.queue().release(0);
        let e = s.fwd(0);
        // SAFETY: test-only write of the forward entry, as the GPU makes it.
        unsafe { (*(e as *const FwdEntry as *mut FwdEntry)).desc = d };
        e.seq.store(1, Ordering::Release);
        assert_eq!(s.drain_fwd(usize::MAX), 1);
        let c = s
            .region
            .read_completion(2)
            .expect("completed by the host runner");
        assert_eq!(c.status, status::UNKNOWN_PROGRAM);
        assert_eq!(c.tag, 7);
        assert_eq!(s.region.client(0).unwrap().in_flight(), 0);
    }

    /// Installs program `id` from assembly, with one array map kept in GPU memory when
    /// `device_map`.
    fn install(s: &Shared, id: u32, asm: &str, device_map: bool) {
        let mut program = ebpf::Program::from_insns("p", ebpf::asm::assemble(asm).unwrap());
        let mut maps = Vec::new();
        if device_map {
            let def = ebpf::MapDef {
                name: "counts".into(),
                kind: ebpf::MapKind::PerThreadArray,
                key_size: 4,
                value_size: 8,
                max_entries: 1,
                flags: 0,
                origin: ebpf::MapOrigin::Manual,
                init: None,
            };
            maps.push(ebpf::maps::create_local(&def, 1).unwrap());
            program.maps.push(def);
        }
        let vm = ebpf::interp::Vm::new(&program, maps.clone()).unwrap();
        s.table.install(crate::programs::Installed {
            id,
            name: format!("p{id}"),
            version: 1,
            program,
            exec: jit::cpu::Executor::new(vm, jit::cpu::Engine::Interp),
            device_maps: vec![device_map; maps.len()],
            tiers: vec![None; maps.len()],
            maps,
            object: Arc::new(Vec::new()),
            selector: None,
            stack_depth: 0,
        });
        // As `send_program` records once the worker acknowledged it.
        lock(&s.acked).insert(id, 1);
    }

    fn state_of(s: &Shared, c: u32) -> u32 {
        s.region
            .completion(c)
            .unwrap()
            .state
            .load(Ordering::Acquire)
    }

    #[test]
    fn the_host_serves_a_swaps_gap_in_order_and_hands_the_queue_back() {
        use shm_maps::layout::completion_state::SUBMITTED;
        let s = shared(&format!("bpftime-test-gap-{}", std::process::id()));
        install(&s, 1, "r0 = 42\nexit", false);
        install(&s, 2, "r0 = 7\nexit", true);
        // Positions 0..5: a job of program 1, one the GPU took ahead of the head (another
        // dispatcher's stripe), program 1 again, a program with a map in GPU memory, and
        // program 1 behind it.
        for (c, prog) in [(0, 1), (1, 1), (2, 1), (3, 2), (4, 1)] {
            submit(&s, c, 100 + c as u64, prog);
        }
        let q = s.queue();
        s.region.start_completion(1).unwrap();
        q.release(1);
        // No gap: the host takes nothing.
        assert_eq!(s.serve_gap(64), 0);
        assert_eq!(state_of(&s, 0), SUBMITTED);
        // The worker's kernel exited and it opened gap 1.
        s.ctl().gap_open.store(1, Ordering::Release);
        assert_eq!(s.serve_gap(64), 2);
        for c in [0, 2] {
            let done = s.region.read_completion(c).expect("run by the host");
            assert_eq!(
                (done.status, done.r0, done.tag),
                (status::OK, 42, 100 + c as u64)
            );
        }
        // The job of the program whose map lives in GPU memory waits for the GPU, and so
        // does the one behind it; the head names it.
        assert_eq!((state_of(&s, 3), state_of(&s, 4)), (SUBMITTED, SUBMITTED));
        assert_eq!(q.head(), 3);
        assert_eq!(s.ctl().gap_done.load(Ordering::Acquire), 0);
        // Open with nothing to take: still counted as work (the loop keeps spinning).
        assert_eq!(s.serve_gap(64), 1);
        // The worker asks for the queue back; the host answers on its next turn.
        s.ctl().gap_close.store(1, Ordering::Release);
        assert_eq!(s.serve_gap(64), 1);
        assert_eq!(s.ctl().gap_done.load(Ordering::Acquire), 1);
        assert_eq!(s.serve_gap(64), 0);
        assert_eq!(s.gap_jobs.load(Ordering::Relaxed), 2);
        // The resuming dispatchers find 0..3 taken and 3, 4 still queued.
        assert!((0..3).all(|p| q.peek(p).is_none()));
        assert_eq!(q.peek(3).map(|d| d.completion), Some(3));
        assert_eq!(q.peek(4).map(|d| d.completion), Some(4));
        assert_eq!(s.region.client(0).unwrap().in_flight(), 3);
    }

    #[test]
    fn the_host_stands_in_only_where_it_gives_the_gpus_answer() {
        let s = shared(&format!("bpftime-test-stand-in-{}", std::process::id()));
        install(&s, 1, "r0 = 42\nexit", false);
        install(&s, 2, "r0 = 7\nexit", true);
        install(&s, 3, "call 509\nexit", false);
        install(&s, 4, "r1 = 0\nr2 = 0\ncall 520\nexit", false);
        // A loop: bounded only by the instruction budget (1,000,000 by default).
        install(&s, 5, "r0 = 3\nr0 -= 1\nif r0 != 0 goto -2\nexit", false);
        let job = |prog, n, flags| JobDesc {
            prog_id: prog,
            n,
            flags,
            ..Default::default()
        };
        assert!(s.host_can_stand_in(&job(1, 1, 0)));
        assert!(s.host_can_stand_in(&job(1, GAP_MAX_RECORDS, job_flags::RESULTS)));
        // Unknown ids get the host runner's answer on either side.
        assert!(s.host_can_stand_in(&job(99, 1, 0)));
        assert!(!s.host_can_stand_in(&job(1, GAP_MAX_RECORDS + 1, 0)));
        assert!(!s.host_can_stand_in(&job(2, 1, 0)), "a map in GPU memory");
        assert!(!s.host_can_stand_in(&job(3, 1, 0)), "asks for its SM");
        assert!(!s.host_can_stand_in(&job(4, 1, 0)), "waits");
        assert!(s.host_can_stand_in(&job(5, 1, 0)), "one record of a loop");
        assert!(!s.host_can_stand_in(&job(5, 2, 0)), "two records of a loop");
        install(&s, 6, "call 5\nexit", false);
        assert!(!s.host_can_stand_in(&job(6, 1, 0)), "reads the clock");
        // A version the worker has not taken yet (a load or replace in flight), and an id
        // the worker still has although the table no longer does (an unload in flight).
        lock(&s.acked).insert(1, 0);
        assert!(!s.host_can_stand_in(&job(1, 1, 0)), "not the GPU's version");
        lock(&s.acked).insert(99, 1);
        assert!(!s.host_can_stand_in(&job(99, 1, 0)), "the GPU still has it");
        for f in [
            job_flags::DEVICE_INPUT,
            job_flags::DEVICE_OUTPUT,
            job_flags::MAILBOX_PING,
            job_flags::INJECT_FAULT,
            1 << job_flags::TIER_SHIFT,
        ] {
            assert!(!s.host_can_stand_in(&job(1, 1, f)), "flags {f:#x}");
        }
    }

    #[test]
    fn the_mailbox_thread_serves_a_gap_until_the_worker_takes_the_queue_back() {
        use shm_maps::layout::completion_state::SUBMITTED;
        let s = shared(&format!("bpftime-test-gap-loop-{}", std::process::id()));
        install(&s, 1, "r0 = 42\nexit", false);
        let m = s.clone();
        let mailbox = std::thread::spawn(move || m.mailbox_loop());
        // A gap opens (the worker's kernel has exited): jobs submitted now are answered
        // by the host.
        s.ctl().gap_open.store(1, Ordering::Release);
        for c in 0..6 {
            submit(&s, c, 1 + c as u64, 1);
            let t = Instant::now();
            while s.region.read_completion(c).is_none() {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "job {c} not served in the gap"
                );
                std::thread::yield_now();
            }
        }
        // The worker takes the queue back, as `Worker::close_gap` does.
        s.ctl().gap_close.store(1, Ordering::Release);
        let t = Instant::now();
        while s.ctl().gap_done.load(Ordering::Acquire) < 1 {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the gap was never handed back"
            );
            std::thread::yield_now();
        }
        // From now on the queue is the GPU's: a job submitted waits for it.
        submit(&s, 6, 7, 1);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(state_of(&s, 6), SUBMITTED);
        assert_eq!(s.gap_jobs.load(Ordering::Relaxed), 6);
        s.quit.store(true, Ordering::Release);
        mailbox.join().unwrap();
    }

    #[test]
    fn the_host_refuses_jobs_of_programs_with_maps_in_gpu_memory() {
        let s = shared(&format!("bpftime-test-devmap-{}", std::process::id()));
        install(&s, 1, "r0 = 0\nexit", true);
        // A job the GPU forwarded (say, STOP_ON_ERROR): the host must not run it on the
        // mirror of a GPU map.
        submit(&s, 3, 9, 1);
        let mut d = gpu_take(&s, true, true);
        d.flags |= job_flags::STOP_ON_ERROR;
        s.region.queue().release(0);
        let e = s.fwd(0);
        // SAFETY: test-only write of the forward entry, as the GPU makes it.
        unsafe { (*(e as *const FwdEntry as *mut FwdEntry)).desc = d };
        e.seq.store(1, Ordering::Release);
        assert_eq!(s.drain_fwd(usize::MAX), 1);
        let c = s.region.read_completion(3).expect("completed");
        assert_eq!(c.status, status::BAD_DESCRIPTOR);
        let text = s.region.message(c.message).unwrap();
        assert!(text.contains("keeps map `counts` in GPU memory"), "{text}");
    }

    #[test]
    fn a_fault_on_one_gpu_ends_only_that_gpus_jobs() {
        // Two GPUs, two queues; this host side serves queue 1.
        let s = shared_on(&format!("bpftime-test-fault2-{}", std::process::id()), 2, 1);
        assert_eq!(s.queue().capacity(), 8);
        // GPU 0 runs job 0 (RUNNING); GPU 1 runs job 1 (RUNNING) and has job 2 queued.
        submit_to(&s, 0, 0, 100, 1);
        let q0 = s.region.queue_at(0).unwrap();
        let d0 = q0.peek(q0.head()).unwrap();
        s.region.start_completion(d0.completion).unwrap();
        q0.set_head(1);
        submit_to(&s, 1, 1, 101, 1);
        submit_to(&s, 1, 2, 102, 1);
        let q1 = s.region.queue_at(1).unwrap();
        let d1 = q1.peek(q1.head()).unwrap();
        s.region.start_completion(d1.completion).unwrap();
        q1.set_head(1);
        assert_eq!((q0.load(), q1.load()), (1, 2));
        assert_eq!(s.fail_taken("test fault"), 1, "only GPU 1's running job");
        let r = s.region.read_completion(1).expect("ended");
        assert_eq!(r.status, status::DEVICE_FAULT);
        assert!(
            s.region.read_completion(0).is_none(),
            "GPU 0's job runs on, untouched"
        );
        assert!(
            s.region.read_completion(2).is_none(),
            "job 2 waits for GPU 1"
        );
        assert_eq!(
            (q0.load(), q1.load()),
            (1, 1),
            "the ended job leaves GPU 1's load"
        );
    }

    #[test]
    fn a_dead_worker_loses_and_duplicates_nothing() {
        let s = shared(&format!("bpftime-test-fault-{}", std::process::id()));
        for c in 0..5 {
            submit(&s, c, 100 + c as u64, 1);
        }
        // Job 0: taken and finished (DONE), but its slot never freed (short path).
        gpu_take(&s, true, true);
        s.region.finish_completion(
            0,
            &CompletionData {
                tag: 100,
                ..Default::default()
            },
        );
        post_done(&s, 0, 0, status::OK, false);
        // Job 1: taken, RUNNING, slot not freed.
        gpu_take(&s, true, true);
        // Job 2: taken and RUNNING, but the head store never landed.
        let q = s.region.queue();
        let d2 = q.peek(q.head()).unwrap();
        s.region.start_completion(d2.completion).unwrap();
        // Jobs 3 and 4: still queued.
        let failed = s.fail_taken("test fault");
        assert_eq!(failed, 2, "jobs 1 and 2");
        for (c, st) in [
            (0, status::OK),
            (1, status::DEVICE_FAULT),
            (2, status::DEVICE_FAULT),
        ] {
            let r = s.region.read_completion(c).expect("completed");
            assert_eq!(r.status, st, "completion {c}");
            assert_eq!(r.tag, 100 + c as u64, "the client's tag is kept");
        }
        for c in [3, 4] {
            assert!(
                s.region.read_completion(c).is_none(),
                "job {c} waits for the next worker"
            );
        }
        assert_eq!(q.head(), 3, "job 2 is taken, not run again");
        assert_eq!(q.len(), 2);
        assert_eq!(s.region.client(0).unwrap().in_flight(), 2);
        // Every slot is usable again: the producers can fill a whole lap.
        let mut jobs = Vec::new();
        for _ in 0..6 {
            jobs.push(JobDesc {
                completion: 9,
                client: 0,
                flags: job_flags::RESULTS,
                ..Default::default()
            });
        }
        assert_eq!(q.push_batch(&jobs), 6, "no wedged slot");
    }

    /// Several dispatchers take positions out of order, and the head they keep is only the
    /// least of their positions: recovery must still fail exactly the taken jobs, leave the
    /// waiting ones for the next worker, and let it skip the taken positions.
    #[test]
    fn out_of_order_dispatchers_lose_and_duplicate_nothing() {
        let s = shared(&format!("bpftime-test-fault-ooo-{}", std::process::id()));
        for c in 0..8 {
            submit(&s, c, 200 + c as u64, 1);
        }
        let q = s.region.queue();
        let mark = |pos: u64| {
            let d = q.peek(pos).expect("a full slot");
            s.region.start_completion(d.completion).unwrap();
            d
        };
        // Dispatcher 0 owns 0..4 and has taken 0 and 1 (both finished, slots freed), but
        // its head store never landed: the head is still 0.
        for pos in [0, 1] {
            let d = mark(pos);
            s.region.finish_completion(
                d.completion,
                &CompletionData {
                    tag: 200 + pos,
                    ..Default::default()
                },
            );
            q.release(pos);
        }
        // Dispatcher 1 owns 4..8: job 4 finished and freed; job 5 RUNNING, slot held (the
        // short path); job 6 RUNNING and freed (published to the ring); job 7 waits.
        let d4 = mark(4);
        s.region.finish_completion(
            d4.completion,
            &CompletionData {
                tag: 204,
                ..Default::default()
            },
        );
        q.release(4);
        mark(5);
        mark(6);
        q.release(6);
        // Jobs 2 and 3 wait in dispatcher 0's stripe, 7 in dispatcher 1's.
        assert_eq!(q.head(), 0);
        let failed = s.fail_taken("test fault");
        assert_eq!(failed, 2, "jobs 5 and 6, nothing else");
        for (c, st) in [(5, status::DEVICE_FAULT), (6, status::DEVICE_FAULT)] {
            let r = s.region.read_completion(c).expect("completed");
            assert_eq!(r.status, st, "completion {c}");
            assert_eq!(r.tag, 200 + c as u64);
        }
        for c in [2, 3, 7] {
            assert!(
                s.region.read_completion(c).is_none(),
                "job {c} waits for the next worker"
            );
        }
        assert_eq!(
            q.head(),
            2,
            "the head moved past the taken 0 and 1, to job 2"
        );
        // What the next worker's dispatchers see from the head: jobs 2, 3 and 7 full, the
        // positions taken before (4, 5, 6) past `pos + 1`, so skipped.
        let full: Vec<u64> = (2..8).filter(|&p| q.peek(p).is_some()).collect();
        assert_eq!(full, vec![2, 3, 7]);
        assert_eq!(
            q.finished(),
            5,
            "0, 1 below the head and 4, 5, 6 past it count as finished"
        );
        assert_eq!(q.load(), 3, "jobs 2, 3 and 7 still count as load");
    }

    /// A one-record job's DONE goes out before the dispatcher frees its slot (its fields
    /// with it, vouched for by the check word). A context lost in between leaves full slots
    /// past the head whose jobs finished: recovery must not run them again, must leave a
    /// newer job that reuses the completion alone, and must end a DONE whose fields never
    /// arrived.
    #[test]
    fn early_done_jobs_are_not_run_again() {
        let s = shared(&format!("bpftime-test-fault-early-{}", std::process::id()));
        for c in 0..4 {
            submit(&s, c, 300 + c as u64, 1);
        }
        let q = s.region.queue();
        let ok = |c: u32| CompletionData {
            tag: 300 + c as u64,
            r0: 7,
            ..Default::default()
        };
        // Job 0: RUNNING, then DONE with its fields; the slot never freed, the head never
        // moved.
        s.region.start_completion(0).unwrap();
        s.region.finish_completion(0, &ok(0)).unwrap();
        // Job 1 the same, and its client already saw it and reused completion 1 for a newer
        // job, queued behind job 3.
        s.region.start_completion(1).unwrap();
        s.region.finish_completion(1, &ok(1)).unwrap();
        assert_eq!(s.region.read_completion(1).unwrap().r0, 7);
        submit(&s, 1, 999, 1);
        // Job 2: DONE landed, its fields and check did not (the context died first).
        s.region.start_completion(2).unwrap();
        s.region.completion(2).unwrap().state.store(
            shm_maps::layout::completion_state::DONE_CHECKED,
            Ordering::Relaxed,
        );
        assert!(s.region.read_completion(2).is_none());
        let failed = s.fail_taken("test fault");
        assert_eq!(failed, 1, "job 2 only");
        assert_eq!(s.region.read_completion(0).unwrap().status, status::OK);
        let r2 = s.region.read_completion(2).expect("ended");
        assert_eq!((r2.status, r2.tag), (status::DEVICE_FAULT, 302));
        assert!(
            s.region.read_completion(1).is_none(),
            "the newer job in completion 1 waits"
        );
        assert_eq!(s.region.completion_tag(1), Some(999));
        assert_eq!(q.head(), 3, "jobs 0, 1 and 2 are taken, not run again");
        let full: Vec<u64> = (3..5).filter(|&p| q.peek(p).is_some()).collect();
        assert_eq!(full, vec![3, 4], "job 3 and the newer job wait");
        assert_eq!(q.peek(4).unwrap().tag, 999);
    }
}
