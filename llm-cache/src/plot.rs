//! `simulate --plot DIR`: PNG plots of the results with `plotters`.
//!
//! | file | plot |
//! |------|------|
//! | `hit_rate.png` | hit rate (by count) against capacity (the simulated capacities, in order, evenly spaced), one line per policy |
//! | `bytes_moved.png` | cumulative bytes moved host→device over the trace's time, one line per policy at one capacity ([`series_capacity`]: the largest one below the working set, where policies differ; the largest of all if none is below), and the framework's own transfers for comparison |
//!
//! The time axis is the trace's time (ms from the first lookup) when the lookups' times
//! never go backwards and span more than 0 ns; otherwise it is the lookup number (the axis
//! label says which).
//!
//! Labels need a TrueType font: `$BPFTIME_FONT`, else DejaVu Sans or Liberation Sans from
//! the usual system paths (Debian: `fonts-dejavu-core`); [`font`] fails with the list.

use crate::policy::PolicyKind;
use crate::sim::{RunResult, Workload};
use crate::units::format_bytes;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Drawing the plots failed.
#[derive(Debug, Error)]
pub enum PlotError {
    /// No TrueType font could be loaded.
    #[error("{0}")]
    NoFont(String),
    /// Nothing to plot.
    #[error("no results to plot")]
    Empty,
    /// The output directory could not be made.
    #[error("cannot create {path}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `plotters` failed.
    #[error("cannot draw {path}: {message}")]
    Draw {
        /// The file.
        path: PathBuf,
        /// What plotters said.
        message: String,
    },
}

/// Registers a TrueType font as `sans-serif`, once ([`host::plot::register_font`]).
pub fn font() -> Result<(), PlotError> {
    host::plot::register_font().map_err(PlotError::NoFont)
}

fn color(k: PolicyKind) -> RGBColor {
    match k {
        PolicyKind::Lru => RGBColor(214, 39, 40),
        PolicyKind::Lfu => RGBColor(31, 119, 180),
        PolicyKind::Static => RGBColor(44, 160, 44),
        PolicyKind::Hybrid => RGBColor(148, 103, 189),
        PolicyKind::Belady => RGBColor(0, 0, 0),
    }
}

/// Writes both plots into `dir`; returns their paths.
pub fn write(w: &Workload, results: &[RunResult], dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    font()?;
    if results.is_empty() {
        return Err(PlotError::Empty);
    }
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Dir {
        path: dir.to_path_buf(),
        source,
    })?;
    let a = dir.join("hit_rate.png");
    hit_rate(results, &a).map_err(|message| PlotError::Draw {
        path: a.clone(),
        message,
    })?;
    let b = dir.join("bytes_moved.png");
    bytes_moved(w, results, &b).map_err(|message| PlotError::Draw {
        path: b.clone(),
        message,
    })?;
    Ok(vec![a, b])
}

fn policies(results: &[RunResult]) -> Vec<PolicyKind> {
    let mut ks: Vec<PolicyKind> = Vec::new();
    for r in results {
        if !ks.contains(&r.policy) {
            ks.push(r.policy);
        }
    }
    ks
}

fn hit_rate(results: &[RunResult], path: &Path) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let mut caps: Vec<u64> = results.iter().map(|r| r.capacity_bytes).collect();
    caps.sort_unstable();
    caps.dedup();
    let at = |c: u64| SegmentValue::CenterOf(caps.partition_point(|&x| x < c));
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut c = ChartBuilder::on(&root)
        .caption("hit rate by capacity", ("sans-serif", 24))
        .margin(14)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((0..caps.len()).into_segmented(), 0f64..100f64)
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_desc("capacity (the simulated ones, evenly spaced)")
        .y_desc("hit rate (%)")
        .x_labels(caps.len() + 1)
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => caps.get(*i).map_or(String::new(), |c| format_bytes(*c)),
            _ => String::new(),
        })
        .draw()
        .map_err(|x| e(&x))?;
    for k in policies(results) {
        let pts: Vec<(SegmentValue<usize>, f64)> = results
            .iter()
            .filter(|r| r.policy == k)
            .map(|r| (at(r.capacity_bytes), r.hit_rate * 100.0))
            .collect();
        let col = color(k);
        c.draw_series(std::iter::once(PathElement::new(
            pts.clone(),
            col.stroke_width(2),
        )))
        .map_err(|x| e(&x))?
        .label(k.name())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
        c.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, col.filled())))
            .map_err(|x| e(&x))?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// The capacity `bytes_moved.png` shows: the largest below the working set (where the
/// policies differ), else the largest.
pub fn series_capacity(w: &Workload, results: &[RunResult]) -> u64 {
    let all = results.iter().map(|r| r.capacity_bytes);
    all.clone()
        .filter(|&c| c < w.working_set_bytes)
        .max()
        .or_else(|| all.max())
        .unwrap_or(0)
}

/// One named line of points.
type Line = (String, RGBColor, Vec<(f64, f64)>);

fn bytes_moved(w: &Workload, results: &[RunResult], path: &Path) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let cap = series_capacity(w, results);
    let t0 = w.times.first().copied().unwrap_or(0);
    let by_time =
        w.times.windows(2).all(|p| p[0] <= p[1]) && w.times.last().copied().unwrap_or(0) > t0;
    let xs: Vec<f64> = w
        .sample_at
        .iter()
        .map(|&t| {
            if by_time {
                (w.times[t] - t0) as f64 / 1e6
            } else {
                (t + 1) as f64
            }
        })
        .collect();
    const GIB: f64 = (1u64 << 30) as f64;
    let mut lines: Vec<Line> = results
        .iter()
        .filter(|r| r.capacity_bytes == cap)
        .map(|r| {
            let pts = xs
                .iter()
                .zip(&r.moved_series)
                .map(|(x, y)| (*x, *y as f64 / GIB))
                .collect();
            (r.policy.name().to_string(), color(r.policy), pts)
        })
        .collect();
    lines.push((
        "framework (trace)".into(),
        RGBColor(255, 127, 14),
        xs.iter()
            .zip(&w.framework_series)
            .map(|(x, y)| (*x, *y as f64 / GIB))
            .collect(),
    ));
    let xmax = xs.last().copied().unwrap_or(1.0).max(1e-9);
    let ymax = lines
        .iter()
        .flat_map(|l| l.2.iter().map(|p| p.1))
        .fold(0f64, f64::max)
        .max(1e-9);
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut c = ChartBuilder::on(&root)
        .caption(
            format!("bytes moved host to device at {}", format_bytes(cap)),
            ("sans-serif", 24),
        )
        .margin(14)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax * 1.05)
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_desc(if by_time {
            "trace time (ms)"
        } else {
            "lookup number"
        })
        .y_desc("cumulative GiB moved")
        .draw()
        .map_err(|x| e(&x))?;
    for (name, col, pts) in lines {
        c.draw_series(std::iter::once(PathElement::new(pts, col.stroke_width(2))))
            .map_err(|x| e(&x))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
