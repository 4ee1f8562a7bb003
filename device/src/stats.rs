//! Counters and latency histograms behind `status` and the Prometheus metrics.
//!
//! Each worker owns a [`WorkerStats`] and is its only writer: counters are relaxed atomic
//! adds on lines no other core writes. Latencies go into an HDR histogram (`hdrhistogram`,
//! three significant digits: a quantile is within 0.1% of the value recorded, as load
//! tools report them) behind a mutex only `status` ever contends for.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

/// Significant decimal digits the histograms keep.
const SIGFIG: u8 = 3;

fn empty() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new(SIGFIG).expect("3 significant digits is a valid precision")
}

/// A histogram of nanosecond values.
pub struct Histogram {
    h: Mutex<hdrhistogram::Histogram<u64>>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            h: Mutex::new(empty()),
        }
    }
}

impl Histogram {
    /// Records one value (auto-resizing: any `u64` that fits the histogram's range).
    pub fn record(&self, v: u64) {
        if let Ok(mut h) = self.h.lock() {
            // The histogram grows to fit; values past the largest it can track (2^63 - 1)
            // are saturated.
            if h.record(v).is_err() {
                h.saturating_record(v);
            }
        }
    }
}

/// Several histograms merged, for quantiles.
pub struct Snapshot {
    h: hdrhistogram::Histogram<u64>,
}

impl Snapshot {
    /// Merges several histograms.
    pub fn of<'a>(hs: impl IntoIterator<Item = &'a Histogram>) -> Snapshot {
        let mut out = empty();
        for h in hs {
            if let Ok(h) = h.h.lock() {
                // Auto-resizing histograms of one precision always merge.
                let _ = out.add(&*h);
            }
        }
        Snapshot { h: out }
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.h.len()
    }

    /// The `q` quantile (0..=1), within 0.1% of a recorded value; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.h.is_empty() {
            return 0;
        }
        // The bucket's representative value, never past the largest value seen.
        self.h
            .highest_equivalent(self.h.value_at_quantile(q))
            .min(self.h.max())
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
    fn a_single_value_is_its_own_quantiles() {
        // The case status got wrong with power-of-two buckets: one 169 ms job read as
        // p50 185 ms.
        let h = Histogram::default();
        h.record(169_000_000);
        let s = Snapshot::of([&h]);
        for q in [0.5, 0.9, 0.99, 0.999] {
            let v = s.quantile(q);
            assert!(v.abs_diff(169_000_000) <= 169_000, "q{q}: {v}");
        }
    }

    #[test]
    fn quantiles_are_within_a_tenth_of_a_percent() {
        // Two workers, 1..=1000 µs each: merged quantiles against the sorted values.
        let (a, b) = (Histogram::default(), Histogram::default());
        for v in 1..=1000u64 {
            a.record(v * 1000);
            b.record(v * 1000 + 500);
        }
        let s = Snapshot::of([&a, &b]);
        assert_eq!(s.count(), 2000);
        let mut all: Vec<u64> = (1..=1000u64)
            .flat_map(|v| [v * 1000, v * 1000 + 500])
            .collect();
        all.sort_unstable();
        for q in [0.5f64, 0.9, 0.99, 0.999] {
            let exact = all[((q * 2000.0).ceil() as usize).clamp(1, 2000) - 1];
            let got = s.quantile(q);
            assert!(
                got.abs_diff(exact) * 1000 <= exact,
                "q{q}: {got} against {exact}"
            );
        }
        assert_eq!(Snapshot::of([&Histogram::default()]).quantile(0.5), 0);
    }

    #[test]
    fn huge_values_saturate_instead_of_failing() {
        let h = Histogram::default();
        h.record(u64::MAX);
        h.record(5);
        assert_eq!(Snapshot::of([&h]).count(), 2);
    }
}
