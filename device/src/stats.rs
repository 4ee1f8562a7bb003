//! Counters and latency histograms behind `status` and the Prometheus metrics.
//!
//! Each worker owns a [`WorkerStats`] and is its only writer, so recording costs relaxed
//! atomic adds on lines no other core writes. Readers sum the workers' figures.
//! Latencies go into a log-linear histogram: 8 sub-buckets per power of two, so a
//! percentile is accurate to within 12.5%.

use std::sync::atomic::{AtomicU64, Ordering};

const SUB: usize = 8;
const BUCKETS: usize = 64 * SUB;

/// A histogram of nanosecond values.
pub struct Histogram {
    counts: Box<[AtomicU64]>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

fn bucket(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros() as usize; // >= 3
    let sub = ((v >> (exp - 3)) & (SUB as u64 - 1)) as usize;
    ((exp - 2) * SUB + sub).min(BUCKETS - 1)
}

fn bucket_upper(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let exp = b / SUB + 2;
    let sub = (b % SUB) as u128;
    let upper = ((SUB as u128 + sub + 1) << (exp - 3)) - 1;
    upper.min(u64::MAX as u128) as u64
}

impl Histogram {
    /// Records one value.
    pub fn record(&self, v: u64) {
        self.counts[bucket(v)].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds this histogram's counts into `into`.
    pub fn add_to(&self, into: &mut [u64]) {
        for (i, c) in self.counts.iter().enumerate() {
            into[i] += c.load(Ordering::Relaxed);
        }
    }
}

/// Summed bucket counts, for percentiles.
pub struct Snapshot {
    counts: Vec<u64>,
}

impl Snapshot {
    /// Sums several histograms.
    pub fn of<'a>(hs: impl IntoIterator<Item = &'a Histogram>) -> Snapshot {
        let mut counts = vec![0; BUCKETS];
        for h in hs {
            h.add_to(&mut counts);
        }
        Snapshot { counts }
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `q` quantile (0..=1), as the upper bound of its bucket; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let total = self.count();
        if total == 0 {
            return 0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_upper(i);
            }
        }
        bucket_upper(BUCKETS - 1)
    }
}

/// What one worker has done.
#[derive(Default)]
pub struct WorkerStats {
    /// Jobs completed (any status).
    pub jobs_done: AtomicU64,
    /// Jobs completed with an error status.
    pub jobs_failed: AtomicU64,
    /// Records run successfully.
    pub records: AtomicU64,
    /// Records whose program failed.
    pub records_failed: AtomicU64,
    /// Submit-to-finish latency in ns.
    pub latency: Histogram,
    /// Start-to-finish run time in ns.
    pub run_time: Histogram,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_bounded() {
        let mut last = 0;
        for v in [
            0u64,
            1,
            7,
            8,
            9,
            15,
            16,
            100,
            1000,
            12345,
            1 << 40,
            u64::MAX,
        ] {
            let b = bucket(v);
            assert!(b >= last);
            last = b;
            assert!(bucket_upper(b) >= v, "{v}");
            if v > 16 {
                assert!(bucket_upper(b) - v <= v / 8 + 1, "{v}: {}", bucket_upper(b));
            }
        }
    }

    #[test]
    fn quantiles() {
        let h = Histogram::default();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let s = Snapshot::of([&h]);
        assert_eq!(s.count(), 1000);
        let p50 = s.quantile(0.5);
        assert!((500_000..=570_000).contains(&p50), "{p50}");
        let p99 = s.quantile(0.99);
        assert!((990_000..=1_120_000).contains(&p99), "{p99}");
        assert_eq!(Snapshot::of([&Histogram::default()]).quantile(0.5), 0);
    }
}
