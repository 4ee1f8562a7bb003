//! Presenting simulation results: the text table, the `--json` rows, the bandwidth used
//! for stall estimates, and `--recommend`'s pin list.
//!
//! **Stall time** is `bytes_moved / bandwidth`: every moved byte waits for the link, with
//! no overlap with compute, so it is an upper bound on the time a framework would stall.
//! The bandwidth ([`Bandwidth::choose`]) is `--pcie-gbps` when given, else the host→device
//! bandwidth measured from the trace's transfers that carry durations (Σ bytes / Σ
//! durations), else [`DEFAULT_PCIE_GBPS`]; the report says which. GB/s are decimal (10⁹
//! bytes per second).
//!
//! **The framework's traffic** is what the trace itself moved: the bytes of its
//! host→device transfers (and, separately, device→host). Each result's
//! `moved_vs_framework` is its `bytes_moved` over the framework's host→device bytes.

use crate::sim::{RunResult, Workload};
use crate::trace::{Totals, Trace};
use crate::units::format_bytes;
use serde::Serialize;
use std::fmt::Write as _;

/// The link bandwidth assumed when the trace has no durations and none is given (GB/s).
pub const DEFAULT_PCIE_GBPS: f64 = 25.0;

/// Where the bandwidth came from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BandwidthSource {
    /// `--pcie-gbps`.
    Given,
    /// Measured from the trace's timed host→device transfers.
    Measured,
    /// [`DEFAULT_PCIE_GBPS`]: the trace carries no durations.
    Default,
}

/// The bandwidth stall estimates use.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bandwidth {
    /// GB/s (10⁹ bytes per second).
    pub gbps: f64,
    /// Where it came from.
    pub source: BandwidthSource,
}

impl Bandwidth {
    /// `given` if any, else measured from `totals`, else the default.
    pub fn choose(given: Option<f64>, totals: &Totals) -> Bandwidth {
        if let Some(gbps) = given {
            return Bandwidth {
                gbps,
                source: BandwidthSource::Given,
            };
        }
        match totals.measured_gbps() {
            Some(gbps) => Bandwidth {
                gbps,
                source: BandwidthSource::Measured,
            },
            None => Bandwidth {
                gbps: DEFAULT_PCIE_GBPS,
                source: BandwidthSource::Default,
            },
        }
    }

    /// Milliseconds to move `bytes`.
    pub fn stall_ms(&self, bytes: u64) -> f64 {
        bytes as f64 / (self.gbps * 1e9) * 1e3
    }

    /// One line saying which bandwidth and why.
    pub fn describe(&self, totals: &Totals) -> String {
        match self.source {
            BandwidthSource::Given => format!("{:.1} GB/s (--pcie-gbps)", self.gbps),
            BandwidthSource::Measured => format!(
                "{:.1} GB/s (measured: {} in {} timed host-to-device transfers over {:.3} ms)",
                self.gbps,
                format_bytes(totals.timed_bytes),
                totals.timed_accesses,
                totals.timed_ns as f64 / 1e6
            ),
            BandwidthSource::Default => format!(
                "{:.1} GB/s (default: the trace carries no transfer durations; set --pcie-gbps)",
                self.gbps
            ),
        }
    }
}

/// One `--json` row: a [`RunResult`] with the stall estimate and the comparison.
#[derive(Debug, Clone, Serialize)]
pub struct JsonRow<'a> {
    /// The result's fields.
    #[serde(flatten)]
    pub result: &'a RunResult,
    /// Estimated stall for `bytes_moved`, in ms.
    pub stall_ms: f64,
    /// The bandwidth used (GB/s).
    pub pcie_gbps: f64,
    /// Where it came from: `given`, `measured` or `default`.
    pub pcie_source: BandwidthSource,
    /// The framework's own host→device bytes.
    pub framework_h2d_bytes: u64,
    /// `bytes_moved / framework_h2d_bytes`, null when the framework moved nothing.
    pub moved_vs_framework: Option<f64>,
}

/// The `--json` rows, one per result.
pub fn json_rows<'a>(
    results: &'a [RunResult],
    bw: &Bandwidth,
    totals: &Totals,
) -> Vec<JsonRow<'a>> {
    results
        .iter()
        .map(|r| JsonRow {
            result: r,
            stall_ms: bw.stall_ms(r.bytes_moved),
            pcie_gbps: bw.gbps,
            pcie_source: bw.source,
            framework_h2d_bytes: totals.h2d_bytes,
            moved_vs_framework: (totals.h2d_bytes > 0)
                .then(|| r.bytes_moved as f64 / totals.h2d_bytes as f64),
        })
        .collect()
}

