//! The probe's own cost on a dependent load, measured, so that the probe can take it off
//! every wait ([`crate::abi::CxlConfig::compensation`]).
//!
//! A load in the tier waits Δt from the data's arrival, and then the probe still has to
//! return: on a one-thread pointer chase that leaves local + Δt + some 100 ns where the
//! model says local + Δt (runs 32–35 of `bench/results/cxl_gpu.md`). That rest is the
//! probe's, not the tier's, and about constant. `cxl calibrate -- CHASE` measures it on a
//! chain of dependent loads:
//!
//! ```text
//! T0 = kernel time at Δt = 0 (the same inlined probe, nothing to wait)
//! TD = kernel time at Δt = D, no compensation (every load waits D from its arrival)
//! N  = requests in the tier (a counting run; a store counts too but never waits, so a
//!      chain of loads must store little: the chase stores once a launch)
//! compensation = (TD − T0) / N − D
//! ```
//!
//! The runs alternate and each time is the median of its runs. On loads that overlap (many
//! warps in flight) TD − T0 is far less than N·D, and no per-load figure follows from the
//! times: [`Calibration::from_times`] refuses that rather than return a number.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The largest compensation accepted, ns (a probe that costs more than this a load is not
/// one whose cost can be taken off a wait).
pub const MAX_COMPENSATION_NS: u64 = 100_000;

/// A calibration that cannot be made from the runs given.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CalibrationError {
    /// No load reached the tier.
    #[error("the command made no load in the tier: nothing to calibrate on")]
    NoLoads,
    /// A run measured no kernel time.
    #[error("a run measured no kernel time (did the command launch a kernel?)")]
    NoTime,
    /// The loads overlapped: the delay added less than half of N·D.
    #[error(
        "Δt = {latency_ns} ns added {added_ns:.0} ns a load, less than half of it: the command's \
         loads overlap, so no per-load cost follows; calibrate on a chain of dependent loads \
         (cxl-sim/examples/chase.cu)"
    )]
    Overlap {
        /// D.
        latency_ns: u64,
        /// (TD − T0) / N.
        added_ns: f64,
    },
    /// The probe's cost came out at or above D, or above [`MAX_COMPENSATION_NS`].
    #[error("the probe's cost came out at {0:.0} ns a load: calibrate with a longer --latency-ns")]
    TooLarge(f64),
}

/// A calibration, as `cxl calibrate` writes it and `cxl run`/`sweep` read it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// What the probe takes off every wait, ns.
    pub compensation_ns: u64,
    /// (TD − T0) / N − D before rounding and clamping at 0.
    pub measured_ns: f64,
    /// D, ns.
    pub latency_ns: u64,
    /// N: requests in the tier per run (loads, and the few stores of a chain of loads).
    pub loads: u64,
    /// T0 / N, ns.
    pub zero_ns_per_load: f64,
    /// TD / N, ns.
    pub delayed_ns_per_load: f64,
    /// Runs at each setting.
    #[serde(default)]
    pub runs: usize,
    /// The GPU (`nvidia-smi`'s name), when known: another GPU's calibration is not used.
    #[serde(default)]
    pub gpu: Option<String>,
    /// The command calibrated on.
    #[serde(default)]
    pub command: Vec<String>,
    /// When, seconds since 1970.
    #[serde(default)]
    pub unix_time: u64,
}

fn median(v: &[u64]) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_unstable();
    match s.len() {
        0 => None,
        n if n % 2 == 1 => Some(s[n / 2] as f64),
        n => Some((s[n / 2 - 1] + s[n / 2]) as f64 / 2.0),
    }
}

