//! The sweep's plots (plotters): slowdown against added latency (a line per bandwidth
//! cap), slowdown against the cap (a line per latency), and per-kernel bars at the
//! heaviest setting.

use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// One kernel at one setting.
#[derive(Clone, Debug)]
pub struct Row {
    /// Added random latency, ns.
    pub latency_ns: f64,
    /// The cap, GB/s (`None`: none).
    pub bandwidth_gbps: Option<f64>,
    /// Kernel name.
    pub kernel: String,
    /// Its time over the baseline's.
    pub slowdown: f64,
}

/// Writes `slowdown_latency.png`, `slowdown_bandwidth.png` (when several caps were swept)
/// and `kernels.png` into `dir`.
pub fn write(rows: &[Row], dir: &Path) -> Result<Vec<PathBuf>, String> {
    host::plot::register_font()?;
    let rows: Vec<&Row> = rows.iter().filter(|r| r.slowdown.is_finite()).collect();
    if rows.is_empty() {
        return Err("no kernel time was measured".into());
    }
    let mut files = Vec::new();
    // Per setting: the geometric mean over kernels.
    let mut settings: Vec<(f64, Option<f64>)> = Vec::new();
    for r in &rows {
        if !settings.contains(&(r.latency_ns, r.bandwidth_gbps)) {
            settings.push((r.latency_ns, r.bandwidth_gbps));
        }
    }
    let mean = |l: f64, b: Option<f64>| {
        let v: Vec<f64> = rows
            .iter()
            .filter(|r| r.latency_ns == l && r.bandwidth_gbps == b)
            .map(|r| r.slowdown.ln())
            .collect();
        (v.iter().sum::<f64>() / v.len() as f64).exp()
    };
    let mut caps: Vec<Option<f64>> = settings.iter().map(|s| s.1).collect();
    caps.dedup();
    let mut lats: Vec<f64> = settings.iter().map(|s| s.0).collect();
    lats.sort_by(f64::total_cmp);
    lats.dedup();
    let lines: Vec<(String, Vec<(f64, f64)>)> = caps
        .iter()
        .map(|&b| {
            (
                b.map_or("no cap".into(), |b| format!("{b} GB/s")),
                lats.iter().map(|&l| (l, mean(l, b))).collect(),
            )
        })
        .collect();
    let f = dir.join("slowdown_latency.png");
    chart(
        &f,
        "slowdown against added latency",
        "added random latency (ns)",
        &lines,
    )?;
    files.push(f);
    let capped: Vec<f64> = caps.iter().filter_map(|b| *b).collect();
    if capped.len() > 1 {
        let lines: Vec<(String, Vec<(f64, f64)>)> = lats
            .iter()
            .map(|&l| {
                (
                    format!("+{l} ns"),
                    capped.iter().map(|&b| (b, mean(l, Some(b)))).collect(),
                )
            })
            .collect();
        let f = dir.join("slowdown_bandwidth.png");
        chart(
            &f,
            "slowdown against bandwidth cap",
            "bandwidth cap (GB/s)",
            &lines,
        )?;
        files.push(f);
    }
    let heaviest = *settings.last().expect("a setting");
    let bars: Vec<(&str, f64)> = rows
        .iter()
        .filter(|r| (r.latency_ns, r.bandwidth_gbps) == heaviest)
        .map(|r| (r.kernel.as_str(), r.slowdown))
        .collect();
    let f = dir.join("kernels.png");
    kernel_bars(&f, &bars, heaviest)?;
    files.push(f);
    Ok(files)
}

fn chart(
    path: &Path,
    title: &str,
    x: &str,
    lines: &[(String, Vec<(f64, f64)>)],
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let pts = lines.iter().flat_map(|l| l.1.iter());
    let (mut x1, mut y1) = (1.0f64, 1.0f64);
    for &(x, y) in pts {
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(14)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x1 * 1.05, 0f64..y1 * 1.1)
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_desc(x)
        .y_desc("slowdown (× the run with Δt = 0, no cap)")
        .draw()
        .map_err(|x| e(&x))?;
    for (i, (name, p)) in lines.iter().enumerate() {
        let col = Palette99::pick(i).to_rgba();
        c.draw_series(std::iter::once(PathElement::new(
            p.clone(),
            col.stroke_width(2),
        )))
        .map_err(|x| e(&x))?
        .label(name.as_str())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
        c.draw_series(p.iter().map(|&q| Circle::new(q, 4, col.filled())))
            .map_err(|x| e(&x))?;
    }
    c.configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}

/// Longest kernel name a bar's label shows.
const LABEL_CHARS: usize = 40;

