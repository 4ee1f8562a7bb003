//! The CPU backend: worker threads that poll the region's queues.
//!
//! Each worker takes up to [`BATCH`] jobs with one CAS, runs them, and polls again. A
//! region made for several GPUs has one queue per GPU; CPU workers serve them all, each
//! worker starting its round at a different queue. When every queue stays empty for
//! [`SPIN_POLLS`] polls it parks on the region's futex word
//! ([`shm_maps::wake`] has the protocol); producers in any process wake it.

use crate::job::JobRunner;
use crate::programs::ProgramTable;
use crate::stats::WorkerStats;
use crate::tier::TierBuffers;
use ebpf::interp::{Env, TraceSink};
use shm_maps::{JobDesc, ShmRegion};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Jobs taken per CAS.
pub const BATCH: usize = 32;
/// Empty polls before parking (a few microseconds of spinning).
pub const SPIN_POLLS: u32 = 2_000;
/// Longest park, so that stop requests are noticed.
pub const PARK: Duration = Duration::from_millis(10);

/// Shared control flags of a running backend.
#[derive(Default)]
pub struct Control {
    /// Workers exit once the queue is empty.
    pub stop: AtomicBool,
    /// Jobs not yet started complete as `CANCELLED`.
    pub cancel: AtomicBool,
}

/// A running CPU backend.
pub struct CpuBackend {
    workers: Vec<JoinHandle<()>>,
    /// Per-worker statistics, for `status`.
    pub stats: Vec<Arc<WorkerStats>>,
    /// Stop and cancel flags.
    pub control: Arc<Control>,
}

impl CpuBackend {
    /// Starts `workers` threads serving `region` with the programs in `table`.
    pub fn start(
        region: Arc<ShmRegion>,
        table: Arc<ProgramTable>,
        tiers: Arc<TierBuffers>,
        workers: usize,
        max_insns: u64,
    ) -> std::io::Result<CpuBackend> {
        let control = Arc::new(Control::default());
        let mut handles = Vec::new();
        let mut stats = Vec::new();
        for id in 0..workers.max(1) {
            let s = Arc::new(WorkerStats::default());
            stats.push(s.clone());
            let (region, table, control) = (region.clone(), table.clone(), control.clone());
            let tiers = tiers.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("bpftime-worker-{id}"))
                    .spawn(move || worker(id, &region, &table, &tiers, &s, &control, max_insns))?,
            );
        }
        tracing::info!(workers = workers.max(1), "CPU backend started");
        Ok(CpuBackend {
            workers: handles,
            stats,
            control,
        })
    }

    /// Asks the workers to stop once the queue is drained (or at once, cancelling what is
    /// queued, with `now`), then waits for them.
    pub fn stop(self, region: &ShmRegion, now: bool) {
        if now {
            self.control.cancel.store(true, Ordering::Relaxed);
        }
        self.control.stop.store(true, Ordering::Release);
        wake_workers(region, true);
        for h in self.workers {
            if h.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
    }
}

fn worker(
    id: usize,
    region: &ShmRegion,
    table: &ProgramTable,
    tiers: &TierBuffers,
    stats: &WorkerStats,
    control: &Control,
    max_insns: u64,
) {
    let mut runner = JobRunner {
        region,
        table,
        stats,
        cancel: &control.cancel,
        env: Env::new(id).with_max_insns(max_insns),
        queue: 0,
        tiers: Some(tiers),
    };
    runner.env.sink = TraceSink::Callback(Box::new(
        move |line| tracing::info!(target: "bpftime::trace", worker = id, "{line}"),
    ));
    let queues: Vec<_> = (0..region.queue_count())
        .filter_map(|q| region.queue_at(q))
        .collect();
    let all_empty = || queues.iter().all(|q| q.is_empty());
    let hdr = region.header();
    let mut buf = [JobDesc::default(); BATCH];
    let mut idle = 0u32;
    let mut next = id % queues.len();
    loop {
        // Slots stay held until their job has started, so that a service killed with
        // jobs in this batch leaves them in the queue for `run --recover` to run.
        let queue = &queues[next];
        runner.queue = next as u32;
        next = (next + 1) % queues.len();
        let (first, n) = queue.pop_batch_held(&mut buf);
        if n > 0 {
            idle = 0;
            for (i, d) in buf[..n].iter().enumerate() {
                // A panic in one job must not take the worker (and the queue) down.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    runner.run_then(d, || queue.release(first + i as u64))
                }));
                if r.is_err() {
                    tracing::error!(worker = id, "job panicked: {}", region.describe(d));
                }
            }
            continue;
        }
        if control.stop.load(Ordering::Acquire) && all_empty() {
            break;
        }
        idle += 1;
        if idle < SPIN_POLLS {
            std::hint::spin_loop();
            continue;
        }
        shm_maps::wake::park(hdr, PARK, || {
            all_empty() && !control.stop.load(Ordering::Acquire)
        });
        idle = SPIN_POLLS / 2;
    }
}

/// Wakes parked workers after queueing jobs; cheap when none sleeps.
pub fn wake_workers(region: &ShmRegion, all: bool) {
    shm_maps::wake::wake(region.header(), all);
}
