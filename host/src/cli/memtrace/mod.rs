//! `bpftime-super memtrace FILE`: reads a trace written by `trace --mem-trace FILE` (the
//! records of `attach::shim::memtrace`, and the site table trace wrote next to it as
//! `FILE.sites.json`) and prints, per site, the accesses, bytes and distinct 128-byte lines,
//! and over the whole trace the histogram of reuse distances: for each access to a 128-byte
//! line, how many distinct other lines were touched since the previous access to it (LRU
//! stack distance; first touches are "cold"). `--plot DIR` draws it ([`plot`]).

pub mod plot;

use anyhow::{Context, Result, bail};
use attach::instrument::MemSiteInfo;
use attach::memtrace::{FILE_MAGIC, HEADER, RECORD, Record};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `memtrace`.
#[derive(clap::Args, Debug)]
pub struct MemtraceArgs {
    /// The trace file.
    file: PathBuf,
    /// Also print the first N records.
    #[arg(long, default_value_t = 0)]
    dump: usize,
    /// JSON output.
    #[arg(long)]
    json: bool,
    /// Also write PNG plots of access density over the address range and over time into
    /// this directory.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
}

/// The records of a trace file.
pub fn read(bytes: &[u8]) -> Result<Vec<Record>> {
    if bytes.len() < HEADER || &bytes[..8] != FILE_MAGIC {
        bail!("not a bpftime-super memory trace (no {FILE_MAGIC:?} header)");
    }
    let size = u32::from_le_bytes(bytes[12..16].try_into().unwrap_or([0; 4])) as usize;
    if size != RECORD {
        bail!("record size {size}, expected {RECORD}");
    }
    let body = &bytes[HEADER..];
    if !body.len().is_multiple_of(RECORD) {
        tracing::warn!(
            trailing = body.len() % RECORD,
            "trace ends in a partial record"
        );
    }
    Ok(body.chunks_exact(RECORD).map(Record::from_bytes).collect())
}

/// Log2 histogram of LRU stack distances over 128-byte lines: slot 0 counts distance 0,
/// slot k distances in `[2^(k-1), 2^k)`; and the number of cold (first) touches.
pub fn reuse_histogram(records: &[Record]) -> (Vec<u64>, u64) {
    // Fenwick tree over positions: 1 where a line's most recent access is.
    let n = records.len();
    let mut tree = vec![0i64; n + 1];
    let add = |tree: &mut Vec<i64>, mut i: usize, v: i64| {
        i += 1;
        while i <= n {
            tree[i] += v;
            i += i & i.wrapping_neg();
        }
    };
    let sum = |tree: &Vec<i64>, mut i: usize| {
        // Sum of positions 0..i.
        let mut s = 0;
        while i > 0 {
            s += tree[i];
            i -= i & i.wrapping_neg();
        }
        s
    };
    let mut last: HashMap<u64, usize> = HashMap::new();
    let mut hist = vec![0u64; 65];
    let mut cold = 0;
    for (t, r) in records.iter().enumerate() {
        let line = r.addr >> 7;
        match last.insert(line, t) {
            None => cold += 1,
            Some(p) => {
                // Distinct lines touched strictly between p and t.
                let d = (sum(&tree, t) - sum(&tree, p + 1)) as u64;
                let slot = if d == 0 {
                    0
                } else {
                    64 - d.leading_zeros() as usize
                };
                hist[slot] += 1;
                add(&mut tree, p, -1);
            }
        }
        add(&mut tree, t, 1);
    }
    while hist.len() > 1 && hist.last() == Some(&0) {
        hist.pop();
    }
    (hist, cold)
}

/// Runs `memtrace`.
pub fn run(a: MemtraceArgs) -> Result<ExitCode> {
    let out = report(&a.file, a.dump, a.json, a.plot.as_deref())?;
    // Written once: a closed pipe (`| head`) ends it quietly.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes());
    Ok(ExitCode::SUCCESS)
}

