//! Creating, opening and viewing the named region in `/dev/shm`.
//!
//! The service creates the region (`O_CREAT | O_EXCL`, mode 0600 unless told otherwise),
//! lays it out from a [`RegionConfig`], and marks it ready. Clients open it by name and check
//! the magic, the layout version and the header size before touching anything else.
//!
//! A region whose service is gone (its pid is not running, or runs another program since
//! the start time differs) is *stale*: [`ShmRegion::create`] refuses it with
//! [`RegionError::Stale`] unless asked to recover, and refuses a region whose service is
//! alive with [`RegionError::AlreadyRunning`].

use crate::layout::{
    self, CHECKPOINT_MAGIC, CheckpointHeader, ClientSlot, Completion, HEADER_SIZE, JobDesc,
    LAYOUT_VERSION, MAGIC, MapEntry, Message, QueueHeader, QueueSlot, RegionHeader,
};
use crate::queue::JobQueue;
use crate::sync::Ordering;
use memmap2::MmapMut;
use rustix::fs::Mode;
use rustix::shm;
use std::fs::File;
use std::ptr::NonNull;

/// What [`ShmRegion::create`] does with a region left by an owner that is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnStale {
    /// Refuse with [`RegionError::Stale`] (the service without `--recover`).
    Refuse,
    /// Unlink it and lay out a new one (trace sessions, tests).
    Replace,
    /// Adopt it as it is, for a service started with `--recover`; a region of another
    /// layout is replaced.
    Adopt,
}

/// Sizes of the parts of a region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionConfig {
    /// Queue slots (rounded up to a power of two).
    pub queue_capacity: u32,
    /// Client slots.
    pub max_clients: u32,
    /// Completion slots per client: its maximum number of jobs in flight.
    pub completions_per_client: u32,
    /// Error-message slots.
    pub message_slots: u32,
    /// Map directory entries.
    pub max_maps: u32,
    /// Largest record count per job.
    pub max_records: u32,
    /// Data arena bytes.
    pub arena_size: u64,
    /// Bytes of each of the two checkpoint halves (the service's control-plane state for
    /// `run --recover`: programs, map placement, buffer allocations).
    pub checkpoint_size: u64,
    /// Job queues: one per GPU of a multi-GPU service, else 1 (at most
    /// [`layout::MAX_QUEUES`]).
    pub queues: u32,
}

impl Default for RegionConfig {
    fn default() -> Self {
        RegionConfig {
            queue_capacity: 4096,
            max_clients: 64,
            completions_per_client: 1024,
            message_slots: 1024,
            max_maps: 256,
            max_records: 1 << 30,
            arena_size: 1 << 30,
            checkpoint_size: 1 << 20,
            queues: 1,
        }
    }
}

/// Region failures.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// A system call failed.
    #[error("{call} on /dev/shm/{name} failed")]
    Sys {
        /// What was attempted.
        call: &'static str,
        /// Region name.
        name: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The name cannot be used for a shared-memory object.
    #[error("bad region name `{name}`: expected 1-200 characters of [A-Za-z0-9._-]")]
    BadName {
        /// The name given.
        name: String,
    },
    /// Another service owns the region.
    #[error("a service named `{name}` is already running (pid {pid})")]
    AlreadyRunning {
        /// Region name.
        name: String,
        /// The running service's pid.
        pid: u32,
    },
    /// The checkpoint area holds no usable checkpoint.
    #[error("/dev/shm/{name}: no usable checkpoint: {why}")]
    Checkpoint {
        /// Region name.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// The region was left behind by a service that is gone.
    #[error(
        "/dev/shm/{name} was left by a service that is no longer running (pid {pid}); \
         start with --recover to replace it, or remove /dev/shm/{name}"
    )]
    Stale {
        /// Region name.
        name: String,
        /// The dead service's pid.
        pid: u32,
    },
    /// The object is not a bpftime-super region, or one of another layout.
    #[error("/dev/shm/{name} is not a usable region: {why}")]
    Incompatible {
        /// Region name.
        name: String,
        /// What did not match.
        why: String,
    },
    /// The service has not finished laying the region out, or has stopped.
    #[error("the service of `{name}` is not ready (state {state})")]
    NotReady {
        /// Region name.
        name: String,
        /// The header's state.
        state: u32,
    },
}

/// Offsets computed from a config.
#[derive(Clone, Copy, Debug)]
struct Offsets {
    queue: u64,
    clients: u64,
    completions: u64,
    messages: u64,
    maps: u64,
    checkpoint: u64,
    arena: u64,
    total: u64,
}

fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

impl RegionConfig {
    fn offsets(&self) -> Offsets {
        let cap = self.queue_capacity.max(2).next_power_of_two() as u64;
        let queue = HEADER_SIZE as u64;
        let clients = align_up(
            queue
                + self.queue_count() as u64
                    * (size_of::<QueueHeader>() as u64 + cap * size_of::<QueueSlot>() as u64),
            128,
        );
        let completions = align_up(
            clients + self.max_clients as u64 * size_of::<ClientSlot>() as u64,
            128,
        );
        let messages = align_up(
            completions
                + self.max_clients as u64
                    * self.completions_per_client as u64
                    * size_of::<Completion>() as u64,
            128,
        );
        let maps = align_up(
            messages + self.message_slots as u64 * size_of::<Message>() as u64,
            128,
        );
        let checkpoint = align_up(
            maps + self.max_maps as u64 * size_of::<MapEntry>() as u64,
            4096,
        );
        let arena = align_up(checkpoint + 2 * self.checkpoint_half(), 4096);
        let total = align_up(arena + self.arena_size, 4096);
        Offsets {
            queue,
            clients,
            completions,
            messages,
            maps,
            checkpoint,
            arena,
            total,
        }
    }

    /// The number of queues laid out: `queues` within 1..=MAX_QUEUES.
    fn queue_count(&self) -> u32 {
        self.queues.clamp(1, layout::MAX_QUEUES)
    }

