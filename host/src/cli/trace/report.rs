//! `trace --mem-report`: a built-in memory probe (`mem_report.bpf.c`, embedded as its
//! object) counts accesses, bytes, requests and sectors per memory site; at exit the counts
//! are joined with the site table and printed per kernel and source line.
//!
//! | column | meaning |
//! |--------|---------|
//! | loaded, stored | bytes the threads read and wrote (atomics under stored) |
//! | ld/st sect/req | 32-byte sectors per warp-wide request, as Nsight Compute counts them: 4 is a coalesced 4-byte access, 32 one sector per lane |
//! | accesses | thread-level accesses |
//!
//! Sites are the instructions of `bpftime-super instrument`'s report; several on one source
//! line are summed.

use super::print::SiteNames;
use jit::passes::mem::MemOp;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// The report probe's object, built from `mem_report.bpf.c` by `scripts/build-builtin-probes`.
pub const OBJECT: &[u8] = include_bytes!("mem_report.bpf.o");

/// Writes the report probe's object into `dir` and returns its path (its maps are then
/// named `mem_report:*`).
pub fn write_object(dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let p = dir.join("mem_report.bpf.o");
    std::fs::write(&p, OBJECT)?;
    Ok(p)
}

/// One row: a kernel's accesses on one source line (or PTX line without line info).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Row {
    /// `file:line` or `ptx:<line>`.
    pub location: String,
    /// Bytes loaded (loads and `cp.async` copies).
    pub loaded: u64,
    /// Bytes stored (stores and atomics).
    pub stored: u64,
    /// Warp-wide load requests.
    pub load_requests: u64,
    /// Sectors of those requests.
    pub load_sectors: u64,
    /// Warp-wide store requests.
    pub store_requests: u64,
    /// Sectors of those requests.
    pub store_sectors: u64,
    /// Thread-level accesses.
    pub accesses: u64,
}

impl Row {
    fn add(&mut self, o: &Row) {
        self.loaded += o.loaded;
        self.stored += o.stored;
        self.load_requests += o.load_requests;
        self.load_sectors += o.load_sectors;
        self.store_requests += o.store_requests;
        self.store_sectors += o.store_sectors;
        self.accesses += o.accesses;
    }
}

/// A kernel's rows (sorted by location) and their total.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct KernelReport {
    /// The kernel, demangled without parameters.
    pub kernel: String,
    /// Per source line.
    pub rows: Vec<Row>,
    /// Sum of the rows.
    pub total: Row,
}

/// Per-site counts of the report probe's four maps: `(accesses, bytes, requests, sectors)`.
pub type Counts = BTreeMap<u32, [u64; 4]>;

/// Joins the counts with the site table.
pub fn build(counts: &Counts, sites: &SiteNames) -> Vec<KernelReport> {
    // kernel → (file, line, ptx line) order key → row
    type Order = (String, u32, u32);
    let mut by: BTreeMap<String, BTreeMap<Order, Row>> = BTreeMap::new();
    for (id, c) in counts {
        if c[0] == 0 {
            continue;
        }
        let Some(s) = sites.get(id) else { continue };
        let k = attach::probes::demangle(&s.kernel);
        let k = k.split_once('(').map(|(b, _)| b).unwrap_or(&k).to_string();
        let order = match (&s.file, s.line) {
            (Some(f), Some(l)) => (f.clone(), l, 0),
            _ => (String::from("~ptx"), 0, s.ptx_line),
        };
        let row = by
            .entry(k)
            .or_default()
            .entry(order)
            .or_insert_with(|| Row {
                location: s.location(),
                ..Row::default()
            });
        let load = matches!(s.op, MemOp::Load | MemOp::Copy);
        let add = Row {
            location: String::new(),
            loaded: if load { c[1] } else { 0 },
            stored: if load { 0 } else { c[1] },
            load_requests: if load { c[2] } else { 0 },
            load_sectors: if load { c[3] } else { 0 },
            store_requests: if load { 0 } else { c[2] },
            store_sectors: if load { 0 } else { c[3] },
            accesses: c[0],
        };
        row.add(&add);
    }
    by.into_iter()
        .map(|(kernel, rows)| {
            let rows: Vec<Row> = rows.into_values().collect();
            let mut total = Row {
                location: "total".into(),
                ..Row::default()
            };
            for r in &rows {
                total.add(r);
            }
            KernelReport {
                kernel,
                rows,
                total,
            }
        })
        .collect()
}

