//! The delay model, as a pure function: what one warp's access to the emulated tier costs.
//!
//! Equation 2 of the design: `T_access(CXL) = T_access(local) + Δt(pattern, BW_curr)`.
//! The GPU probe (`cxl-sim/bpf/cxl.bpf.c`) computes the same integers; this module is the
//! reference it is tested against (`tests/probe_vs_model.rs` runs the probe in the
//! interpreter over access sequences and compares every sum).
//!
//! ```text
//! cached   = the leader's 128-byte line is in the emulated GPU cache (direct-mapped tags):
//!            such an access never reaches the tier and pays nothing
//! stripe   = %smid % 16: the state below is per stripe, each with 1/16 of the cap
//! pattern  = classify(footprint of the warp's request, stride from the warp's last access at the site)
//! base     = latency[pattern]                          (random: --latency-ns; sequential: / --seq-ratio)
//!            0 for a store: posted writes pay the link, not the latency
//! with a cap (else none of the next three lines):
//! ρ        = bytes the tier moved in the last window / what the cap allows in a window   (≤ 0.95)
//! Δq       = base · k · ρ / (1 − ρ)                      (queueing: grows as the link fills)
//! link     = token bucket (GCRA): the transfer ends at tat = max(tat, now) + bytes / cap; up
//!            to --burst-bytes may run ahead of it
//! deadline = max(now + base + Δq, link end − burst)      the access completes no earlier
//! wait     = deadline − now − compensation (≥ 0)         from the data's arrival; the probe's
//!            own cost on a dependent load (`cxl calibrate`) is the rest of the delay
//! ```
//!
//! Times are integer nanoseconds; the bucket keeps `ns << 16` so that the per-byte cost of
//! a cap is exact to 1/65536 ns (at 64 GB/s a byte costs exactly 1024 units). Ratios are
//! ×1024. Every operation is one the eBPF program can do with 64-bit integers.

use crate::abi::{
    CACHE_SLOTS, CxlConfig, CxlState, FLAG_ENABLED, FLAG_EVERYTHING, FLAG_SPIN, FLAG_STATS,
    LINE_SHIFT, STRIPES,
};
pub use crate::abi::{ONE, RHO_MAX, TIME_SHIFT, WINDOW_SHIFT};
use serde::{Deserialize, Serialize};

/// Longest added latency accepted (1 s).
pub const MAX_LATENCY_NS: f64 = 1e9;
/// Highest cap accepted (10 TB/s: above any GPU's own memory).
pub const MAX_BANDWIDTH_GBPS: f64 = 10_000.0;

/// How a warp's request is classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Coalesced (the lanes' sectors at least half used), or within `seq_stride` bytes of
    /// the warp's previous access at the site.
    Sequential = 0,
    /// The same stride as last time at the site, larger than `seq_stride`.
    Strided = 1,
    /// Anything else: a pointer chase, a gather.
    Random = 2,
}

impl Pattern {
    /// All classes, in index order.
    pub const ALL: [Pattern; 3] = [Pattern::Sequential, Pattern::Strided, Pattern::Random];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Sequential => "sequential",
            Pattern::Strided => "strided",
            Pattern::Random => "random",
        }
    }
}

/// How the probe waits out Δt on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum WaitMode {
    /// Re-read `%globaltimer` until the deadline.
    Spin,
    /// `nanosleep` for half of what is left while more than 1 µs is left, then spin: frees
    /// issue slots for the SM's other warps.
    Sleep,
}

/// A bad parameter, named.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParamError {
    /// Latency negative, not a number, or above 1 s.
    #[error("latency {0} ns is out of range: expected 0 to 1e9 ns (1 s)")]
    Latency(f64),
    /// Bandwidth cap zero, negative or absurd.
    #[error(
        "bandwidth cap {0} GB/s is out of range: expected more than 0 and at most 10000 GB/s (leave it out for no cap)"
    )]
    Bandwidth(f64),
    /// Sequential ratio below 1.
    #[error(
        "sequential ratio {0} is out of range: random accesses pay 1 to 1000 times what sequential ones pay"
    )]
    SeqRatio(f64),
    /// Strided fraction outside [0, 1].
    #[error("strided fraction {0} is out of range: expected 0 to 1 (of the random latency)")]
    Strided(f64),
    /// Queueing coefficient negative or absurd.
    #[error("queueing coefficient {0} is out of range: expected 0 to 100")]
    QueueK(f64),
    /// Cache larger than the probe's tag array.
    #[error("emulated cache of {0} MiB is out of range: expected 0 to 64 MiB")]
    Cache(u64),
    /// Burst larger than 1 GiB.
    #[error("burst {0} bytes is out of range: expected at most 1 GiB")]
    Burst(u64),
}

