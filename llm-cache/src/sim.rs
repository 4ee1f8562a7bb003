//! Replaying a trace's lookups through policies × capacities, in parallel.
//!
//! ```text
//! Trace ──[Workload::from_trace]──▶ Workload (h2d lookups as dense ids, sizes, counts,
//!                                    next uses on demand)
//!       ──[simulate(SimConfig)]───▶ Vec<RunResult>, one per (policy, capacity)
//! ```
//!
//! **What counts.** Every host→device transfer of the trace is one lookup of its object;
//! device→host transfers are not lookups (they are the framework's own offload traffic,
//! reported beside the results by `crate::report`). A hit adds the object's size to
//! `hit_bytes`; a miss adds it to `bytes_moved`, whether or not the policy then keeps the
//! object. `requested_bytes = hit_bytes + bytes_moved`. The first lookup of each object is
//! always a miss (compulsory), so with a capacity at or above the working set (the total
//! size of the distinct objects looked up) every policy misses exactly once per object, and
//! `exceeds_working_set` is set.
//!
//! Each (policy, capacity) pair is one job; jobs run on `SimConfig::threads` scoped
//! threads (default: the available cores), the slower policies first.

use crate::policy::{self, Belady, Hybrid, Lfu, Lru, Policy, PolicyKind, Static};
use crate::trace::{Direction, Trace};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use thiserror::Error;

/// Points kept of each run's cumulative bytes moved (for the plot over time).
pub const SERIES_POINTS: usize = 200;

/// A simulation that cannot run.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SimError {
    /// A capacity of zero bytes.
    #[error("capacity 0: a cache needs a positive capacity")]
    ZeroCapacity,
    /// No capacity given.
    #[error("no capacity to simulate: give at least one")]
    NoCapacity,
    /// No policy given.
    #[error("no policy to simulate: give at least one of lru, lfu, static, hybrid, belady")]
    NoPolicy,
    /// The hybrid split is outside 0..=1.
    #[error("hybrid pinned fraction {0}: expected a number from 0 to 1")]
    BadFraction(f64),
    /// The sequence is too long for `u32` positions.
    #[error("{0} lookups: at most {max} are supported", max = u32::MAX - 1)]
    TooManyAccesses(usize),
    /// A lookup names an object outside the size table.
    #[error("lookup {index} names object {object}, but there are {objects} objects")]
    UnknownObject {
        /// The lookup's position.
        index: usize,
        /// Its object.
        object: u32,
        /// The size table's length.
        objects: usize,
    },
}

/// The lookup sequence of a trace, in the form the policies replay.
#[derive(Debug)]
pub struct Workload {
    /// Object looked up, per lookup.
    pub objects: Vec<u32>,
    /// Time of each lookup (ns), or its position when built from a bare sequence.
    pub times: Vec<u64>,
    /// Size of each object, by id.
    pub sizes: Vec<u64>,
    /// Lookups of each object, by id.
    pub counts: Vec<u64>,
    /// Sum of the sizes of all lookups.
    pub requested_bytes: u64,
    /// Total size of the distinct objects looked up.
    pub working_set_bytes: u64,
    /// Distinct objects looked up.
    pub distinct_objects: u64,
    /// The lookup positions where series are sampled (ascending, the last one included).
    pub sample_at: Vec<usize>,
    /// The framework's own cumulative host→device bytes at `sample_at` (the trace's
    /// transfer sizes; equal to the object sizes for a bare sequence).
    pub framework_series: Vec<u64>,
    next_use: OnceLock<Vec<u32>>,
}

impl Workload {
    /// The host→device transfers of `trace`, as lookups.
    pub fn from_trace(trace: &Trace) -> Result<Workload, SimError> {
        let mut objects = Vec::new();
        let mut times = Vec::new();
        let mut transfer = Vec::new();
        for a in &trace.accesses {
            if a.dir == Direction::HostToDevice {
                objects.push(a.object);
                times.push(a.time_ns);
                transfer.push(a.bytes);
            }
        }
        let sizes = trace.objects.iter().map(|o| o.bytes).collect();
        Workload::build(sizes, objects, times, Some(&transfer))
    }

    /// A bare sequence: lookups of `objects` with the given sizes, timed by position.
    pub fn from_sequence(sizes: Vec<u64>, objects: Vec<u32>) -> Result<Workload, SimError> {
        let times = (0..objects.len() as u64).collect();
        Workload::build(sizes, objects, times, None)
    }