impl Calibration {
    /// From the kernel times (ns, one per run) at Δt = 0 and at Δt = `latency_ns`, and the
    /// loads in the tier of one run.
    pub fn from_times(
        latency_ns: u64,
        loads: u64,
        zero: &[u64],
        delayed: &[u64],
    ) -> Result<Calibration, CalibrationError> {
        if loads == 0 {
            return Err(CalibrationError::NoLoads);
        }
        let (Some(t0), Some(td)) = (median(zero), median(delayed)) else {
            return Err(CalibrationError::NoTime);
        };
        if t0 <= 0.0 || td <= 0.0 {
            return Err(CalibrationError::NoTime);
        }
        let n = loads as f64;
        let added = (td - t0) / n;
        let d = latency_ns as f64;
        if added < d / 2.0 {
            return Err(CalibrationError::Overlap {
                latency_ns,
                added_ns: added,
            });
        }
        let own = added - d;
        if own >= d || own > MAX_COMPENSATION_NS as f64 {
            return Err(CalibrationError::TooLarge(own));
        }
        Ok(Calibration {
            compensation_ns: own.max(0.0).round() as u64,
            measured_ns: own,
            latency_ns,
            loads,
            zero_ns_per_load: t0 / n,
            delayed_ns_per_load: td / n,
            runs: zero.len().min(delayed.len()),
            gpu: None,
            command: Vec::new(),
            unix_time: 0,
        })
    }

    /// The compensation to use on `gpu` (this machine's, when known): this calibration's,
    /// unless it was made on another GPU.
    pub fn for_gpu(&self, gpu: Option<&str>) -> Option<u64> {
        match (self.gpu.as_deref(), gpu) {
            (Some(a), Some(b)) if a != b => None,
            _ => Some(self.compensation_ns),
        }
    }

    /// Reads a calibration file; `Ok(None)` when there is none.
    pub fn load(path: &Path) -> std::io::Result<Option<Calibration>> {
        match std::fs::read(path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes it (creating the directory).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        let json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(path, json + "\n")
    }
}

/// Where calibrations live: `$XDG_CONFIG_HOME/bpftime-super/cxl-calibration.json`, else
/// under `$HOME/.config`, else the current directory.
pub fn default_path() -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_default();
    base.join("bpftime-super").join("cxl-calibration.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probes_cost_is_what_the_delay_added_beyond_d() {
        // 1,000 loads: 350 µs at Δt = 0; 1,450 µs at Δt = 1,000 (1,100 ns a load added).
        let c = Calibration::from_times(1000, 1000, &[350_000, 351_000, 349_000], &[1_450_000; 3])
            .unwrap();
        assert_eq!(c.compensation_ns, 100);
        assert_eq!(c.zero_ns_per_load, 350.0);
        assert_eq!(c.delayed_ns_per_load, 1450.0);
        assert_eq!(c.runs, 3);
        // The medians decide: one slow run does not move it.
        let c = Calibration::from_times(1000, 1000, &[350_000, 900_000, 350_000], &[1_450_000; 3])
            .unwrap();
        assert_eq!(c.compensation_ns, 100);
        // A probe faster than the wait: nothing to take off.
        let c = Calibration::from_times(1000, 1000, &[350_000], &[1_340_000]).unwrap();
        assert_eq!(c.compensation_ns, 0);
        assert!(c.measured_ns < 0.0);
    }

    #[test]
    fn refuses_what_gives_no_per_load_cost() {
        assert_eq!(
            Calibration::from_times(1000, 0, &[1], &[2]),
            Err(CalibrationError::NoLoads)
        );
        assert_eq!(
            Calibration::from_times(1000, 10, &[], &[2]),
            Err(CalibrationError::NoTime)
        );
        // A stream: 1,000 loads in flight together added 2 µs in all.
        let e = Calibration::from_times(1000, 1000, &[350_000], &[352_000]).unwrap_err();
        assert!(e.to_string().contains("overlap"), "{e}");
        // The probe costing more than D.
        let e = Calibration::from_times(100, 1000, &[350_000], &[600_000]).unwrap_err();
        assert_eq!(e, CalibrationError::TooLarge(150.0));
    }

    #[test]
    fn another_gpus_calibration_is_not_used() {
        let mut c = Calibration::from_times(1000, 1000, &[350_000], &[1_450_000]).unwrap();
        assert_eq!(c.for_gpu(Some("NVIDIA H200")), Some(100));
        c.gpu = Some("NVIDIA H100 80GB HBM3".into());
        assert_eq!(c.for_gpu(Some("NVIDIA H200")), None);
        assert_eq!(c.for_gpu(None), Some(100));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.json");
        assert_eq!(Calibration::load(&p).unwrap(), None);
        c.save(&p).unwrap();
        assert_eq!(Calibration::load(&p).unwrap(), Some(c));
        std::fs::write(&p, "{").unwrap();
        assert!(Calibration::load(&p).is_err());
    }
}