/// The emulated tier, as the user states it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Δt of a random access (the tier's added load-to-use latency), ns.
    pub latency_ns: f64,
    /// A random access pays this many times what a sequential one pays (≥ 1).
    pub seq_ratio: f64,
    /// A strided access pays this fraction of the random latency (at least the sequential).
    pub strided_fraction: f64,
    /// The tier's bandwidth cap, GB/s (10^9 bytes/s); `None`: no cap.
    pub bandwidth_gbps: Option<f64>,
    /// MiB of 128-byte lines the emulated GPU cache in front of the tier holds (rounded
    /// down to a power of two of lines, at most 64; 0: none).
    pub cache_mib: u64,
    /// Queueing coefficient `k` of Δq = base · k · ρ/(1 − ρ) (0: none).
    pub queue_k: f64,
    /// Bytes that pass the cap at once after an idle period (the bucket's depth).
    pub burst_bytes: u64,
    /// Strides up to this many bytes count as sequential.
    pub seq_stride: u64,
    /// How the GPU waits.
    pub wait: WaitMode,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            latency_ns: 0.0,
            seq_ratio: 1.0,
            strided_fraction: 1.0,
            bandwidth_gbps: None,
            queue_k: 0.0,
            cache_mib: 0,
            burst_bytes: 64 << 10,
            seq_stride: 256,
            wait: WaitMode::Spin,
        }
    }
}

impl Params {
    /// Refuses what no experiment means: a negative or >1 s latency, a cap of 0, ratios
    /// outside their range.
    pub fn validate(&self) -> Result<(), ParamError> {
        if !(0.0..=MAX_LATENCY_NS).contains(&self.latency_ns) {
            return Err(ParamError::Latency(self.latency_ns));
        }
        if let Some(b) = self.bandwidth_gbps
            && !(b > 0.0 && b <= MAX_BANDWIDTH_GBPS)
        {
            return Err(ParamError::Bandwidth(b));
        }
        if !(1.0..=1000.0).contains(&self.seq_ratio) {
            return Err(ParamError::SeqRatio(self.seq_ratio));
        }
        if !(0.0..=1.0).contains(&self.strided_fraction) {
            return Err(ParamError::Strided(self.strided_fraction));
        }
        if !(0.0..=100.0).contains(&self.queue_k) {
            return Err(ParamError::QueueK(self.queue_k));
        }
        if self.cache_mib > ((CACHE_SLOTS as u64) << LINE_SHIFT) >> 20 {
            return Err(ParamError::Cache(self.cache_mib));
        }
        if self.burst_bytes > 1 << 30 {
            return Err(ParamError::Burst(self.burst_bytes));
        }
        Ok(())
    }

    /// Δt of each class without load, ns: `[sequential, strided, random]`.
    pub fn latencies(&self) -> [u64; 3] {
        let random = self.latency_ns.round() as u64;
        let seq = (self.latency_ns / self.seq_ratio).round() as u64;
        let strided = ((self.latency_ns * self.strided_fraction).round() as u64).max(seq);
        [seq, strided, random]
    }