/// Lines padded into columns; the first column left-aligned, the rest right-aligned.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c == 0 {
                let _ = write!(line, "{cell:<w$}", w = width[c]);
            } else {
                let _ = write!(line, "  {cell:>w$}", w = width[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The text report: the trace, the framework's traffic, the bandwidth, a table of results
/// and notes.
pub fn text(
    source: &str,
    w: &Workload,
    totals: &Totals,
    bw: &Bandwidth,
    results: &[RunResult],
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "trace: {source}: {} host-to-device lookups of {} objects (working set {}), {} device-to-host transfers",
        w.len(),
        w.distinct_objects,
        format_bytes(w.working_set_bytes),
        totals.d2h_accesses
    );
    let _ = writeln!(
        s,
        "framework: moved {} host to device (stall {:.1} ms at the bandwidth below), {} device to host",
        format_bytes(totals.h2d_bytes),
        bw.stall_ms(totals.h2d_bytes),
        format_bytes(totals.d2h_bytes)
    );
    let _ = writeln!(s, "bandwidth: {}", bw.describe(totals));
    s.push('\n');
    let mut rows = vec![
        [
            "policy",
            "capacity",
            "hits",
            "lookups",
            "hit rate",
            "byte hit rate",
            "moved",
            "stall ms",
            "vs framework",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for r in results {
        rows.push(vec![
            r.policy.name().to_string(),
            format_bytes(r.capacity_bytes),
            r.hits.to_string(),
            r.accesses.to_string(),
            format!("{:.2}%", r.hit_rate * 100.0),
            format!("{:.2}%", r.byte_hit_rate * 100.0),
            format_bytes(r.bytes_moved),
            format!("{:.1}", bw.stall_ms(r.bytes_moved)),
            if totals.h2d_bytes > 0 {
                format!("{:.3}x", r.bytes_moved as f64 / totals.h2d_bytes as f64)
            } else {
                "-".into()
            },
        ]);
    }
    s.push_str(&table(&rows));
    let mut caps: Vec<u64> = results
        .iter()
        .filter(|r| r.exceeds_working_set)
        .map(|r| r.capacity_bytes)
        .collect();
    caps.sort_unstable();
    caps.dedup();
    if !caps.is_empty() {
        s.push('\n');
    }
    for c in caps {
        let _ = writeln!(
            s,
            "note: capacity {} exceeds the working set ({} bytes): every policy misses only on first touches",
            format_bytes(c),
            w.working_set_bytes
        );
    }
    s
}

/// One object `--recommend` pins.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pick {
    /// The object's id.
    pub id: u32,
    /// Its name, or `#<id>`.
    pub name: String,
    /// Its size.
    pub bytes: u64,
    /// Its lookups in the trace.
    pub accesses: u64,
}

/// The objects to pin at a budget (the `static` policy's choice, [`crate::policy::pin_set`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    /// The budget.
    pub budget_bytes: u64,
    /// The pinned objects, in the order chosen (most used first).
    pub objects: Vec<Pick>,
    /// Their total size.
    pub pinned_bytes: u64,
    /// Lookups that would hit (all but the first lookup of each pinned object).
    pub hits: u64,
    /// All lookups.
    pub accesses: u64,
    /// `hits / accesses`.
    pub hit_rate: f64,
    /// Bytes those hits would not move.
    pub bytes_saved: u64,
}

/// What to pin within `budget` bytes.
pub fn recommend(trace: &Trace, w: &Workload, budget: u64) -> Recommendation {
    let set = crate::policy::pin_set(&w.counts, &w.sizes, budget);
    let objects: Vec<Pick> = set
        .iter()
        .map(|&id| Pick {
            id,
            name: trace.display_name(id),
            bytes: w.sizes[id as usize],
            accesses: w.counts[id as usize],
        })
        .collect();
    let hits: u64 = objects.iter().map(|p| p.accesses - 1).sum();
    Recommendation {
        budget_bytes: budget,
        pinned_bytes: objects.iter().map(|p| p.bytes).sum(),
        bytes_saved: objects.iter().map(|p| (p.accesses - 1) * p.bytes).sum(),
        hits,
        accesses: w.len() as u64,
        hit_rate: if w.is_empty() {
            0.0
        } else {
            hits as f64 / w.len() as f64
        },
        objects,
    }
}

/// The recommendation as text: a summary line and one row per object.
pub fn recommendation_text(r: &Recommendation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "pin at {}: {} objects, {} ({} of {} lookups hit, {:.2}%; {} not moved)",
        format_bytes(r.budget_bytes),
        r.objects.len(),
        format_bytes(r.pinned_bytes),
        r.hits,
        r.accesses,
        r.hit_rate * 100.0,
        format_bytes(r.bytes_saved)
    );
    let mut rows = vec![vec!["object".to_string(), "bytes".into(), "lookups".into()]];
    for p in &r.objects {
        rows.push(vec![
            p.name.clone(),
            format_bytes(p.bytes),
            p.accesses.to_string(),
        ]);
    }
    s.push_str(&table(&rows));
    s
}