    fn build(
        sizes: Vec<u64>,
        objects: Vec<u32>,
        times: Vec<u64>,
        transfer: Option<&[u64]>,
    ) -> Result<Workload, SimError> {
        if objects.len() >= u32::MAX as usize {
            return Err(SimError::TooManyAccesses(objects.len()));
        }
        let mut counts = vec![0u64; sizes.len()];
        let mut requested = 0u64;
        for (index, &o) in objects.iter().enumerate() {
            let Some(c) = counts.get_mut(o as usize) else {
                return Err(SimError::UnknownObject {
                    index,
                    object: o,
                    objects: sizes.len(),
                });
            };
            *c += 1;
            requested += sizes[o as usize];
        }
        let (mut ws, mut distinct) = (0, 0);
        for (c, s) in counts.iter().zip(&sizes) {
            if *c > 0 {
                ws += s;
                distinct += 1;
            }
        }
        let n = objects.len();
        let points = SERIES_POINTS.min(n);
        let sample_at: Vec<usize> = (1..=points).map(|k| k * n / points - 1).collect();
        let mut framework_series = Vec::with_capacity(points);
        let mut acc = 0u64;
        let mut next = 0;
        for (t, &o) in objects.iter().enumerate() {
            acc += transfer.map_or(sizes[o as usize], |tr| tr[t]);
            if next < sample_at.len() && sample_at[next] == t {
                framework_series.push(acc);
                next += 1;
            }
        }
        Ok(Workload {
            objects,
            times,
            sizes,
            counts,
            requested_bytes: requested,
            working_set_bytes: ws,
            distinct_objects: distinct,
            sample_at,
            framework_series,
            next_use: OnceLock::new(),
        })
    }

    /// Lookups in the sequence.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether there are no lookups.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Next use of each lookup's object ([`policy::next_uses`]), computed once.
    pub fn next_use(&self) -> &[u32] {
        self.next_use
            .get_or_init(|| policy::next_uses(&self.objects, self.sizes.len()))
    }

    /// A fresh policy of `kind` at `capacity` for this sequence.
    pub fn policy(
        &self,
        kind: PolicyKind,
        capacity: u64,
        hybrid_pinned: f64,
    ) -> Box<dyn Policy + '_> {
        match kind {
            PolicyKind::Lru => Box::new(Lru::new(&self.sizes, capacity)),
            PolicyKind::Lfu => Box::new(Lfu::new(&self.sizes, capacity)),
            PolicyKind::Static => {
                Box::new(Static::for_capacity(&self.sizes, &self.counts, capacity))
            }
            PolicyKind::Hybrid => Box::new(Hybrid::new(
                &self.sizes,
                &self.counts,
                capacity,
                hybrid_pinned,
            )),
            PolicyKind::Belady => Box::new(Belady::new(&self.sizes, self.next_use(), capacity)),
        }
    }
}

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Policies, in report order.
    pub policies: Vec<PolicyKind>,
    /// Capacities in bytes, in report order.
    pub capacities: Vec<u64>,
    /// Fraction of the capacity that bounds hybrid's pinned set.
    pub hybrid_pinned: f64,
    /// Worker threads; `None` = the available cores.
    pub threads: Option<usize>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            policies: PolicyKind::ALL.to_vec(),
            capacities: Vec::new(),
            hybrid_pinned: 0.5,
            threads: None,
        }
    }
}

/// One policy at one capacity.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunResult {
    /// The policy.
    pub policy: PolicyKind,
    /// The capacity.
    pub capacity_bytes: u64,
    /// Lookups that hit.
    pub hits: u64,
    /// Lookups.
    pub accesses: u64,
    /// `hits / accesses` (0 when there are none).
    pub hit_rate: f64,
    /// Bytes moved host→device: the sizes of the missed lookups.
    pub bytes_moved: u64,
    /// The sizes of the hit lookups.
    pub hit_bytes: u64,
    /// `hit_bytes / (hit_bytes + bytes_moved)`.
    pub byte_hit_rate: f64,
    /// Bytes pinned (static and hybrid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned_bytes: Option<u64>,
    /// The capacity is at least the working set: only compulsory misses remain.
    pub exceeds_working_set: bool,
    /// Cumulative bytes moved at `Workload::sample_at`.
    #[serde(skip)]
    pub moved_series: Vec<u64>,
}

