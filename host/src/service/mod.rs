//! The service behind `bpftime-super run --persistent`.
//!
//! ```text
//!            ┌────────────── control socket (JSON lines, mode 0600) ─────────────┐
//!  clients ──┤ load / replace / unload / list / map / alloc / status / stop      ├─▶ Service
//!            └───────────────────────────────────────────────────────────────────┘     │
//!  clients ──── JobDesc ──▶ /dev/shm/NAME queue ──▶ backend workers ──▶ completions ◀───┘
//! ```
//!
//! The service owns the region, the program table, the maps and the arena allocator. A
//! reaper thread keeps the heartbeat, and reclaims the slots and buffers of clients that
//! died once their queued jobs have completed.

mod checkpoint;
mod control;
pub mod fuzz;
mod maps;
pub mod metrics;

use crate::protocol::{Latency, ProgramInfo, StatusInfo};
use device::cpu::CpuBackend;
use device::cuda::{CudaBackend, CudaConfig, CudaStatus};
use device::programs::ProgramTable;
use device::stats::Snapshot;
use shm_maps::arena::{Arena, Owner};
use shm_maps::layout::{ARENA_ALIGN, client_state, state};
use shm_maps::{RegionConfig, ShmRegion};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Which backend `run` starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// A GPU when one is usable, else the CPU.
    Auto,
    /// Worker threads on the CPU.
    Cpu,
    /// The persistent kernel on a CUDA GPU (an error when there is none).
    Cuda,
}

/// The running backend.
pub(crate) enum Backend {
    Cpu(CpuBackend),
    /// One persistent kernel per GPU, each serving its own region queue (index = position).
    Cuda(Vec<CudaBackend>),
}

/// Service settings.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// Region name (`/dev/shm/NAME`, socket `/dev/shm/NAME.sock`).
    pub name: String,
    /// Backend.
    pub backend: BackendChoice,
    /// Worker threads of the CPU backend.
    pub workers: usize,
    /// Permission bits of the region and socket.
    pub mode: u32,
    /// Adopt a stale region left by a crashed service: its programs, maps, buffers and
    /// queued jobs come back (see `checkpoint`). A region that cannot be adopted (another
    /// layout version) is replaced.
    pub recover: bool,
    /// Region sizes.
    pub region: RegionConfig,
    /// Serve Prometheus metrics on this address.
    pub metrics: Option<std::net::SocketAddr>,
    /// Instruction budget per record; a record that exceeds it fails at run time.
    pub max_insns: u64,
    /// Engine of the CPU backend (and of host-side runs of the CUDA backend).
    pub engine: jit::cpu::Engine,
    /// CUDA backend settings (device ordinal, device arena, fault injection).
    pub cuda: CudaConfig,
    /// Several GPUs (`run --devices`): one persistent kernel and one region queue per
    /// ordinal listed. Empty: the one GPU `cuda.device`.
    pub devices: Vec<i32>,
}

impl ServiceConfig {
    /// The CUDA device ordinals to serve, one per region queue.
    pub fn device_list(&self) -> Vec<i32> {
        if self.devices.is_empty() {
            vec![self.cuda.device]
        } else {
            self.devices.clone()
        }
    }
}

/// Service start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The region could not be created.
    #[error(transparent)]
    Region(#[from] shm_maps::RegionError),
    /// `--backend cuda` and the GPU could not be used.
    #[error("cannot start the CUDA backend")]
    Cuda(#[from] device::cuda::DeviceError),
    /// `--recover` found a region it cannot adopt.
    #[error("{0}")]
    Recover(String),
    /// The settings contradict each other (several devices on the CPU backend, say).
    #[error("{0}")]
    Config(String),
    /// A socket, thread or file operation failed.
    #[error("{what}")]
    Io {
        /// What was attempted.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServiceError {
    let what = what.into();
    move |source| ServiceError::Io { what, source }
}

/// The socket path for a region name.
pub fn socket_path(name: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/{name}.sock"))
}

/// Unlinks the region it holds when dropped: a start that fails leaves no half-made region.
struct Unready(Option<Arc<ShmRegion>>);

impl Drop for Unready {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            let _ = r.unlink();
        }
    }
}