    /// The configuration the probe reads (ranges left empty).
    pub fn config(&self, everything: bool) -> Result<CxlConfig, ParamError> {
        self.validate()?;
        let mut c = CxlConfig::new();
        c.flags = FLAG_ENABLED
            | FLAG_STATS
            | if everything { FLAG_EVERYTHING } else { 0 }
            | if self.wait == WaitMode::Spin {
                FLAG_SPIN
            } else {
                0
            };
        c.latency = self.latencies();
        if let Some(gbps) = self.bandwidth_gbps {
            // Per stripe: 1/STRIPES of the cap, so a byte costs STRIPES/gbps ns, in ns << 16.
            let stripe_gbps = gbps / STRIPES as f64;
            c.byte_cost = ((1u64 << TIME_SHIFT) as f64 / stripe_gbps).round().max(1.0) as u64;
            c.burst = self.burst_bytes / STRIPES as u64 * c.byte_cost;
            c.window_cap_bytes = (stripe_gbps * (1u64 << WINDOW_SHIFT) as f64)
                .round()
                .max(1.0) as u64;
            c.queue_k = (self.queue_k * ONE as f64).round() as u64;
        }
        c.seq_stride = self.seq_stride;
        let lines = (self.cache_mib << 20) >> LINE_SHIFT;
        c.cache_lines = if lines == 0 { 0 } else { 1 << lines.ilog2() };
        Ok(c)
    }
}

/// What the probe knows about one warp's access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// `%globaltimer` at the access, ns.
    pub now: u64,
    /// The leader lane's address.
    pub addr: u64,
    /// Bytes per lane.
    pub size: u32,
    /// Lanes making the access.
    pub active: u32,
    /// Distinct 32-byte sectors of the request.
    pub sectors: u32,
    /// A store (pays the link, not the latency).
    pub store: bool,
}

impl Access {
    /// A one-lane 8-byte load at `now` (a scalar walk, a pointer chase's step).
    pub fn scalar(now: u64, addr: u64) -> Access {
        Access {
            now,
            addr,
            size: 8,
            active: 1,
            sectors: 1,
            store: false,
        }
    }
}

/// Whether the warp's lanes use at least half of the sectors they fetch.
pub fn coalesced(a: &Access) -> bool {
    a.active > 1 && (a.sectors as u64) * 32 <= 2 * (a.active as u64) * (a.size as u64)
}

/// Footprint and stride → class; `last`/`last_stride` are the warp's history at the site
/// (`last == 0`: none).
pub fn classify(a: &Access, last: u64, last_stride: u64, seq_stride: u64) -> (Pattern, u64) {
    let stride = a.addr.wrapping_sub(last);
    let coalesced = coalesced(a);
    let dist = if (stride as i64) < 0 {
        stride.wrapping_neg()
    } else {
        stride
    };
    let p = if coalesced || (last != 0 && dist <= seq_stride) {
        Pattern::Sequential
    } else if last != 0 && stride == last_stride {
        Pattern::Strided
    } else {
        Pattern::Random
    };
    (p, stride)
}

/// The queueing term's factor for a window, `k · ρ / (1 − ρ)` × [`ONE`], with ρ from the
/// bytes of the window before it ([`CxlState::queue_factor`]: computed once a window).
pub fn queue_factor(c: &CxlConfig, window_bytes: u64) -> u64 {
    if c.byte_cost == 0 || c.queue_k == 0 || c.window_cap_bytes == 0 {
        return 0;
    }
    let rho = (window_bytes.saturating_mul(ONE) / c.window_cap_bytes).min(RHO_MAX);
    c.queue_k * rho / (ONE - rho)
}

/// The queueing term of an access of latency `base`: `base · factor / ONE`.
pub fn queue_delay(base: u64, factor: u64) -> u64 {
    base * factor / ONE
}

/// What one access cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// It hit the emulated cache (nothing else below applies: no bytes, no delay).
    pub cached: bool,
    /// Its class (`None`: not classified, because the class decides nothing: every
    /// latency 0 and no cap, or one fixed latency, [`crate::abi::FLAG_FIXED`]).
    pub pattern: Option<Pattern>,
    /// Bytes charged to the tier (`sectors × 32`).
    pub bytes: u64,
    /// When it may complete, ns (≥ `now`).
    pub deadline: u64,
}

impl Outcome {
    /// The added delay, ns.
    pub fn delay(&self, now: u64) -> u64 {
        self.deadline - now
    }

    /// What the probe waits of it, ns: the delay less the probe's own cost
    /// ([`CxlConfig::compensation`], from `cxl calibrate`), never below 0.
    pub fn wait(&self, now: u64, compensation: u64) -> u64 {
        self.delay(now).saturating_sub(compensation)
    }
}