/// A kernel's name as its bar's label: a longer one keeps its first and last characters
/// around `...` (demangled template kernels share long prefixes and differ at the end).
fn bar_label(name: &str) -> String {
    let n = name.chars().count();
    if n <= LABEL_CHARS {
        return name.to_string();
    }
    let keep = LABEL_CHARS - 3;
    let head: String = name.chars().take(keep / 2).collect();
    let tail: String = name.chars().skip(n - (keep - keep / 2)).collect();
    format!("{head}...{tail}")
}

/// One horizontal bar per kernel, its name on the left (names are long: demangled C++ and
/// CuPy's generated kernels), and a line at 1.0 (no slowdown).
fn kernel_bars(path: &Path, bars: &[(&str, f64)], at: (f64, Option<f64>)) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let x1 = bars.iter().map(|b| b.1).fold(1.0, f64::max);
    let widest = bars
        .iter()
        .map(|b| bar_label(b.0).chars().count())
        .max()
        .unwrap_or(0) as u32;
    let height = (120 + 30 * bars.len() as u32).max(320);
    let root = BitMapBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let title = format!(
        "slowdown per kernel at +{} ns, {}",
        at.0,
        at.1.map_or("no cap".into(), |b| format!("{b} GB/s"))
    );
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(20 + 8 * widest)
        .build_cartesian_2d(0f64..x1 * 1.1, (0..bars.len()).into_segmented())
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_desc("slowdown")
        .y_labels(bars.len() + 1)
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(i) => bars.get(*i).map_or(String::new(), |b| bar_label(b.0)),
            _ => String::new(),
        })
        .disable_y_mesh()
        .draw()
        .map_err(|x| e(&x))?;
    c.draw_series(bars.iter().enumerate().map(|(i, b)| {
        Rectangle::new(
            [
                (0.0, SegmentValue::Exact(i)),
                (b.1, SegmentValue::Exact(i + 1)),
            ],
            BLUE.mix(0.6).filled(),
        )
    }))
    .map_err(|x| e(&x))?;
    c.draw_series(std::iter::once(PathElement::new(
        vec![
            (1.0, SegmentValue::Exact(0)),
            (1.0, SegmentValue::Exact(bars.len())),
        ],
        BLACK.stroke_width(1),
    )))
    .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Labels: short names whole; long ones cut in the middle to at most `LABEL_CHARS`
    /// characters, keeping both ends (multibyte characters included), so that two kernels
    /// differing only at the end stay apart.
    #[test]
    fn long_kernel_names_keep_both_ends() {
        assert_eq!(bar_label("matvec"), "matvec");
        let a =
            "void cub::CUB_300102_SM_900::detail::reduce::DeviceReduceKernel<int, short*>(int*)";
        let b = "void cub::CUB_300102_SM_900::detail::reduce::DeviceReduceKernel<int, char*>(int*)";
        let (la, lb) = (bar_label(a), bar_label(b));
        assert_ne!(la, lb);
        assert_eq!(la.chars().count(), LABEL_CHARS, "{la}");
        assert!(
            la.starts_with("void cub::") && la.ends_with("short*>(int*)"),
            "{la}"
        );
        let wide = "ü".repeat(50);
        assert_eq!(bar_label(&wide).chars().count(), LABEL_CHARS);
    }

    /// The plots of a sweep: each file is a PNG, and the per-kernel chart is 30 pixels taller
    /// for each kernel, so that every name has its own row. Skipped where no TrueType font
    /// is installed (the labels need one).
    #[test]
    fn a_sweep_plots_a_row_per_kernel() {
        if host::plot::register_font().is_err() {
            eprintln!("SKIPPING: no TrueType font for the plot labels");
            return;
        }
        let names: Vec<String> = (0..12)
            .map(|i| format!("void cub::DeviceReduceKernel<policy_{i}, int>(int*, int)"))
            .collect();
        let mut rows = Vec::new();
        for (l, k) in [(0.0, 1.0), (800.0, 1.6)] {
            for (i, n) in names.iter().enumerate() {
                rows.push(Row {
                    latency_ns: l,
                    bandwidth_gbps: None,
                    kernel: n.clone(),
                    slowdown: k + 0.1 * i as f64,
                });
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let files = write(&rows, dir.path()).unwrap();
        assert!(
            files.iter().any(|f| f.ends_with("kernels.png")),
            "{files:?}"
        );
        for f in &files {
            let b = std::fs::read(f).unwrap();
            assert_eq!(&b[1..4], b"PNG", "{}", f.display());
            // IHDR: width and height, big-endian, at bytes 16..24.
            let h = u32::from_be_bytes(b[20..24].try_into().unwrap());
            if f.ends_with("kernels.png") {
                assert_eq!(h, 120 + 30 * 12);
            }
        }
    }
}