/// Mutable control-plane state, behind one lock: control requests are rare.
pub(crate) struct ControlState {
    pub next_id: u32,
    pub arena: Arena,
    pub placed: Vec<maps::Placed>,
    /// Device-resident buffers (CUDA backend), one arena per GPU.
    pub device_arena: Vec<Arena>,
    /// Program id → arena range of its object bytes (kept for `--recover`).
    pub objects: std::collections::HashMap<u32, (u64, u64)>,
}

/// A running service.
pub struct Service {
    pub(crate) cfg: ServiceConfig,
    pub(crate) region: Arc<ShmRegion>,
    pub(crate) table: Arc<ProgramTable>,
    pub(crate) state: Mutex<ControlState>,
    pub(crate) backend: Mutex<Option<Backend>>,
    /// Held while a device map's arena mirror is synced and read or updated: the mirror is
    /// one for every GPU, so a dump or update on one GPU must not interleave with another's.
    pub(crate) device_maps: Mutex<()>,
    /// Job buffers placed in an emulated tier (`alloc --placement cxl:…`, CPU backend).
    pub(crate) tier_buffers: Arc<device::tier::TierBuffers>,
    stats: Vec<Arc<device::stats::WorkerStats>>,
    /// Value sets of per-thread arrays: CPU workers, or GPU threads.
    pub(crate) value_sets: u32,
    backend_name: &'static str,
    recovered: Option<crate::protocol::RecoveryInfo>,
    started: Instant,
    stopping: AtomicBool,
    stopped: (Mutex<bool>, Condvar),
}