/// The summary of the trace `file` (its first `dump` records too), as text or one JSON
/// line (`"event": "memtrace"`), after writing the plots into `plot` when given.
pub fn report(
    file: &std::path::Path,
    dump: usize,
    json: bool,
    plot: Option<&std::path::Path>,
) -> Result<String> {
    let bytes = std::fs::read(file).with_context(|| format!("read {}", file.display()))?;
    let records = read(&bytes).with_context(|| file.display().to_string())?;
    let sites_path = PathBuf::from(format!("{}.sites.json", file.display()));
    let sites: BTreeMap<u32, MemSiteInfo> = match std::fs::read(&sites_path) {
        Ok(b) => serde_json::from_slice::<Vec<MemSiteInfo>>(&b)
            .with_context(|| format!("{}: not a site table", sites_path.display()))?
            .into_iter()
            .map(|s| (s.id, s))
            .collect(),
        Err(_) => BTreeMap::new(),
    };
    let label = |id: u32| match sites.get(&id) {
        Some(s) => {
            let k = attach::probes::demangle(&s.kernel);
            let k = k.split_once('(').map(|(b, _)| b).unwrap_or(&k).to_string();
            format!("{} {k} {}", s.location(), s.opcode)
        }
        None => format!("site {id}"),
    };
    // Per site: accesses, bytes, lines.
    let mut per: BTreeMap<u32, (u64, u64, HashSet<u64>)> = BTreeMap::new();
    for r in &records {
        let e = per.entry(r.site).or_default();
        e.0 += 1;
        e.1 += r.size() as u64;
        e.2.insert(r.addr >> 7);
    }
    let all_lines: HashSet<u64> = records.iter().map(|r| r.addr >> 7).collect();
    if let Some(dir) = plot {
        for p in plot::write(&records, dir)? {
            if !json {
                eprintln!("wrote {}", p.display());
            }
        }
    }
    let (hist, cold) = reuse_histogram(&records);
    if json {
        let sites_json: Vec<serde_json::Value> = per
            .iter()
            .map(|(id, (n, b, l))| {
                serde_json::json!({"site": id, "label": label(*id), "accesses": n, "bytes": b, "lines_128": l.len()})
            })
            .collect();
        let dump: Vec<serde_json::Value> = records
            .iter()
            .take(dump)
            .map(|r| {
                serde_json::json!({"idx": r.idx, "addr": format!("{:#x}", r.addr), "site": r.site,
                    "size": r.size(), "op": r.op(), "space": r.space(), "block": r.block,
                    "tid": [r.tid_x(), r.tid_y()]})
            })
            .collect();
        return Ok(format!(
            "{}\n",
            serde_json::json!({"event": "memtrace", "records": records.len(), "lines_128": all_lines.len(),
                "sites": sites_json, "reuse_log2": hist, "cold": cold, "dump": dump})
        ));
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} records, {} distinct 128-byte lines",
        file.display(),
        records.len(),
        all_lines.len()
    );
    let _ = writeln!(
        out,
        "  {:>10} {:>12} {:>10}  site",
        "accesses", "bytes", "lines"
    );
    for (id, (n, b, l)) in &per {
        let _ = writeln!(out, "  {n:>10} {b:>12} {:>10}  {}", l.len(), label(*id));
    }
    let _ = writeln!(
        out,
        "reuse distance (distinct 128-byte lines between two touches of a line):"
    );
    let _ = writeln!(out, "  {:<20}{cold:>10}", "cold");
    for (k, c) in hist.iter().enumerate() {
        let range = if k == 0 {
            "0".to_string()
        } else {
            format!("[{}, {})", 1u64 << (k - 1), 1u64 << k)
        };
        let _ = writeln!(out, "  {range:<20}{c:>10}");
    }
    for r in records.iter().take(dump) {
        let _ = writeln!(
            out,
            "#{:<10} {:#018x} {:>2}B op{} space{} block {} tid ({}, {})  {}",
            r.idx,
            r.addr,
            r.size(),
            r.op(),
            r.space(),
            r.block,
            r.tid_x(),
            r.tid_y(),
            label(r.site)
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(addr: u64) -> Record {
        Record {
            addr,
            ..Record::default()
        }
    }

    #[test]
    fn reuse_distances_count_distinct_lines_between() {
        // Lines A B A C B A: A cold, B cold, A d=1, C cold, B d=2 (A, C), A d=2 (C, B).
        let t: Vec<Record> = [0u64, 128, 0, 256, 128, 0].iter().map(|&a| r(a)).collect();
        let (h, cold) = reuse_histogram(&t);
        assert_eq!(cold, 3);
        assert_eq!(h, vec![0, 1, 2]);
        // Same line twice in a row: distance 0; bytes within one line are one line.
        let t: Vec<Record> = [0u64, 4, 8].iter().map(|&a| r(a)).collect();
        assert_eq!(reuse_histogram(&t), (vec![2], 1));
    }

    #[test]
    fn files_without_the_header_are_refused() {
        assert!(read(b"nonsense").is_err());
        let mut f = attach::memtrace::header().to_vec();
        f.extend([0u8; 32]);
        assert_eq!(read(&f).unwrap().len(), 1);
    }
}