/// Replays the whole sequence through `p`, counting as the module doc says: hits, hit
/// bytes, bytes moved, and bytes moved so far at each of `w.sample_at`.
fn replay<P: Policy + ?Sized>(w: &Workload, p: &mut P) -> (u64, u64, u64, Vec<u64>) {
    let (mut hits, mut hit_bytes, mut moved) = (0u64, 0u64, 0u64);
    let mut series = Vec::with_capacity(w.sample_at.len());
    let mut next_sample = w.sample_at.first().copied().unwrap_or(usize::MAX);
    for (t, &o) in w.objects.iter().enumerate() {
        let s = w.sizes[o as usize];
        if p.access(t, o) {
            hits += 1;
            hit_bytes += s;
        } else {
            moved += s;
        }
        if t == next_sample {
            series.push(moved);
            next_sample = w.sample_at.get(series.len()).copied().unwrap_or(usize::MAX);
        }
    }
    (hits, hit_bytes, moved, series)
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Runs one policy at one capacity.
pub fn simulate_one(
    w: &Workload,
    kind: PolicyKind,
    capacity: u64,
    hybrid_pinned: f64,
) -> Result<RunResult, SimError> {
    check(capacity, hybrid_pinned)?;
    let start = std::time::Instant::now();
    // Monomorphised replays: the per-lookup call is direct.
    let (pinned, (hits, hit_bytes, moved, series)) = match kind {
        PolicyKind::Lru => (None, replay(w, &mut Lru::new(&w.sizes, capacity))),
        PolicyKind::Lfu => (None, replay(w, &mut Lfu::new(&w.sizes, capacity))),
        PolicyKind::Static => {
            let mut p = Static::for_capacity(&w.sizes, &w.counts, capacity);
            (Some(p.pinned_bytes()), replay(w, &mut p))
        }
        PolicyKind::Hybrid => {
            let mut p = Hybrid::new(&w.sizes, &w.counts, capacity, hybrid_pinned);
            (Some(p.pinned_bytes()), replay(w, &mut p))
        }
        PolicyKind::Belady => (
            None,
            replay(w, &mut Belady::new(&w.sizes, w.next_use(), capacity)),
        ),
    };
    tracing::debug!(
        policy = kind.name(),
        capacity,
        hits,
        elapsed_ms = start.elapsed().as_secs_f64() * 1e3,
        "replayed"
    );
    let accesses = w.len() as u64;
    Ok(RunResult {
        policy: kind,
        capacity_bytes: capacity,
        hits,
        accesses,
        hit_rate: ratio(hits, accesses),
        bytes_moved: moved,
        hit_bytes,
        byte_hit_rate: ratio(hit_bytes, hit_bytes + moved),
        pinned_bytes: pinned,
        exceeds_working_set: capacity >= w.working_set_bytes,
        moved_series: series,
    })
}

fn check(capacity: u64, fraction: f64) -> Result<(), SimError> {
    if capacity == 0 {
        return Err(SimError::ZeroCapacity);
    }
    if !(0.0..=1.0).contains(&fraction) {
        return Err(SimError::BadFraction(fraction));
    }
    Ok(())
}

/// Runs every (policy, capacity) pair of `cfg`; results in policy-major order.
pub fn simulate(w: &Workload, cfg: &SimConfig) -> Result<Vec<RunResult>, SimError> {
    if cfg.policies.is_empty() {
        return Err(SimError::NoPolicy);
    }
    if cfg.capacities.is_empty() {
        return Err(SimError::NoCapacity);
    }
    for &c in &cfg.capacities {
        check(c, cfg.hybrid_pinned)?;
    }
    if cfg.policies.contains(&PolicyKind::Belady) {
        w.next_use();
    }
    let jobs: Vec<(PolicyKind, u64)> = cfg
        .policies
        .iter()
        .flat_map(|&p| cfg.capacities.iter().map(move |&c| (p, c)))
        .collect();
    // Slowest first, so the last job to start is a short one.
    let cost = |k: PolicyKind| match k {
        PolicyKind::Belady | PolicyKind::Lfu => 0,
        PolicyKind::Lru | PolicyKind::Hybrid => 1,
        PolicyKind::Static => 2,
    };
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| cost(jobs[i].0));
    let threads = cfg
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, jobs.len());
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, RunResult)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        // Only the counter itself is shared: Relaxed hands out each index once.
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&i) = order.get(k) else {
                            return mine;
                        };
                        let (p, c) = jobs[i];
                        mine.push((i, simulate_one(w, p, c, cfg.hybrid_pinned)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|h| h.join().expect("a simulation thread panicked"))
            .map(|(i, r)| r.map(|r| (i, r)))
            .collect::<Result<_, _>>()
    })?;
    done.sort_by_key(|(i, _)| *i);
    Ok(done.into_iter().map(|(_, r)| r).collect())
}