/// The tier's state and the per-site history, as the probe keeps them in its maps; one
/// access at a time (the GPU's atomics reduce to these steps when one warp runs).
#[derive(Clone, Debug)]
pub struct Emulator {
    /// The parameters.
    pub config: CxlConfig,
    /// The shared state (bucket, bandwidth windows), per stripe.
    pub state: [CxlState; STRIPES],
    /// History per slot: last address, last stride.
    pub history: Vec<(u64, u64)>,
    /// The emulated cache's tags (line + 1; 0: empty).
    pub tags: Vec<u64>,
}

impl Emulator {
    /// A fresh tier with `slots` history slots (a power of two).
    pub fn new(config: CxlConfig, slots: usize) -> Self {
        Emulator {
            config,
            state: [CxlState::default(); STRIPES],
            history: vec![(0, 0); slots],
            tags: vec![0; config.cache_lines as usize],
        }
    }

    /// One warp's access through history slot `slot`, on an SM of `stripe`.
    pub fn access(&mut self, a: &Access, slot: usize, stripe: usize) -> Outcome {
        let c = &self.config;
        if c.latency == [0; 3] && c.byte_cost == 0 {
            // Nothing to delay (Δt = 0, no cap): the cache and the pattern decide only
            // delays, so neither is kept; the bytes are counted.
            return Outcome {
                cached: false,
                pattern: None,
                bytes: a.sectors as u64 * 32,
                deadline: a.now,
            };
        }
        if c.fixed_latency() {
            // One Δt for every load and nothing else: no cache, no pattern, no history.
            return Outcome {
                cached: false,
                pattern: None,
                bytes: a.sectors as u64 * 32,
                deadline: a.now + if a.store { 0 } else { c.latency[2] },
            };
        }
        if c.cache_lines != 0 {
            let line = a.addr >> LINE_SHIFT;
            let t = &mut self.tags[(line & (c.cache_lines - 1)) as usize];
            if *t == line + 1 {
                return Outcome {
                    cached: true,
                    pattern: Some(Pattern::Sequential),
                    bytes: 0,
                    deadline: a.now,
                };
            }
            *t = line + 1;
        }
        // A coalesced request is sequential without history (and leaves none).
        let pattern = if coalesced(a) {
            Pattern::Sequential
        } else {
            let mask = self.history.len() - 1;
            let h = &mut self.history[slot & mask];
            let (pattern, stride) = classify(a, h.0, h.1, c.seq_stride);
            *h = (a.addr, stride);
            pattern
        };
        let bytes = a.sectors as u64 * 32;
        let base = if a.store {
            0
        } else {
            c.latency[pattern as usize]
        };
        let mut deadline = a.now + base;
        if c.byte_cost != 0 {
            // The bandwidth of the last window, then this access into the current one.
            let st = &mut self.state[stripe % STRIPES];
            if st.t0 == 0 {
                st.t0 = a.now;
            }
            let e = a.now >> WINDOW_SHIFT;
            if e != st.epoch {
                st.last_window = if e == st.epoch + 1 {
                    st.window[(st.epoch & 1) as usize]
                } else {
                    0
                };
                st.window[(e & 1) as usize] = 0;
                st.epoch = e;
                st.queue_factor = queue_factor(c, st.last_window);
            }
            st.window[(e & 1) as usize] += bytes;
            deadline += queue_delay(base, st.queue_factor);
            // The link.
            let cost = bytes * c.byte_cost;
            let mut old = st.tat;
            st.tat += cost;
            let now_fp = a.now.saturating_sub(st.t0) << TIME_SHIFT;
            if old < now_fp {
                // The link was idle: it starts now (GCRA: tat = max(tat, now) + cost), and
                // the burst is all the credit there is.
                old = now_fp;
                st.tat = old + cost;
            }
            let link_end = ((old + cost).saturating_sub(c.burst) >> TIME_SHIFT) + st.t0;
            deadline = deadline.max(link_end);
        }
        Outcome {
            cached: false,
            pattern: Some(pattern),
            bytes,
            deadline,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(now: u64, addr: u64) -> Access {
        Access::scalar(now, addr)
    }

    #[test]
    fn classes() {
        // A fully coalesced 4-byte warp access: 4 sectors for 32 lanes.
        let coalesced = Access {
            now: 0,
            addr: 4096,
            size: 4,
            active: u32::MAX.count_ones(),
            sectors: 4,
            store: false,
        };
        assert_eq!(classify(&coalesced, 0, 0, 256).0, Pattern::Sequential);
        // One sector per lane: a gather.
        let gather = Access {
            sectors: 32,
            ..coalesced
        };
        assert_eq!(classify(&gather, 0, 0, 256).0, Pattern::Random);
        // A scalar walk: first access random (no history), then near → sequential.
        assert_eq!(classify(&scalar(0, 1000), 0, 0, 256).0, Pattern::Random);
        assert_eq!(
            classify(&scalar(0, 1064), 1000, 0, 256).0,
            Pattern::Sequential
        );
        // Backwards by 64 bytes is sequential too.
        assert_eq!(
            classify(&scalar(0, 936), 1000, 0, 256).0,
            Pattern::Sequential
        );
        // A repeated 4 KiB stride.
        let (p, s) = classify(&scalar(0, 1000 + 4096), 1000, 0, 256);
        assert_eq!((p, s), (Pattern::Random, 4096));
        assert_eq!(
            classify(&scalar(0, 1000 + 8192), 5096, 4096, 256).0,
            Pattern::Strided
        );
    }

    #[test]
    fn refuses_absurd_parameters() {
        let ok = Params::default();
        ok.validate().unwrap();
        for (p, want) in [
            (
                Params {
                    latency_ns: -1.0,
                    ..ok.clone()
                },
                "latency -1",
            ),
            (
                Params {
                    latency_ns: 2e9,
                    ..ok.clone()
                },
                "latency 2000000000",
            ),
            (
                Params {
                    latency_ns: f64::NAN,
                    ..ok.clone()
                },
                "latency NaN",
            ),
            (
                Params {
                    bandwidth_gbps: Some(0.0),
                    ..ok.clone()
                },
                "bandwidth cap 0",
            ),
            (
                Params {
                    bandwidth_gbps: Some(-5.0),
                    ..ok.clone()
                },
                "bandwidth cap -5",
            ),
            (
                Params {
                    seq_ratio: 0.5,
                    ..ok.clone()
                },
                "sequential ratio 0.5",
            ),
            (
                Params {
                    strided_fraction: 1.5,
                    ..ok.clone()
                },
                "strided fraction 1.5",
            ),
            (
                Params {
                    queue_k: -1.0,
                    ..ok.clone()
                },
                "queueing coefficient -1",
            ),
        ] {
            let e = p.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{e} should name {want}");
        }
    }

    #[test]
    fn latencies_by_class() {
        let p = Params {
            latency_ns: 400.0,
            seq_ratio: 4.0,
            strided_fraction: 0.5,
            ..Params::default()
        };
        assert_eq!(p.latencies(), [100, 200, 400]);
        // Strided never pays less than sequential.
        let p = Params {
            strided_fraction: 0.0,
            ..p
        };
        assert_eq!(p.latencies(), [100, 100, 400]);
    }

    #[test]
    fn pointer_chase_pays_the_base_latency() {
        let p = Params {
            latency_ns: 200.0,
            ..Params::default()
        };
        let mut e = Emulator::new(p.config(true).unwrap(), 16);
        let mut now = 1_000_000;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..100u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = scalar(now, 0x7f00_0000_0000 + (x % 1_000_000) * 64);
            let o = e.access(&a, 0, 0);
            if i > 0 {
                assert_eq!(o.pattern, Some(Pattern::Random), "access {i}");
            }
            assert_eq!(o.delay(now), 200);
            // The probe waits the delay less its own cost, never less than nothing.
            assert_eq!(o.wait(now, 80), 120);
            assert_eq!(o.wait(now, 250), 0);
            now = o.deadline + 500;
        }
    }

    #[test]
    fn cap_paces_a_stream_at_the_cap() {
        // 32 GB/s: 64 warps (4 per SM stripe) stream 128-byte requests, each issuing its
        // next as soon as the last completes; together they move bytes at the cap.
        let p = Params {
            bandwidth_gbps: Some(32.0),
            burst_bytes: 0,
            ..Params::default()
        };
        let mut e = Emulator::new(p.config(true).unwrap(), 16);
        let start = 1_764_000_000_000_000_000u64;
        let mut now = [start; 64];
        let mut bytes = 0;
        for i in 0..64 * 2048u64 {
            let w = (0..64).min_by_key(|&w| now[w]).unwrap();
            let a = Access {
                now: now[w],
                addr: 4096 + i * 128,
                size: 4,
                active: 32,
                sectors: 4,
                store: false,
            };
            let o = e.access(&a, 0, w % STRIPES);
            bytes += o.bytes;
            now[w] = o.deadline;
        }
        let end = *now.iter().max().unwrap();
        let gbps = bytes as f64 / (end - start) as f64;
        assert!((gbps - 32.0).abs() < 0.32, "{gbps} GB/s");
    }

    #[test]
    fn idle_credit_is_capped_at_the_burst() {
        // 16 GB/s over 16 stripes: 1 GB/s and a 1 KiB burst on one SM's stripe.
        let p = Params {
            bandwidth_gbps: Some(16.0),
            burst_bytes: 16 << 10,
            ..Params::default()
        };
        let mut e = Emulator::new(p.config(true).unwrap(), 16);
        let a = |now| Access {
            now,
            addr: 64,
            size: 4,
            active: 32,
            sectors: 16, // 512 bytes
            store: false,
        };
        // After a long idle period two requests (1 KiB) pass at once, the third waits
        // (times like %globaltimer's: nanoseconds since 1970).
        let t = 1_764_000_000_000_000_000;
        assert_eq!(
            e.access(&a(t - 5_000_000_000), 0, 0)
                .delay(t - 5_000_000_000),
            0
        );
        assert_eq!(e.access(&a(t), 0, 0).delay(t), 0);
        assert_eq!(e.access(&a(t), 0, 0).delay(t), 0);
        assert_eq!(e.access(&a(t), 0, 0).delay(t), 512);
    }

    #[test]
    fn queueing_grows_with_load() {
        let p = Params {
            latency_ns: 100.0,
            bandwidth_gbps: Some(10.0),
            queue_k: 1.0,
            ..Params::default()
        };
        let c = p.config(true).unwrap();
        let cap = c.window_cap_bytes;
        let mut last = 0;
        let q = |bytes| queue_delay(100, queue_factor(&c, bytes));
        for frac in [0, cap / 4, cap / 2, 3 * cap / 4, cap, 2 * cap] {
            assert!(q(frac) >= last, "monotone: {} after {last}", q(frac));
            last = q(frac);
        }
        assert_eq!(q(0), 0);
        // ρ = 0.5 → ρ/(1−ρ) = 1.
        assert_eq!(q(cap / 2), 100);
        // Capped at ρ = 0.95: 19×.
        assert_eq!(q(10 * cap), 100 * RHO_MAX / (ONE - RHO_MAX));
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    #[test]
    fn cache_hits_pay_nothing_and_stores_pay_only_the_link() {
        let p = Params {
            latency_ns: 300.0,
            cache_mib: 1,
            ..Params::default()
        };
        let c = p.config(true).unwrap();
        assert_eq!(c.cache_lines, 8192);
        let mut e = Emulator::new(c, 16);
        let a = Access {
            now: 1000,
            addr: 1 << 20,
            size: 4,
            active: 1,
            sectors: 1,
            store: false,
        };
        assert!(!e.access(&a, 0, 0).cached);
        // The same line again: a hit, then an address 8192 lines on evicts it.
        let o = e.access(
            &Access {
                addr: (1 << 20) + 64,
                ..a
            },
            0,
            0,
        );
        assert!(o.cached && o.delay(1000) == 0 && o.bytes == 0);
        assert!(
            !e.access(
                &Access {
                    addr: (1 << 20) + (8192 << 7),
                    ..a
                },
                0,
                0
            )
            .cached
        );
        assert!(!e.access(&a, 0, 0).cached);
        // A store misses, pays no latency.
        let o = e.access(
            &Access {
                addr: 5 << 30,
                store: true,
                ..a
            },
            0,
            0,
        );
        assert_eq!((o.cached, o.delay(1000)), (false, 0));
        assert!(Params { cache_mib: 65, ..p }.validate().is_err());
    }
}