fn ratio(sectors: u64, requests: u64) -> String {
    if requests == 0 {
        "-".into()
    } else {
        format!("{:.2}", sectors as f64 / requests as f64)
    }
}

fn bytes(n: u64) -> String {
    const U: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (u, s) in U {
        if n >= u {
            return format!("{:.1} {s}", n as f64 / u as f64);
        }
    }
    format!("{n} B")
}

/// The report as text.
pub fn text(report: &[KernelReport]) -> String {
    let mut s = String::new();
    if report.is_empty() {
        s.push_str("memory report: no access was probed (no kernel with PTX ran)\n");
        return s;
    }
    let w = report
        .iter()
        .flat_map(|k| k.rows.iter().map(|r| r.location.len()))
        .max()
        .unwrap_or(0)
        .max(12);
    for k in report {
        let _ = writeln!(s, "memory report: {}", k.kernel);
        let _ = writeln!(
            s,
            "  {:<w$} {:>11} {:>11} {:>11} {:>11} {:>12}",
            "location", "loaded", "stored", "ld sect/req", "st sect/req", "accesses"
        );
        for r in k.rows.iter().chain(std::iter::once(&k.total)) {
            let _ = writeln!(
                s,
                "  {:<w$} {:>11} {:>11} {:>11} {:>11} {:>12}",
                r.location,
                bytes(r.loaded),
                bytes(r.stored),
                ratio(r.load_sectors, r.load_requests),
                ratio(r.store_sectors, r.store_requests),
                r.accesses
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use attach::instrument::MemSiteInfo;
    use jit::passes::mem::MemSpace;

    #[test]
    fn rows_join_sites_by_source_line() {
        let site = |id, op, line| MemSiteInfo {
            id,
            kernel: "_Z5triadPfPKfS1_fm".into(),
            ptx_line: 40 + id,
            file: Some("/x/stream.cu".into()),
            line: Some(line),
            op,
            space: MemSpace::Global,
            size: 4,
            opcode: "ld.global.f32".into(),
        };
        let mut sites = SiteNames::new();
        sites.insert(0, site(0, MemOp::Load, 17));
        sites.insert(1, site(1, MemOp::Load, 17));
        sites.insert(2, site(2, MemOp::Store, 17));
        sites.insert(3, site(3, MemOp::Load, 9));
        let mut c = Counts::new();
        c.insert(0, [64, 256, 2, 8]);
        c.insert(1, [64, 256, 2, 64]);
        c.insert(2, [64, 256, 2, 8]);
        c.insert(3, [0, 0, 0, 0]);
        let r = build(&c, &sites);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].kernel, "triad");
        assert_eq!(r[0].rows.len(), 1, "{r:?}");
        let row = &r[0].rows[0];
        assert_eq!(row.location, "stream.cu:17");
        assert_eq!((row.loaded, row.stored, row.accesses), (512, 256, 192));
        assert_eq!(ratio(row.load_sectors, row.load_requests), "18.00");
        let t = text(&r);
        assert!(
            t.contains("memory report: triad") && t.contains("stream.cu:17"),
            "{t}"
        );
        assert!(t.contains("512 B") && t.contains("4.00"), "{t}");
    }

    #[test]
    fn the_embedded_object_loads_and_verifies() {
        let dir = std::env::temp_dir().join(format!("bpftime-report-{}", std::process::id()));
        let p = write_object(&dir).unwrap();
        let set = attach::ProbeSet::load(&[&p]).unwrap();
        assert_eq!(set.probes.len(), 1);
        assert_eq!(set.probes[0].site, attach::SiteKind::Memory);
        let names: Vec<&String> = set.objects[0].maps.keys().collect();
        assert_eq!(
            names,
            [
                "accesses_site",
                "bytes_site",
                "requests_site",
                "sectors_site"
            ]
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