    /// One checkpoint half, rounded to pages and at least a header and a page of payload.
    fn checkpoint_half(&self) -> u64 {
        align_up(
            self.checkpoint_size
                .max(size_of::<CheckpointHeader>() as u64 + 4096),
            4096,
        )
    }
}

/// A mapped region.
pub struct ShmRegion {
    name: String,
    map: MmapMut,
    owner: bool,
    adopted_from: Option<u32>,
}

// SAFETY: the region is plain memory whose shared words are atomics; every accessor hands
// out references to atomics or copies, and raw-pointer accessors document their contracts.
unsafe impl Send for ShmRegion {}
// SAFETY: as above; concurrent use from several threads is the point of the layout.
unsafe impl Sync for ShmRegion {}

fn check_name(name: &str) -> Result<(), RegionError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && name != "."
        && name != "..";
    if ok {
        Ok(())
    } else {
        Err(RegionError::BadName { name: name.into() })
    }
}

fn sys(call: &'static str, name: &str) -> impl FnOnce(rustix::io::Errno) -> RegionError {
    let name = name.to_string();
    move |e| RegionError::Sys {
        call,
        name,
        source: e.into(),
    }
}

impl ShmRegion {
    /// Creates and lays out a new region; `stale` says what to do with a region whose
    /// owner is gone (see [`OnStale`]).
    pub fn create(
        name: &str,
        cfg: &RegionConfig,
        mode: u32,
        stale: OnStale,
    ) -> Result<ShmRegion, RegionError> {
        let recover = stale != OnStale::Refuse;
        check_name(name)?;
        let path = format!("/{name}");
        let fd = match shm::open(
            &path,
            shm::OFlags::CREATE | shm::OFlags::EXCL | shm::OFlags::RDWR,
            Mode::from_raw_mode(mode),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::EXIST) => {
                match ShmRegion::open(name) {
                    Ok(mut existing) => {
                        let pid = existing.header().service_pid.load(Ordering::Relaxed);
                        if existing.service_alive() {
                            return Err(RegionError::AlreadyRunning {
                                name: name.into(),
                                pid,
                            });
                        }
                        if !recover {
                            return Err(RegionError::Stale {
                                name: name.into(),
                                pid,
                            });
                        }
                        if stale == OnStale::Replace {
                            tracing::warn!(name, pid, "replacing a stale region");
                        } else {
                            match existing.adopt(mode) {
                                Ok(()) => {
                                    tracing::warn!(
                                        name,
                                        pid,
                                        "adopting the region left by a dead service"
                                    );
                                    return Ok(existing);
                                }
                                Err(why) => tracing::warn!(
                                    name,
                                    pid,
                                    "the stale region cannot be adopted ({why}): replacing it, \
                                 its programs and maps are lost"
                                ),
                            }
                        }
                    }
                    Err(RegionError::NotReady { .. } | RegionError::Incompatible { .. })
                        if recover =>
                    {
                        tracing::warn!(name, "replacing an unusable region");
                    }
                    Err(RegionError::NotReady { state, .. }) if state == layout::state::STOPPED => {
                        tracing::info!(name, "replacing a cleanly stopped region");
                    }
                    Err(e) => return Err(e),
                }
                shm::unlink(&path).map_err(sys("shm_unlink", name))?;
                shm::open(
                    &path,
                    shm::OFlags::CREATE | shm::OFlags::EXCL | shm::OFlags::RDWR,
                    Mode::from_raw_mode(mode),
                )
                .map_err(sys("shm_open", name))?
            }
            Err(e) => return Err(sys("shm_open", name)(e)),
        };
        // fchmod: shm_open's mode is filtered by the umask.
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(sys("fchmod", name))?;
        let off = cfg.offsets();
        rustix::fs::ftruncate(&fd, off.total).map_err(sys("ftruncate", name))?;
        let file = File::from(fd);
        // SAFETY: the file is a fresh shared-memory object of `off.total` bytes that only
        // bpftime-super processes map; all shared access goes through atomics or the
        // documented ownership protocol.
        let map = unsafe { MmapMut::map_mut(&file) }.map_err(|source| RegionError::Sys {
            call: "mmap",
            name: name.into(),
            source,
        })?;
        let region = ShmRegion {
            name: name.into(),
            map,
            owner: true,
            adopted_from: None,
        };
        region.lay_out(cfg, &off);
        Ok(region)
    }

    fn lay_out(&self, cfg: &RegionConfig, off: &Offsets) {
        let base = self.map.as_ptr() as *mut RegionHeader;
        // SAFETY: the mapping is at least HEADER_SIZE bytes, page aligned, freshly zeroed by
        // ftruncate, and nobody else can see it before `state` becomes READY.
        let h = unsafe { &mut *base };
        h.magic = MAGIC;
        h.version = LAYOUT_VERSION;
        h.header_size = size_of::<RegionHeader>() as u32;
        h.total_size = off.total;
        h.queue_capacity = cfg.queue_capacity.max(2).next_power_of_two();
        h.queue_count = cfg.queue_count();
        h.max_clients = cfg.max_clients;
        h.completions_per_client = cfg.completions_per_client;
        h.message_slots = cfg.message_slots;
        h.max_maps = cfg.max_maps;
        h.max_records = cfg.max_records;
        h.queue_off = off.queue;
        h.clients_off = off.clients;
        h.completions_off = off.completions;
        h.messages_off = off.messages;
        h.maps_off = off.maps;
        h.checkpoint_off = off.checkpoint;
        h.checkpoint_size = cfg.checkpoint_half();
        h.arena_off = off.arena;
        h.arena_size = off.total - off.arena;
        h.service_pid.store(std::process::id(), Ordering::Relaxed);
        h.service_start.store(
            process_start_time(std::process::id()).unwrap_or(0),
            Ordering::Relaxed,
        );
        for q in 0..h.queue_count {
            self.queue_at(q).expect("laid out above").init();
        }
        self.heartbeat();
    }

    /// Takes over a stale region (its service is dead) for `run --recover`: checks that the
    /// checkpoint area and the arena lie inside the object, then makes this process its
    /// service (pid, start time, heartbeat) with the state `INITIALIZING`, so clients do
    /// not submit until the new service has repaired the queue and calls
    /// [`ShmRegion::set_ready`]. Queue, completions, clients, map directory and arena are
    /// kept as they are.
    fn adopt(&mut self, mode: u32) -> Result<(), String> {
        let h = self.header();
        let len = self.map.len() as u64;
        let cp_end = h
            .checkpoint_size
            .checked_mul(2)
            .and_then(|b| b.checked_add(h.checkpoint_off));
        if h.checkpoint_size < size_of::<CheckpointHeader>() as u64
            || cp_end.is_none_or(|e| e > h.arena_off)
            || h.maps_off > h.checkpoint_off
        {
            return Err("its checkpoint area is not inside the region".into());
        }
        if h.arena_off.checked_add(h.arena_size) != Some(len) {
            return Err("its arena does not end at the end of the object".into());
        }
        let path = format!("/{}", self.name);
        // Permissions as asked for the new service (the object is reused, not recreated).
        if let Ok(fd) = shm::open(path.as_str(), shm::OFlags::RDWR, Mode::empty()) {
            let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode));
        }
        let h = self.header();
        let dead = h.service_pid.load(Ordering::Relaxed);
        h.state
            .store(layout::state::INITIALIZING, Ordering::Release);
        h.service_pid.store(std::process::id(), Ordering::Relaxed);
        h.service_start.store(
            process_start_time(std::process::id()).unwrap_or(0),
            Ordering::Relaxed,
        );
        h.recoveries.fetch_add(1, Ordering::Relaxed);
        self.heartbeat();
        self.owner = true;
        self.adopted_from = Some(dead);
        Ok(())
    }

    /// The pid of the dead service whose region [`ShmRegion::create`] adopted, if it
    /// adopted one instead of laying out a new region.
    pub fn adopted_from(&self) -> Option<u32> {
        self.adopted_from
    }

    fn checkpoint_half_ptr(&self, seq: u64) -> *mut CheckpointHeader {
        let h = self.header();
        self.at::<CheckpointHeader>(h.checkpoint_off + (seq % 2) * h.checkpoint_size)
            as *mut CheckpointHeader
    }

    /// Service side: stores `payload` as the newest checkpoint. Only the service writes
    /// checkpoints, one at a time (the caller serialises them).
    pub fn write_checkpoint(&self, payload: &[u8]) -> Result<u64, RegionError> {
        let h = self.header();
        let room = h.checkpoint_size - size_of::<CheckpointHeader>() as u64;
        if payload.len() as u64 > room {
            return Err(RegionError::Checkpoint {
                name: self.name.clone(),
                why: format!(
                    "{} bytes do not fit the {room} bytes of a half (raise checkpoint_size)",
                    payload.len()
                ),
            });
        }
        let seq = h.checkpoint_seq.load(Ordering::Relaxed) + 1;
        let p = self.checkpoint_half_ptr(seq);
        // SAFETY: the half lies inside the mapping (laid out, or checked by `adopt`); it is
        // the inactive one, which no reader trusts until `checkpoint_seq` names it.
        unsafe {
            let data = (p as *mut u8).add(size_of::<CheckpointHeader>());
            std::ptr::copy_nonoverlapping(payload.as_ptr(), data, payload.len());
            p.write(CheckpointHeader {
                magic: CHECKPOINT_MAGIC,
                seq,
                len: payload.len() as u64,
                hash: fnv1a(payload),
            });
        }
        // ORDERING: release publishes the half written above; pairs with the acquire in
        // `read_checkpoint` (of a later service, after this one died).
        h.checkpoint_seq.store(seq, Ordering::Release);
        Ok(seq)
    }

    /// The newest checkpoint's payload: `None` when none was ever written, an error when
    /// the area is corrupt (wrong magic, sequence, length or hash).
    pub fn read_checkpoint(&self) -> Result<Option<Vec<u8>>, RegionError> {
        let h = self.header();
        let seq = h.checkpoint_seq.load(Ordering::Acquire);
        if seq == 0 {
            return Ok(None);
        }
        let bad = |why: String| RegionError::Checkpoint {
            name: self.name.clone(),
            why,
        };
        // SAFETY: the half lies inside the mapping; it is only read.
        let head = unsafe { self.checkpoint_half_ptr(seq).read() };
        if head.magic != CHECKPOINT_MAGIC || head.seq != seq {
            return Err(bad(format!(
                "half {} holds magic {:#x} and sequence {}, expected {seq}",
                seq % 2,
                head.magic,
                head.seq
            )));
        }
        if head.len > h.checkpoint_size - size_of::<CheckpointHeader>() as u64 {
            return Err(bad(format!("length {} exceeds the half", head.len)));
        }
        let mut v = vec![0u8; head.len as usize];
        // SAFETY: `len` bytes after the header lie inside the half (checked above).
        unsafe {
            let data =
                (self.checkpoint_half_ptr(seq) as *const u8).add(size_of::<CheckpointHeader>());
            std::ptr::copy_nonoverlapping(data, v.as_mut_ptr(), v.len());
        }
        if fnv1a(&v) != head.hash {
            return Err(bad("the payload does not match its hash".into()));
        }
        Ok(Some(v))
    }

    /// Marks the region ready for clients.
    pub fn set_ready(&self) {
        // ORDERING: release publishes the layout; pairs with the acquire load in `open`.
        self.header()
            .state
            .store(layout::state::READY, Ordering::Release);
    }

    /// Opens an existing region by name.
    pub fn open(name: &str) -> Result<ShmRegion, RegionError> {
        Self::open_inner(name, false)
    }

    /// Opens the region of the service this process works for (the service's GPU worker
    /// process): like [`ShmRegion::open`], but also while the service is still starting.
    pub fn open_as_helper(name: &str) -> Result<ShmRegion, RegionError> {
        Self::open_inner(name, true)
    }

    /// Helper side: records this process as the service's live helper (the one consuming
    /// the queue), so that a service recovering the region waits for it to exit.
    pub fn claim_helper(&self) {
        let h = self.header();
        let pid = std::process::id();
        h.helper_start
            .store(process_start_time(pid).unwrap_or(0), Ordering::Relaxed);
        h.helper_pid.store(pid, Ordering::Release);
    }

    /// Recovery: waits up to `grace` for the dead service's helper (if one still runs) to
    /// exit, then kills it, so that nothing consumes the queue behind the new service's
    /// back. Returns the helper's pid if there was one.
    pub fn retire_helper(&self, grace: std::time::Duration) -> Option<u32> {
        let pid = self.live_helper()?;
        let t = std::time::Instant::now();
        while self.live_helper().is_some() && t.elapsed() < grace {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        if self.live_helper().is_some() {
            tracing::warn!(
                pid,
                "the dead service's helper is still running: killing it"
            );
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            let t = std::time::Instant::now();
            while self.live_helper().is_some() && t.elapsed() < grace {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        Some(pid)
    }

    /// The helper process recorded by [`ShmRegion::claim_helper`], if it still runs.
    pub fn live_helper(&self) -> Option<u32> {
        let h = self.header();
        let pid = h.helper_pid.load(Ordering::Acquire);
        process_alive(pid, h.helper_start.load(Ordering::Relaxed)).then_some(pid)
    }

    fn open_inner(name: &str, starting: bool) -> Result<ShmRegion, RegionError> {
        check_name(name)?;
        let fd = shm::open(format!("/{name}"), shm::OFlags::RDWR, Mode::empty())
            .map_err(sys("shm_open", name))?;
        let file = File::from(fd);
        let len = file
            .metadata()
            .map_err(|source| RegionError::Sys {
                call: "fstat",
                name: name.into(),
                source,
            })?
            .len();
        let bad = |why: String| RegionError::Incompatible {
            name: name.into(),
            why,
        };
        if len < HEADER_SIZE as u64 {
            return Err(bad(format!(
                "{len} bytes, smaller than the {HEADER_SIZE}-byte header"
            )));
        }
        // SAFETY: see `create`; the object is at least a header long.
        let map = unsafe { MmapMut::map_mut(&file) }.map_err(|source| RegionError::Sys {
            call: "mmap",
            name: name.into(),
            source,
        })?;
        let region = ShmRegion {
            name: name.into(),
            map,
            owner: false,
            adopted_from: None,
        };
        let h = region.header();
        // ORDERING: acquire pairs with `set_ready`, making the layout fields visible.
        let state = h.state.load(Ordering::Acquire);
        if h.magic != MAGIC {
            return Err(bad(format!("magic {:#x}, expected {MAGIC:#x}", h.magic)));
        }
        if h.version != LAYOUT_VERSION {
            return Err(bad(format!(
                "layout version {}, this build speaks {LAYOUT_VERSION}",
                h.version
            )));
        }
        if h.header_size as usize != size_of::<RegionHeader>() {
            return Err(bad(format!(
                "header size {}, expected {}",
                h.header_size,
                size_of::<RegionHeader>()
            )));
        }
        if (state == layout::state::INITIALIZING && !starting) || state == layout::state::STOPPED {
            return Err(RegionError::NotReady {
                name: name.into(),
                state,
            });
        }
        if h.total_size != len || h.arena_off.checked_add(h.arena_size) != Some(len) {
            return Err(bad(format!(
                "header says {} bytes, the object has {len}",
                h.total_size
            )));
        }
        check_layout(h, len).map_err(bad)?;
        Ok(region)
    }

    /// The region name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The header.
    pub fn header(&self) -> &RegionHeader {
        // SAFETY: the mapping starts with a RegionHeader (checked in `open`, written in
        // `create`), is page aligned, and lives as long as `self`.
        unsafe { &*(self.map.as_ptr() as *const RegionHeader) }
    }

    fn at<T>(&self, off: u64) -> *const T {
        debug_assert!(off as usize + size_of::<T>() <= self.map.len());
        // SAFETY: callers pass offsets computed from the validated header.
        unsafe { self.map.as_ptr().add(off as usize) as *const T }
    }

    /// The first (on a one-GPU or CPU service, the only) job queue.
    pub fn queue(&self) -> JobQueue<'_> {
        self.queue_at(0).expect("a region has at least one queue")
    }

    /// Job queue `i` (the queue of the service's `i`-th GPU), if it exists.
    pub fn queue_at(&self, i: u32) -> Option<JobQueue<'_>> {
        let h = self.header();
        if i >= self.queue_count() {
            return None;
        }
        let off = self.queue_off(i);
        // SAFETY: `queue_count` queues, each a header and `queue_capacity` slots, follow at
        // `queue_off` inside the mapping, aligned to 128 bytes (`check_layout` checked it).
        unsafe {
            let hdr = &*self.at::<QueueHeader>(off);
            let slots = std::slice::from_raw_parts(
                self.at::<QueueSlot>(off + size_of::<QueueHeader>() as u64),
                h.queue_capacity as usize,
            );
            Some(JobQueue::new(hdr, slots))
        }
    }

    /// How many job queues the region has (at least 1).
    pub fn queue_count(&self) -> u32 {
        self.header().queue_count.max(1)
    }

    /// Region offset of queue `i`'s header.
    pub fn queue_off(&self, i: u32) -> u64 {
        let h = self.header();
        h.queue_off + i as u64 * h.queue_stride()
    }

    /// Counts `n` finished jobs of queue `q` (its load falls by `n`).
    pub fn count_done(&self, q: u32, n: u64) {
        if let Some(queue) = self.queue_at(q) {
            queue.count_done(n);
        }
    }

    /// The queue the job in completion slot `i` was submitted to (0 if out of range).
    pub fn completion_queue(&self, i: u32) -> u32 {
        self.completion_ptr(i).map_or(0, |p| {
            // SAFETY: inside the table; the client wrote it before queueing the job and
            // nobody changes it until the slot is reused.
            unsafe { std::ptr::addr_of!((*p).queue).read() }
        })
    }

    /// The tag the client stamped on completion slot `i` at submit (recovery tells a job
    /// from a newer one in the same slot by it).
    pub fn completion_tag(&self, i: u32) -> Option<u64> {
        self.completion_ptr(i).map(|p| {
            // SAFETY: inside the table; the client writes it before queueing the job, and
            // it changes only when the client reuses the slot.
            unsafe { std::ptr::addr_of!((*p).tag).read_volatile() }
        })
    }

    /// Client slot `i`, if it exists.
    pub fn client(&self, i: u32) -> Option<&ClientSlot> {
        let h = self.header();
        (i < h.max_clients).then(|| {
            // SAFETY: `i` is in range of the client table laid out at `clients_off`.
            unsafe {
                &*self.at::<ClientSlot>(h.clients_off + i as u64 * size_of::<ClientSlot>() as u64)
            }
        })
    }

    /// Completion slot `i`, if it exists.
    pub fn completion(&self, i: u32) -> Option<&Completion> {
        let h = self.header();
        let count = h.max_clients as u64 * h.completions_per_client as u64;
        ((i as u64) < count).then(|| {
            // SAFETY: `i` is in range of the completion table laid out at `completions_off`.
            unsafe {
                &*self
                    .at::<Completion>(h.completions_off + i as u64 * size_of::<Completion>() as u64)
            }
        })
    }

    fn completion_ptr(&self, i: u32) -> Option<*mut Completion> {
        self.completion(i)?;
        let h = self.header();
        Some(
            self.at::<Completion>(h.completions_off + i as u64 * size_of::<Completion>() as u64)
                as *mut Completion,
        )
    }

    /// Client side of submitting: stamps slot `i` with the job's tag and submit time and
    /// marks it SUBMITTED. The slot must be the caller's and FREE.
    pub fn begin_completion(&self, i: u32, tag: u64, submitted_ns: u64) -> Option<()> {
        self.begin_completion_on(i, tag, submitted_ns, 0)
    }

    /// [`ShmRegion::begin_completion`] for a job going to queue `queue`.
    pub fn begin_completion_on(
        &self,
        i: u32,
        tag: u64,
        submitted_ns: u64,
        queue: u32,
    ) -> Option<()> {
        let p = self.completion_ptr(i)?;
        // SAFETY: the slot is inside the table; the caller owns it (FREE, its own range), so
        // nobody else touches these plain fields until the descriptor naming it is queued.
        unsafe {
            std::ptr::addr_of_mut!((*p).tag).write(tag);
            std::ptr::addr_of_mut!((*p).submitted_ns).write(submitted_ns);
            std::ptr::addr_of_mut!((*p).queue).write(queue);
            // The last job's check must not vouch for this one's fields.
            std::ptr::addr_of_mut!((*p).check).write(0);
        }
        self.completion(i)?.state.store(
            crate::layout::completion_state::SUBMITTED,
            Ordering::Relaxed,
        );
        Some(())
    }

    /// Service side: marks slot `i` RUNNING and returns the submit time the client stamped.
    pub fn start_completion(&self, i: u32) -> Option<u64> {
        let p = self.completion_ptr(i)?;
        self.completion(i)?
            .state
            .store(crate::layout::completion_state::RUNNING, Ordering::Relaxed);
        // SAFETY: the slot is inside the table; the client wrote `submitted_ns` before
        // queueing the job (the queue's release/acquire orders it before this read).
        Some(unsafe { std::ptr::addr_of!((*p).submitted_ns).read() })
    }

    /// Service side: writes the outcome of the job in slot `i`, then publishes DONE.
    pub fn finish_completion(&self, i: u32, o: &CompletionData) -> Option<()> {
        let p = self.completion_ptr(i)?;
        // SAFETY: the slot is inside the table; between RUNNING and DONE only the worker
        // running the job writes it, and the client reads it only after seeing DONE.
        unsafe {
            std::ptr::addr_of_mut!((*p).status).write(o.status);
            std::ptr::addr_of_mut!((*p).message).write(o.message);
            std::ptr::addr_of_mut!((*p).prog_version).write(o.prog_version);
            std::ptr::addr_of_mut!((*p).prog_id).write(o.prog_id);
            std::ptr::addr_of_mut!((*p).err_pc).write(o.err_pc);
            std::ptr::addr_of_mut!((*p).records_done).write(o.records_done);
            std::ptr::addr_of_mut!((*p).records_failed).write(o.records_failed);
            std::ptr::addr_of_mut!((*p).r0).write(o.r0);
            std::ptr::addr_of_mut!((*p).tag).write(o.tag);
            std::ptr::addr_of_mut!((*p).started_ns).write(o.started_ns);
            std::ptr::addr_of_mut!((*p).finished_ns).write(o.finished_ns);
            std::ptr::addr_of_mut!((*p).gpu_hops).write([0; 2]);
        }
        // ORDERING: release publishes the fields above; pairs with the acquire load in
        // `read_completion`.
        self.completion(i)?
            .state
            .store(crate::layout::completion_state::DONE, Ordering::Release);
        Some(())
    }

    /// Service side: publishes a job whose fields the GPU wrote but whose DONE it left to
    /// the host (an error): writes the message slot, then DONE.
    pub fn finalize_completion(&self, i: u32, message: u32) -> Option<()> {
        let p = self.completion_ptr(i)?;
        // SAFETY: the slot is inside the table; the GPU wrote every other field before it
        // published the job's log entry (which the caller acquired), and DONE is not set
        // yet, so the client does not read the slot.
        unsafe { std::ptr::addr_of_mut!((*p).message).write(message) };
        // ORDERING: release publishes the fields above (and the GPU's, which the caller's
        // acquire of the log entry ordered before); pairs with `read_completion`.
        self.completion(i)?
            .state
            .store(crate::layout::completion_state::DONE, Ordering::Release);
        Some(())
    }

    /// Client side: the outcome in slot `i` if it is DONE, or DONE_CHECKED with a check
    /// word that matches the fields read (the GPU's one-record jobs publish it with their
    /// fields, unordered; a mismatch is a completion still arriving, read again by the
    /// next call).
    pub fn read_completion(&self, i: u32) -> Option<CompletionData> {
        use crate::layout::completion_state::{DONE, DONE_CHECKED};
        let c = self.completion(i)?;
        // ORDERING: acquire pairs with the release store of DONE in `finish_completion` (a
        // DONE_CHECKED store orders nothing: the check word vouches for the fields).
        let state = c.state.load(Ordering::Acquire);
        if state != DONE && state != DONE_CHECKED {
            return None;
        }
        let p = self.completion_ptr(i)?;
        // SAFETY: DONE was observed with acquire and no one but the service writes the slot
        // until the client frees it; the fields are plain words (checked below when
        // DONE_CHECKED).
        let d = unsafe { self.completion_fields(p) };
        if state == DONE {
            return Some(d);
        }
        // SAFETY: as above.
        let check = unsafe { std::ptr::addr_of!((*p).check).read_volatile() };
        (check == d.check()).then_some(d)
    }

    /// The fields of the completion at `p`, read one by one (volatile: a caller may read
    /// them again while the GPU's writes arrive).
    ///
    /// # Safety
    /// `p` points into the completion table.
    unsafe fn completion_fields(&self, p: *mut Completion) -> CompletionData {
        // SAFETY: the caller's contract; every field is a plain integer.
        unsafe {
            CompletionData {
                status: std::ptr::addr_of!((*p).status).read_volatile(),
                message: std::ptr::addr_of!((*p).message).read_volatile(),
                prog_version: std::ptr::addr_of!((*p).prog_version).read_volatile(),
                prog_id: std::ptr::addr_of!((*p).prog_id).read_volatile(),
                err_pc: std::ptr::addr_of!((*p).err_pc).read_volatile(),
                records_done: std::ptr::addr_of!((*p).records_done).read_volatile(),
                records_failed: std::ptr::addr_of!((*p).records_failed).read_volatile(),
                r0: std::ptr::addr_of!((*p).r0).read_volatile(),
                tag: std::ptr::addr_of!((*p).tag).read_volatile(),
                submitted_ns: std::ptr::addr_of!((*p).submitted_ns).read_volatile(),
                started_ns: std::ptr::addr_of!((*p).started_ns).read_volatile(),
                finished_ns: std::ptr::addr_of!((*p).finished_ns).read_volatile(),
                gpu_hops: std::ptr::addr_of!((*p).gpu_hops).read_volatile(),
            }
        }
    }

    /// The completion slots that belong to client `c`.
    pub fn completion_range(&self, c: u32) -> std::ops::Range<u32> {
        let per = self.header().completions_per_client;
        c * per..(c + 1) * per
    }

    /// Map directory entry `i`, if it exists.
    pub fn map_entry(&self, i: u32) -> Option<&MapEntry> {
        let h = self.header();
        (i < h.max_maps).then(|| {
            // SAFETY: `i` is in range of the directory laid out at `maps_off`.
            unsafe { &*self.at::<MapEntry>(h.maps_off + i as u64 * size_of::<MapEntry>() as u64) }
        })
    }

    fn map_entry_ptr(&self, i: u32) -> Option<*mut MapEntry> {
        self.map_entry(i)?;
        let h = self.header();
        Some(
            self.at::<MapEntry>(h.maps_off + i as u64 * size_of::<MapEntry>() as u64)
                as *mut MapEntry,
        )
    }

    /// Service side: publishes a map in the directory so clients can attach to it by name.
    /// Returns the entry index, or `None` when the directory is full or the name too long.
    pub fn register_map(&self, e: &DirEntry) -> Option<u32> {
        if e.name.len() > 64 {
            return None;
        }
        for i in 0..self.header().max_maps {
            let entry = self.map_entry(i)?;
            if entry.generation.load(Ordering::Acquire) != 0 {
                continue;
            }
            let p = self.map_entry_ptr(i)?;
            // SAFETY: the entry is inside the directory and free (generation 0); only the
            // service writes the directory, from its control thread.
            unsafe {
                std::ptr::addr_of_mut!((*p).kind).write(e.kind);
                std::ptr::addr_of_mut!((*p).key_size).write(e.key_size);
                std::ptr::addr_of_mut!((*p).value_size).write(e.value_size);
                std::ptr::addr_of_mut!((*p).max_entries).write(e.max_entries);
                std::ptr::addr_of_mut!((*p).flags).write(e.flags);
                std::ptr::addr_of_mut!((*p).data_off).write(e.data_off);
                std::ptr::addr_of_mut!((*p).data_len).write(e.data_len);
                std::ptr::addr_of_mut!((*p).threads).write(e.threads);
                std::ptr::addr_of_mut!((*p).name_len).write(e.name.len() as u32);
                let name = std::ptr::addr_of_mut!((*p).name) as *mut u8;
                std::ptr::copy_nonoverlapping(e.name.as_ptr(), name, e.name.len());
            }
            // ORDERING: release publishes the fields; pairs with the acquire in `find_map`.
            entry.generation.store(1, Ordering::Release);
            return Some(i);
        }
        None
    }

    /// Service side: removes directory entry `i`.
    pub fn unregister_map(&self, i: u32) {
        if let Some(e) = self.map_entry(i) {
            e.generation.store(0, Ordering::Release);
        }
    }

    /// Client side: the directory entry called `name`.
    pub fn find_map(&self, name: &str) -> Option<DirEntry> {
        for i in 0..self.header().max_maps {
            let entry = self.map_entry(i)?;
            // ORDERING: acquire pairs with the release in `register_map`.
            if entry.generation.load(Ordering::Acquire) == 0 {
                continue;
            }
            let len = (entry.name_len as usize).min(64);
            if &entry.name[..len] != name.as_bytes() {
                continue;
            }
            return Some(DirEntry {
                name: name.to_string(),
                kind: entry.kind,
                key_size: entry.key_size,
                value_size: entry.value_size,
                max_entries: entry.max_entries,
                flags: entry.flags,
                data_off: entry.data_off,
                data_len: entry.data_len,
                threads: entry.threads,
            });
        }
        None
    }

    /// Pointer to `len` arena bytes at arena offset `off`, if the range is inside the arena.
    ///
    /// The arena is shared memory: who may read or write a range at a given moment is
    /// decided by the job protocol (a client does not touch its buffers while its job runs).
    pub fn arena_ptr(&self, off: u64, len: u64) -> Option<NonNull<u8>> {
        let h = self.header();
        let end = off.checked_add(len)?;
        if end > h.arena_size {
            return None;
        }
        // SAFETY: `arena_off + end <= total_size`, checked above and in `open`.
        let p = unsafe { self.map.as_ptr().add((h.arena_off + off) as usize) };
        NonNull::new(p as *mut u8)
    }

    /// Copies `data` into the arena at `off`.
    pub fn write_arena(&self, off: u64, data: &[u8]) -> Option<()> {
        let p = self.arena_ptr(off, data.len() as u64)?;
        // SAFETY: the range is inside the arena (checked); the caller owns it by protocol.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.as_ptr(), data.len()) };
        Some(())
    }

    /// Copies `len` arena bytes at `off` out.
    pub fn read_arena(&self, off: u64, len: u64) -> Option<Vec<u8>> {
        let p = self.arena_ptr(off, len)?;
        let mut v = vec![0u8; len as usize];
        // SAFETY: the range is inside the arena (checked).
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), v.as_mut_ptr(), len as usize) };
        Some(v)
    }

    /// Writes an error text into the next message slot and returns its id.
    pub fn post_message(&self, text: &str) -> u32 {
        let h = self.header();
        let seq = h.next_message.fetch_add(1, Ordering::Relaxed);
        let idx = (seq % h.message_slots.max(1) as u64) as u32;
        let m = self.at::<Message>(h.messages_off + idx as u64 * size_of::<Message>() as u64)
            as *mut Message;
        let bytes = text.as_bytes();
        let len = bytes.len().min(240);
        // SAFETY: the slot is inside the message table; a concurrent reader checks `seq`
        // before and after copying, so a torn read is detected, not trusted.
        unsafe {
            (*m).seq.store(u64::MAX, Ordering::Relaxed);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), (*m).text.as_mut_ptr(), len);
            (*m).len = len as u32;
            // ORDERING: release publishes the text; pairs with the acquire in `message`.
            (*m).seq.store(seq, Ordering::Release);
        }
        seq as u32
    }

    /// Reads message `id` back, if it has not been overwritten since.
    pub fn message(&self, id: u32) -> Option<String> {
        let h = self.header();
        let slots = h.message_slots.max(1);
        let m =
            self.at::<Message>(h.messages_off + (id % slots) as u64 * size_of::<Message>() as u64);
        // SAFETY: the slot is inside the message table.
        let m = unsafe { &*m };
        // ORDERING: acquire pairs with the release in `post_message`.
        let before = m.seq.load(Ordering::Acquire);
        if before as u32 != id || before == u64::MAX {
            return None;
        }
        let len = (m.len as usize).min(240);
        let text = String::from_utf8_lossy(&m.text[..len]).into_owned();
        crate::sync::fence(Ordering::Acquire);
        (m.seq.load(Ordering::Relaxed) == before).then_some(text)
    }

    /// Records that the service is alive now.
    pub fn heartbeat(&self) {
        self.header()
            .heartbeat_ns
            .store(monotonic_ns(), Ordering::Relaxed);
    }

    /// Whether the service that owns the region is still running.
    pub fn service_alive(&self) -> bool {
        let h = self.header();
        let pid = h.service_pid.load(Ordering::Relaxed);
        let start = h.service_start.load(Ordering::Relaxed);
        process_alive(pid, start)
    }

    /// Whether this handle created the region.
    pub fn is_owner(&self) -> bool {
        self.owner
    }

    /// Removes the name from `/dev/shm` (the mapping stays valid until dropped).
    pub fn unlink(&self) -> Result<(), RegionError> {
        shm::unlink(format!("/{}", self.name).as_str()).map_err(sys("shm_unlink", &self.name))
    }

    /// Base address of the mapping (for registering it with a GPU).
    pub fn base(&self) -> NonNull<u8> {
        NonNull::new(self.map.as_ptr() as *mut u8).expect("mmap never returns null")
    }

    /// Mapping length.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the mapping is empty (never, for a valid region).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Copies a descriptor for diagnostics.
    pub fn describe(&self, d: &JobDesc) -> String {
        format!(
            "prog {} n {} input {}+{} output {}+{} rec {}/{} client {} completion {}",
            d.prog_id,
            d.n,
            d.input_off,
            d.input_len,
            d.output_off,
            d.output_len,
            d.in_rec_size,
            d.out_rec_size,
            d.client,
            d.completion
        )
    }
}