impl Service {
    /// Creates the region (or, with `recover`, adopts the one a dead service left),
    /// starts the backend, the control socket and the reaper.
    pub fn start(cfg: ServiceConfig) -> Result<Arc<Service>, ServiceError> {
        let mut cfg = cfg;
        let devices = cfg.device_list();
        if devices.len() > 1 {
            if cfg.backend == BackendChoice::Cpu {
                return Err(ServiceError::Config(
                    "--devices needs the CUDA backend (this service was asked for the CPU)".into(),
                ));
            }
            let mut seen = devices.clone();
            seen.sort_unstable();
            seen.dedup();
            if seen.len() != devices.len() {
                return Err(ServiceError::Config(format!(
                    "--devices lists a GPU twice: {devices:?}"
                )));
            }
            if devices.len() > shm_maps::layout::MAX_QUEUES as usize {
                return Err(ServiceError::Config(format!(
                    "--devices lists {} GPUs; at most {} are served",
                    devices.len(),
                    shm_maps::layout::MAX_QUEUES
                )));
            }
            let n = device::cuda::Gpu::count();
            if let Some(d) = devices.iter().find(|&&d| d < 0 || d >= n) {
                return Err(ServiceError::Config(if n == 0 {
                    "--devices needs GPUs, and the CUDA driver reports none on this machine \
                     (or there is no driver)"
                        .to_string()
                } else {
                    format!(
                        "--devices names GPU {d}, but the CUDA driver reports {n} GPU(s) \
                         (ordinals below {n})"
                    )
                }));
            }
            cfg.region.queues = devices.len() as u32;
        }
        let region = Arc::new(ShmRegion::create(
            &cfg.name,
            &cfg.region,
            cfg.mode,
            if cfg.recover {
                shm_maps::region::OnStale::Adopt
            } else {
                shm_maps::region::OnStale::Refuse
            },
        )?);
        // A start that fails from here on removes the region it made (a retry must not
        // find it half made); an adopted one stays for the next `--recover`.
        let mut unready = Unready(region.adopted_from().is_none().then(|| region.clone()));
        let table = Arc::new(ProgramTable::default());
        let adopted = match region.adopted_from() {
            Some(_) if region.queue_count() != cfg.region.queues.max(1) => {
                return Err(ServiceError::Recover(format!(
                    "--recover: the dead service served {} job queues (GPUs), this one is \
                     asked for {}; start it with the same --devices",
                    region.queue_count(),
                    cfg.region.queues.max(1)
                )));
            }
            Some(pid) => {
                let cp = checkpoint::read(&region)?;
                // Per-thread maps are laid out for the dead service's worker count.
                if cp.backend == "cpu" && cp.value_sets > 0 && cp.value_sets as usize != cfg.workers
                {
                    tracing::warn!(
                        workers = cp.value_sets,
                        "--recover: running as many CPU workers as the dead service did"
                    );
                    cfg.workers = cp.value_sets as usize;
                }
                Some((pid, cp))
            }
            None => None,
        };
        let want_cuda = match cfg.backend {
            BackendChoice::Cpu => {
                tracing::info!("backend: cpu (as asked)");
                false
            }
            BackendChoice::Cuda => true,
            // Several devices are GPUs by definition: no quiet fall-back to the CPU.
            BackendChoice::Auto if devices.len() > 1 => true,
            BackendChoice::Auto => {
                let (kind, why) = device::select_auto();
                tracing::info!("backend: {kind:?} ({why})");
                kind == device::BackendKind::Cuda
            }
        };
        let mut st = ControlState {
            next_id: 1,
            arena: Arena::new(region.header().arena_size, ARENA_ALIGN),
            placed: Vec::new(),
            device_arena: devices
                .iter()
                .map(|_| Arena::new(cfg.cuda.device_arena, 256))
                .collect(),
            objects: Default::default(),
        };
        // Programs and the queue are put back before any worker can take a job. The CUDA
        // backend's thread count is known only once it runs: until then, the dead
        // service's count stands in (checked below).
        let mut recovered = None;
        let tier_buffers = Arc::new(device::tier::TierBuffers::default());
        if let Some((pid, cp)) = &adopted {
            st.arena = checkpoint::arena(&region, cp)?;
            let sets = if want_cuda {
                cp.value_sets.max(1)
            } else {
                cfg.workers.max(1) as u32
            };
            let ctx = checkpoint::Ctx {
                region: &region,
                table: &table,
                value_sets: sets,
                engine: cfg.engine,
            };
            let mut info = checkpoint::restore(&ctx, &mut st, cp, *pid);
            let gpus = if want_cuda { devices.len() } else { 0 };
            checkpoint::tier_buffers(cp, &tier_buffers, gpus, &mut info.errors);
            recovered = Some(info);
        }
        let mut cuda = None;
        if want_cuda {
            match Self::start_gpus(
                &region,
                &table,
                &tier_buffers,
                &cfg,
                &devices,
                &mut st.arena,
            ) {
                Ok(b) => cuda = Some(b),
                Err(e) if cfg.backend == BackendChoice::Auto && devices.len() == 1 => {
                    let why =
                        std::error::Error::source(&e).map_or(e.to_string(), |c| c.to_string());
                    tracing::warn!("the CUDA backend did not start ({why}): using the CPU backend");
                }
                Err(e) => return Err(e),
            }
        }
        let (backend, stats, value_sets, backend_name) = match cuda {
            Some(gpus) => {
                let stats = gpus.iter().flat_map(|b| b.stats.clone()).collect();
                // Per-thread arrays are laid out once for every GPU: the most threads.
                let sets = gpus.iter().map(|b| b.value_sets()).max().unwrap_or(1);
                // A recovered program reaches the GPU worker now; per-thread maps laid out
                // for another thread count cannot be reused.
                if let Some(info) = recovered.as_mut() {
                    if adopted
                        .as_ref()
                        .is_some_and(|(_, cp)| cp.value_sets != sets)
                    {
                        info.errors.push(format!(
                            "the GPU runs {sets} threads, the dead service ran {}: per-thread \
                             maps of recovered programs are laid out for the old count",
                            adopted.as_ref().map_or(0, |(_, cp)| cp.value_sets)
                        ));
                    }
                    for p in table.list() {
                        for b in &gpus {
                            b.sync_program(p.id);
                        }
                    }
                }
                (Backend::Cuda(gpus), stats, sets, "cuda")
            }
            None => {
                let b = CpuBackend::start(
                    region.clone(),
                    table.clone(),
                    tier_buffers.clone(),
                    cfg.workers,
                    cfg.max_insns,
                )
                .map_err(io("cannot start worker threads"))?;
                let stats = b.stats.clone();
                (Backend::Cpu(b), stats, cfg.workers.max(1) as u32, "cpu")
            }
        };
        let svc = Arc::new(Service {
            stats,
            value_sets,
            backend_name,
            recovered,
            cfg,
            region,
            table,
            state: Mutex::new(st),
            backend: Mutex::new(Some(backend)),
            device_maps: Mutex::new(()),
            tier_buffers,
            started: Instant::now(),
            stopping: AtomicBool::new(false),
            stopped: (Mutex::new(false), Condvar::new()),
        });
        svc.save(&svc.state.lock().unwrap_or_else(|p| p.into_inner()));
        let path = socket_path(&svc.cfg.name);
        // The region was just created (or recovered), so any socket file is stale.
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path)
            .map_err(io(format!("cannot bind {}", path.display())))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(svc.cfg.mode))
            .map_err(io(format!("cannot chmod {}", path.display())))?;
        {
            let svc = svc.clone();
            std::thread::Builder::new()
                .name("bpftime-control".into())
                .spawn(move || control::serve(svc, listener))
                .map_err(io("cannot start the control thread"))?;
        }
        {
            let svc = svc.clone();
            std::thread::Builder::new()
                .name("bpftime-reaper".into())
                .spawn(move || svc.reaper())
                .map_err(io("cannot start the reaper thread"))?;
        }
        if let Some(addr) = svc.cfg.metrics {
            metrics::serve(svc.clone(), addr)
                .map_err(io(format!("cannot serve metrics on {addr}")))?;
        }
        svc.region.set_ready();
        unready.0 = None;
        tracing::info!(name = %svc.cfg.name, socket = %path.display(), "service ready");
        Ok(svc)
    }

    /// Starts one CUDA backend per device, each with its mailbox block in the arena and
    /// its region queue; on an error, those already started are stopped again.
    fn start_gpus(
        region: &Arc<ShmRegion>,
        table: &Arc<ProgramTable>,
        tiers: &Arc<device::tier::TierBuffers>,
        cfg: &ServiceConfig,
        devices: &[i32],
        arena: &mut Arena,
    ) -> Result<Vec<CudaBackend>, ServiceError> {
        let mut gpus: Vec<CudaBackend> = Vec::new();
        let mut mailboxes = Vec::new();
        let undo = |gpus: Vec<CudaBackend>, mailboxes: &[u64], arena: &mut Arena| {
            for b in gpus {
                b.stop(true);
            }
            for &m in mailboxes {
                let _ = arena.free(m, Owner::Service);
            }
        };
        for (queue, &device) in devices.iter().enumerate() {
            let mailbox = match arena.alloc(device::cuda::MAILBOX_BYTES, Owner::Service) {
                Ok(m) => m,
                Err(e) => {
                    undo(gpus, &mailboxes, arena);
                    return Err(ServiceError::Cuda(device::cuda::DeviceError::Call {
                        call: "arena",
                        code: format!("no room for the GPU mailboxes: {e}"),
                        log: String::new(),
                    }));
                }
            };
            mailboxes.push(mailbox);
            let c = CudaConfig {
                device,
                queue: queue as u32,
                shared_mirrors: devices.len() > 1,
                ..cfg.cuda.clone()
            };
            match CudaBackend::start(region.clone(), table.clone(), tiers.clone(), c, mailbox) {
                Ok(b) => gpus.push(b),
                Err(e) => {
                    undo(gpus, &mailboxes, arena);
                    return Err(ServiceError::Cuda(e));
                }
            }
        }
        if gpus.len() > 1 {
            tracing::info!(devices = ?devices, "one persistent kernel per GPU");
        }
        Ok(gpus)
    }

    /// Blocks until the service has stopped.
    pub fn wait(&self) {
        let (lock, cv) = &self.stopped;
        let mut done = lock.lock().unwrap_or_else(|p| p.into_inner());
        while !*done {
            done = cv.wait(done).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Stops: drains the queue (or cancels it with `now`), stops the workers, removes the
    /// region and the socket. Idempotent.
    pub fn stop(&self, now: bool) {
        if self.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::info!(now, "stopping");
        // ORDERING: clients check `state` before pushing; a job pushed just before this
        // store is still drained by the workers.
        self.region
            .header()
            .state
            .store(state::STOPPING, Ordering::SeqCst);
        if let Some(b) = self
            .backend
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            match b {
                Backend::Cpu(b) => b.stop(&self.region, now),
                // In parallel: each waits for its own queue to drain.
                Backend::Cuda(gpus) => std::thread::scope(|s| {
                    for b in gpus {
                        s.spawn(move || b.stop(now));
                    }
                }),
            }
        }
        self.region
            .header()
            .state
            .store(state::STOPPED, Ordering::Release);
        let _ = self.region.unlink();
        let _ = std::fs::remove_file(socket_path(&self.cfg.name));
        let (lock, cv) = &self.stopped;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
    }

    fn reaper(&self) {
        while !self.stopping.load(Ordering::Acquire) {
            self.region.heartbeat();
            self.reap_clients();
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if maps::collect(self, &mut st) > 0 {
                self.save(&st);
            }
            drop(st);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Marks dead clients and reclaims the slots and buffers of those with no jobs left.
    pub(crate) fn reap_clients(&self) {
        let max = self.region.header().max_clients;
        for slot in 0..max {
            let c = self.region.client(slot).expect("slot < max_clients");
            if shm_maps::client::is_dead(&self.region, slot) {
                tracing::warn!(slot, pid = c.pid.load(Ordering::Relaxed), "client died");
                let _ = c.state.compare_exchange(
                    client_state::ACTIVE,
                    client_state::DEAD,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
            }
            if c.state.load(Ordering::Acquire) == client_state::DEAD && c.in_flight() == 0 {
                let (freed, unplaced) = {
                    let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
                    let unplaced = self.tier_buffers.freed_slot(slot);
                    let n = st
                        .arena
                        .free_where(|o| matches!(o, Owner::Client { slot: s, .. } if s == slot));
                    if n > 0 {
                        self.save(&st);
                    }
                    (n, unplaced)
                };
                if unplaced > 0 {
                    control::sync_tier_buffers(self);
                }
                for a in &mut self
                    .state
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .device_arena
                {
                    a.free_where(|o| matches!(o, Owner::Client { slot: s, .. } if s == slot));
                }
                // Completion slots of the dead client go back to FREE for the next owner.
                for i in self.region.completion_range(slot) {
                    if let Some(comp) = self.region.completion(i) {
                        comp.state
                            .store(shm_maps::layout::completion_state::FREE, Ordering::Relaxed);
                    }
                }
                c.pid.store(0, Ordering::Relaxed);
                c.state.store(client_state::FREE, Ordering::Release);
                tracing::info!(slot, freed, "reclaimed a dead client's slot and buffers");
            }
        }
    }

    /// Current status.
    pub fn status(&self) -> StatusInfo {
        // One request to each GPU worker serves the tiers, the GPU section and its queue.
        let gpus: Vec<(CudaStatus, u64)> = self
            .with_gpus(|g| {
                g.iter()
                    .map(|b| {
                        let done = b
                            .stats
                            .iter()
                            .map(|s| s.jobs_done.load(Ordering::Relaxed))
                            .sum();
                        (b.status(), done)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let gpu = gpus.first().map(|(g, _)| g.clone());
        let ordinals = self.cfg.device_list();
        let queues = (0..self.region.queue_count())
            .filter_map(|i| self.region.queue_at(i).map(|q| (i, q)))
            .map(|(i, q)| {
                let g = gpus.get(i as usize);
                crate::protocol::QueueInfo {
                    queue: i,
                    device: g.and(ordinals.get(i as usize).copied()),
                    depth: q.len(),
                    load: q.load(),
                    submitted: q.tail(),
                    done: q.finished(),
                    jobs_done: g.map_or(0, |(_, d)| *d),
                    gpu: g.and_then(|(s, _)| serde_json::to_value(s).ok()),
                }
            })
            .collect();
        let snap = Snapshot::of(self.stats.iter().map(|s| &s.latency));
        let sum = |f: fn(&device::stats::WorkerStats) -> u64| self.stats.iter().map(|s| f(s)).sum();
        let q = self.region.queue();
        let max = self.region.header().max_clients;
        let clients = (0..max)
            .filter(|&i| {
                self.region
                    .client(i)
                    .map(|c| c.state.load(Ordering::Relaxed) == client_state::ACTIVE)
                    .unwrap_or(false)
            })
            .count() as u32;
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        StatusInfo {
            name: self.cfg.name.clone(),
            backend: self.backend_name.into(),
            // CPU: worker threads; CUDA: threads of the persistent kernel.
            workers: if self.backend_name == "cuda" {
                self.value_sets as usize
            } else {
                self.stats.len()
            },
            uptime_s: self.started.elapsed().as_secs_f64(),
            programs: self.programs_with(gpu.as_ref().map_or(&[][..], |g| &g.programs)),
            queue_depth: (0..self.region.queue_count())
                .filter_map(|i| self.region.queue_at(i))
                .map(|q| q.len())
                .sum(),
            queue_capacity: q.capacity(),
            jobs_done: sum(|s| s.jobs_done.load(Ordering::Relaxed)),
            jobs_failed: sum(|s| s.jobs_failed.load(Ordering::Relaxed)),
            records: sum(|s| s.records.load(Ordering::Relaxed)),
            records_failed: sum(|s| s.records_failed.load(Ordering::Relaxed)),
            clients,
            arena_used: st.arena.used_bytes(),
            arena_size: st.arena.size(),
            latency: Latency {
                count: snap.count(),
                p50_ns: snap.quantile(0.50),
                p90_ns: snap.quantile(0.90),
                p99_ns: snap.quantile(0.99),
                p999_ns: snap.quantile(0.999),
            },
            gpu: gpu.and_then(|g| serde_json::to_value(g).ok()),
            recovered: self.recovered.clone(),
            queues,
        }
    }

    /// Runs `f` on the first GPU's CUDA backend, if that is the backend running.
    pub(crate) fn with_cuda<T>(&self, f: impl FnOnce(&CudaBackend) -> T) -> Option<T> {
        self.with_gpus(|g| g.first().map(f)).flatten()
    }

    /// Runs `f` on every GPU's CUDA backend (in queue order), if that is the backend
    /// running.
    pub(crate) fn with_gpus<T>(&self, f: impl FnOnce(&[CudaBackend]) -> T) -> Option<T> {
        match self
            .backend
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            Some(Backend::Cuda(g)) => Some(f(g)),
            _ => None,
        }
    }

    /// Runs `f` on GPU `device` (an index into the service's GPUs), or says why not.
    pub(crate) fn on_gpu<T>(
        &self,
        device: u32,
        f: impl FnOnce(&CudaBackend) -> Result<T, String>,
    ) -> Result<T, String> {
        self.with_gpus(|g| match g.get(device as usize) {
            Some(b) => f(b),
            None => Err(format!(
                "no GPU {device}: this service runs {} (devices 0..{})",
                g.len(),
                g.len()
            )),
        })
        .unwrap_or_else(|| Err("this service runs on the CPU backend, not on a GPU".into()))
    }

    /// How many GPUs serve (0 on the CPU backend).
    pub fn gpu_count(&self) -> usize {
        self.with_gpus(|g| g.len()).unwrap_or(0)
    }

    /// CUDA backend: builds and swaps a native generation now on every GPU, and returns
    /// the first GPU's timings (`None` on the CPU backend).
    pub fn cuda_swap_now(&self) -> Option<Result<device::cuda::SwapTimes, String>> {
        self.with_gpus(|g| {
            let all: Vec<_> = g.iter().map(|b| b.swap_now()).collect();
            match all.iter().find(|r| r.is_err()) {
                Some(Err(e)) => Err(e.clone()),
                _ => all.into_iter().next().unwrap_or(Err("no GPU".into())),
            }
        })
    }

    /// Tells the backend that program `id` was installed, replaced or unloaded.
    pub(crate) fn program_changed(&self, id: u32) {
        self.with_gpus(|g| g.iter().for_each(|b| b.sync_program(id)));
    }

    /// The installed programs (with their GPU tier on the CUDA backend: the first GPU's).
    pub fn programs(&self) -> Vec<ProgramInfo> {
        let tiers = self.with_cuda(|b| b.status().programs).unwrap_or_default();
        self.programs_with(&tiers)
    }

    /// The installed programs, tiers taken from a GPU status already read.
    fn programs_with(&self, tiers: &[(u32, u32, device::cuda::Tier)]) -> Vec<ProgramInfo> {
        self.table
            .list()
            .iter()
            .map(|p| {
                let mut i = control::info(p);
                i.tier = tiers
                    .iter()
                    .find(|(id, v, _)| *id == p.id && *v == p.version)
                    .and_then(|(_, _, t)| serde_json::to_value(t).ok())
                    .and_then(|v| v.as_str().map(str::to_string));
                i
            })
            .collect()
    }
}
