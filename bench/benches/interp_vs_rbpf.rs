//! `cargo bench -p bench`: our interpreter vs rbpf 0.4.1's, same programs, same run.
//! Prints a table and writes `bench/results/interp_vs_rbpf.{json,md}`.

use bench::{Ours, Theirs, cmd, measure_pair, programs, reset_rbpf_table};
use serde::Serialize;
use std::path::Path;

#[derive(Serialize)]
struct Row {
    program: String,
    ours_ns: f64,
    rbpf_ns: f64,
    ratio: f64,
    date: String,
    commit: String,
    host: String,
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument selects programs by name.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let batches = std::env::var("BENCH_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(41);
    let date = cmd(&["date", "-u", "+%Y-%m-%dT%H:%M:%SZ"]);
    let commit = cmd(&["git", "rev-parse", "--short", "HEAD"]);
    let host = "2-core dev machine".to_string();
    let mut rows = Vec::new();
    println!(
        "{:<12} {:>14} {:>14} {:>16}",
        "program", "ours ns/run", "rbpf ns/run", "ratio rbpf/ours"
    );
    for p in programs() {
        if filter
            .as_ref()
            .is_some_and(|f| !p.name.contains(f.as_str()))
        {
            continue;
        }
        reset_rbpf_table();
        let mut ours = Ours::new(&p);
        let mut theirs = Theirs::new(&p);
        assert_eq!(ours.run(), theirs.run(), "{}: results differ", p.name);
        let (ours_ns, rbpf_ns) = measure_pair(|| ours.run(), || theirs.run(), batches);
        let ratio = rbpf_ns / ours_ns;
        println!(
            "{:<12} {:>14.1} {:>14.1} {:>15.2}x",
            p.name, ours_ns, rbpf_ns, ratio
        );
        rows.push(Row {
            program: p.name.to_string(),
            ours_ns,
            rbpf_ns,
            ratio,
            date: date.clone(),
            commit: commit.clone(),
            host: host.clone(),
        });
    }
    if filter.is_some() {
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    std::fs::create_dir_all(&dir).expect("create bench/results");
    let json = serde_json::to_string_pretty(&rows).expect("serialize");
    std::fs::write(dir.join("interp_vs_rbpf.json"), json + "\n").expect("write json");
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into());
    let mut md = format!(
        "# Interpreter vs rbpf 0.4.1\n\nRelease build (`cargo bench -p bench`), {host}, {date}, commit {commit}.\n\
         Median ns per program run over alternating batches; ratio = rbpf / ours (higher is better for ours).\n\
         The machine is shared with other builds (load average at the end: {load}), so single runs\n\
         vary; compare ratios, not absolute times.\n\n\
         | program | ours ns/run | rbpf ns/run | ratio (rbpf/ours) |\n|---|---:|---:|---:|\n"
    );
    for r in &rows {
        md.push_str(&format!(
            "| {} | {:.1} | {:.1} | {:.2}x |\n",
            r.program, r.ours_ns, r.rbpf_ns, r.ratio
        ));
    }
    std::fs::write(dir.join("interp_vs_rbpf.md"), md).expect("write md");
}