/// A map directory entry, copied in or out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// `prog:map`.
    pub name: String,
    /// `MapKind::id()`.
    pub kind: u32,
    /// Key size.
    pub key_size: u32,
    /// Value size.
    pub value_size: u32,
    /// Entries.
    pub max_entries: u32,
    /// Flags.
    pub flags: u32,
    /// Arena offset of the storage.
    pub data_off: u64,
    /// Storage bytes.
    pub data_len: u64,
    /// Slot sets (per-thread arrays).
    pub threads: u32,
}

/// The plain fields of a [`Completion`], copied in or out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompletionData {
    /// One of `layout::status`.
    pub status: i32,
    /// Message id of the error text.
    pub message: u32,
    /// Program version the job ran on.
    pub prog_version: u32,
    /// Program id.
    pub prog_id: u32,
    /// Pc of the first failing instruction.
    pub err_pc: u32,
    /// Records that ran.
    pub records_done: u64,
    /// Records that failed.
    pub records_failed: u64,
    /// r0 of the last record.
    pub r0: u64,
    /// Client's tag.
    pub tag: u64,
    /// Submit time (client clock).
    pub submitted_ns: u64,
    /// Start time.
    pub started_ns: u64,
    /// Finish time.
    pub finished_ns: u64,
    /// The GPU dispatcher's hops (see `Completion::gpu_hops`); read back only.
    pub gpu_hops: [u32; 2],
}

