//! `memtrace FILE --plot DIR` (and `trace --mem-trace FILE --plot DIR`): PNG plots of a
//! memory trace with `plotters`.
//!
//! | file | plot |
//! |------|------|
//! | `address_density.png` | accesses per 64 KB page, over the touched pages in address order (untouched gaps between allocations left out, so several buffers fit one axis) |
//! | `time_density.png` | a heat map: time (record order) across, touched pages up, shade = accesses (log scale) |
//!
//! Labels need a TrueType font: `$BPFTIME_FONT`, else DejaVu Sans or Liberation Sans from
//! the usual system paths (Debian: `fonts-dejavu-core`).

use anyhow::{Context, Result, anyhow};
use attach::memtrace::Record;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// log2 of the page size the plots group addresses by.
const PAGE_SHIFT: u32 = 16;

/// Registers a TrueType font as `sans-serif`, once ([`host::plot::register_font`]).
fn font() -> Result<()> {
    host::plot::register_font().map_err(|e| anyhow!(e))
}

/// The touched pages in address order, each with its accesses.
pub fn pages(records: &[Record]) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for r in records {
        *m.entry(r.addr >> PAGE_SHIFT).or_insert(0) += 1;
    }
    m
}

/// Writes both plots into `dir`; returns their paths.
pub fn write(records: &[Record], dir: &Path) -> Result<Vec<PathBuf>> {
    font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let pages = pages(records);
    if pages.is_empty() {
        anyhow::bail!("the trace has no records to plot");
    }
    let ordinal: BTreeMap<u64, usize> = pages.keys().enumerate().map(|(i, p)| (*p, i)).collect();
    let first = pages.keys().next().copied().unwrap_or(0) << PAGE_SHIFT;
    let n = pages.len();
    let max = pages.values().copied().max().unwrap_or(1);

    let a = dir.join("address_density.png");
    {
        let root = BitMapBackend::new(&a, (1200, 600)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut c = ChartBuilder::on(&root)
            .caption(
                format!("accesses per 64 KB page ({n} touched pages, first at {first:#x})"),
                ("sans-serif", 22),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0..n, 0u64..max + max / 10 + 1)?;
        c.configure_mesh()
            .x_desc("touched pages, in address order")
            .y_desc("accesses")
            .draw()?;
        c.draw_series(
            pages
                .values()
                .enumerate()
                .map(|(i, v)| Rectangle::new([(i, 0), (i + 1, *v)], BLUE.mix(0.7).filled())),
        )?;
        root.present()?;
    }

    let t = dir.join("time_density.png");
    {
        const X: usize = 300;
        const Y: usize = 150;
        let ys = Y.min(n);
        let mut grid = vec![0u64; X * ys];
        let len = records.len().max(1);
        for (k, r) in records.iter().enumerate() {
            let x = k * X / len;
            let y = ordinal[&(r.addr >> PAGE_SHIFT)] * ys / n;
            grid[y * X + x] += 1;
        }
        let top = (*grid.iter().max().unwrap_or(&1)).max(1) as f64;
        let root = BitMapBackend::new(&t, (1200, 600)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut c = ChartBuilder::on(&root)
            .caption(
                format!("accesses over time and address ({} records)", records.len()),
                ("sans-serif", 22),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0..X, 0..ys)?;
        c.configure_mesh()
            .disable_mesh()
            .x_desc(format!(
                "time (record order, {} per column)",
                len.div_ceil(X)
            ))
            .y_desc("touched pages, in address order")
            .draw()?;
        c.draw_series(
            grid.iter()
                .enumerate()
                .filter(|(_, v)| **v > 0)
                .map(|(i, v)| {
                    let (x, y) = (i % X, i / X);
                    let shade = ((*v as f64).ln_1p() / top.ln_1p()).clamp(0.0, 1.0);
                    let level = (235.0 * (1.0 - shade)) as u8;
                    Rectangle::new(
                        [(x, y), (x + 1, y + 1)],
                        RGBColor(level, level, 255).filled(),
                    )
                }),
        )?;
        root.present()?;
    }
    Ok(vec![a, t])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_are_written_with_their_content() {
        if font().is_err() {
            // scripts/test installs a font; a bare machine says which is missing.
            eprintln!("SKIPPING: {}", font().unwrap_err());
            assert!(
                std::env::var_os("BPFTIME_REQUIRE_CLANG").is_none(),
                "no font in CI"
            );
            return;
        }
        // Two buffers far apart, streamed in turn.
        let mut recs = Vec::new();
        for k in 0..20_000u64 {
            let base = if k % 2 == 0 {
                0x7f00_0000_0000
            } else {
                0x7f80_0000_0000
            };
            recs.push(Record {
                addr: base + (k / 2) * 16,
                idx: k,
                ..Record::default()
            });
        }
        let p = pages(&recs);
        assert_eq!(
            p.len(),
            2 * (10_000 * 16u64).div_ceil(1 << PAGE_SHIFT) as usize
        );
        let dir = std::env::temp_dir().join(format!("bpftime-plot-{}", std::process::id()));
        let out = write(&recs, &dir).unwrap();
        for f in &out {
            let b = std::fs::read(f).unwrap();
            assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{}", f.display());
            assert!(b.len() > 5_000, "{} is {} bytes", f.display(), b.len());
        }
        assert!(write(&[], &dir).is_err(), "nothing to plot");
        let _ = std::fs::remove_dir_all(dir);
    }
}