impl CompletionData {
    /// [`crate::layout::completion_check`] of these fields (the client's tag and submit
    /// time are its own, not covered).
    pub fn check(&self) -> u64 {
        let pair = |lo: u32, hi: u32| lo as u64 | (hi as u64) << 32;
        crate::layout::completion_check(&[
            self.status as u32 as u64,
            pair(self.message, self.prog_version),
            pair(self.prog_id, self.err_pc),
            self.records_done,
            self.records_failed,
            self.r0,
            self.started_ns,
            self.finished_ns,
            pair(self.gpu_hops[0], self.gpu_hops[1]),
        ])
    }
}

/// Checks that every table the header describes lies inside the object, in order, aligned
/// for its structures, so that no accessor can reach past the mapping whatever a corrupt
/// or hostile header says.
fn check_layout(h: &RegionHeader, len: u64) -> Result<(), String> {
    let cap = h.queue_capacity as u64;
    if !cap.is_power_of_two() || !(2..=1 << 24).contains(&cap) {
        return Err(format!(
            "queue capacity {cap} is not a power of two in 2..2^24"
        ));
    }
    if h.message_slots == 0 {
        return Err("no message slots".into());
    }
    let completions = (h.max_clients as u64)
        .checked_mul(h.completions_per_client as u64)
        .ok_or("completion count overflows")?;
    // (what, offset, alignment, bytes, where the next part starts)
    if !(1..=crate::layout::MAX_QUEUES).contains(&h.queue_count) {
        return Err(format!(
            "{} job queues (1..={} allowed)",
            h.queue_count,
            crate::layout::MAX_QUEUES
        ));
    }
    let parts: [(&str, u64, u64, Option<u64>, u64); 6] = [
        (
            "queues",
            h.queue_off,
            128,
            cap.checked_mul(size_of::<QueueSlot>() as u64)
                .and_then(|b| b.checked_add(size_of::<QueueHeader>() as u64))
                .and_then(|b| b.checked_mul(h.queue_count as u64)),
            h.clients_off,
        ),
        (
            "client table",
            h.clients_off,
            64,
            (h.max_clients as u64).checked_mul(size_of::<ClientSlot>() as u64),
            h.completions_off,
        ),
        (
            "completion table",
            h.completions_off,
            128,
            completions.checked_mul(size_of::<Completion>() as u64),
            h.messages_off,
        ),
        (
            "message table",
            h.messages_off,
            8,
            (h.message_slots as u64).checked_mul(size_of::<Message>() as u64),
            h.maps_off,
        ),
        (
            "map directory",
            h.maps_off,
            128,
            (h.max_maps as u64).checked_mul(size_of::<MapEntry>() as u64),
            h.checkpoint_off,
        ),
        (
            "checkpoint area",
            h.checkpoint_off,
            8,
            h.checkpoint_size.checked_mul(2),
            h.arena_off,
        ),
    ];
    if h.queue_off < HEADER_SIZE as u64 {
        return Err(format!("queue at {} overlaps the header", h.queue_off));
    }
    for (what, off, align, bytes, next) in parts {
        let end = bytes.and_then(|b| b.checked_add(off));
        if !off.is_multiple_of(align) || end.is_none_or(|e| e > next) {
            return Err(format!(
                "{what} at {off} ({} bytes) is misaligned or runs into the next part at {next}",
                bytes.map_or("too many".to_string(), |b| b.to_string())
            ));
        }
    }
    if h.checkpoint_size < size_of::<CheckpointHeader>() as u64 {
        return Err(format!("checkpoint halves of {} bytes", h.checkpoint_size));
    }
    if !h.arena_off.is_multiple_of(4096) || h.arena_off > len {
        return Err(format!(
            "arena at {} is not page aligned inside the object",
            h.arena_off
        ));
    }
    Ok(())
}

/// FNV-1a, 64 bits: the checkpoint's integrity check (a torn or scribbled half is
/// refused, not trusted).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Monotonic clock in ns (CLOCK_MONOTONIC, comparable across processes).
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// State letter and start time (clock ticks since boot) of process `pid`, from
/// `/proc/PID/stat` (fields 3 and 22). The one place that reads it.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: split after the last ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Start time of process `pid` in clock ticks since boot (field 22 of `/proc/PID/stat`).
pub fn process_start_time(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|(_, start)| start)
}

/// Whether process `pid` exists and is not a zombie (a dead process not yet reaped).
pub fn pid_alive(pid: u32) -> bool {
    pid != 0 && proc_stat(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X' | 'x'))
}

/// Whether `pid` runs and is the same process that started at `start` (0: don't check).
pub fn process_alive(pid: u32, start: u64) -> bool {
    if pid == 0 {
        return false;
    }
    match proc_stat(pid) {
        Some((state, s)) => !matches!(state, 'Z' | 'X' | 'x') && (start == 0 || s == start),
        None => false,
    }
}
