//! End-to-end tests of the `bpftime-super-llm-cache` binary.

use llm_cache::PolicyKind;
use llm_cache::sim::{SimConfig, Workload, simulate};
use llm_cache::trace::Trace;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bpftime-super-llm-cache"))
        .args(args)
        .output()
        .expect("spawn bpftime-super-llm-cache")
}

fn small_csv() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/llm_offload_small.csv")
        .display()
        .to_string()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh scratch directory for test `name`, removed when the guard drops.
fn tmp(name: &str) -> bpftime_tests::tempfile::TempDir {
    bpftime_tests::scratch_dir(&format!("llm-cache-cli-{name}"))
}

/// `--json` on the committed trace: one row per policy and capacity, in order, with the
/// library's numbers.
#[test]
fn json_on_the_committed_trace() {
    let o = run(&[
        "simulate",
        &small_csv(),
        "--capacity",
        "32MB,64MiB,1GB",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<Value> = serde_json::from_str(&stdout(&o)).expect("a JSON list");
    assert_eq!(rows.len(), 5 * 3);

    let trace = Trace::read(std::path::Path::new(&small_csv())).unwrap();
    let w = Workload::from_trace(&trace).unwrap();
    let cfg = SimConfig {
        capacities: vec![32 << 20, 64 << 20, 1 << 30],
        ..SimConfig::default()
    };
    let want = simulate(&w, &cfg).unwrap();
    for (row, r) in rows.iter().zip(&want) {
        assert_eq!(row["policy"], r.policy.name());
        assert_eq!(row["capacity_bytes"], r.capacity_bytes);
        assert_eq!(row["hits"], r.hits);
        assert_eq!(row["accesses"], 482);
        assert_eq!(row["bytes_moved"], r.bytes_moved);
        assert_eq!(row["hit_rate"].as_f64().unwrap(), r.hit_rate);
        assert_eq!(row["framework_h2d_bytes"], 2_452_619_264u64);
        assert_eq!(row["pcie_source"], "measured");
        assert_eq!(row["exceeds_working_set"], r.capacity_bytes == 1 << 30);
        let stall = row["stall_ms"].as_f64().unwrap();
        let gbps = row["pcie_gbps"].as_f64().unwrap();
        assert!((stall - r.bytes_moved as f64 / gbps / 1e6).abs() < 1e-6);
    }
    // Belady is the best at each capacity on this trace; at 1 GiB everything hits after
    // the first touches.
    for c in &cfg.capacities {
        let at = |p: PolicyKind| {
            want.iter()
                .find(|r| r.policy == p && r.capacity_bytes == *c)
                .unwrap()
                .hits
        };
        for p in PolicyKind::ALL {
            assert!(at(PolicyKind::Belady) >= at(p));
        }
    }
    assert!(
        want.iter()
            .filter(|r| r.capacity_bytes == 1 << 30)
            .all(|r| r.hits == 482 - 26)
    );
}

#[test]
fn text_report_notes_and_bandwidth() {
    let o = run(&[
        "simulate",
        &small_csv(),
        "--capacity",
        "64MB,256MB",
        "--policy",
        "lru,belady",
        "--pcie-gbps",
        "16",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = stdout(&o);
    assert!(s.contains("bandwidth: 16.0 GB/s (--pcie-gbps)"), "{s}");
    assert!(
        s.contains("note: capacity 256 MiB exceeds the working set (134479872 bytes)"),
        "{s}"
    );
    assert!(!s.contains("note: capacity 64 MiB"), "{s}");
    assert_eq!(
        s.lines()
            .filter(|l| l.starts_with("lru ") || l.starts_with("belady "))
            .count(),
        4,
        "{s}"
    );
    // Without durations and without the flag: the default, said so.
    let scratch = tmp("nodur");
    let d = scratch.path();
    let csv = d.join("t.csv");
    std::fs::write(
        &csv,
        "time_ns,object,bytes,direction\n1,a,1000,h2d\n2,a,1000,h2d\n",
    )
    .unwrap();
    let o = run(&["simulate", csv.to_str().unwrap(), "--capacity", "1KB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("25.0 GB/s (default"), "{}", stdout(&o));
}

#[test]
fn recommend_names_objects() {
    let o = run(&["simulate", &small_csv(), "--recommend", "16MB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = stdout(&o);
    assert!(s.contains("pin at 16 MiB: 2 objects"), "{s}");
    assert!(s.contains("layers.0.mlp.up_proj.weight"), "{s}");
    let o = run(&[
        "simulate",
        &small_csv(),
        "--capacity",
        "16MB",
        "--recommend",
        "16MB",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["results"].as_array().unwrap().len(), 5);
    let objs = v["recommend"]["objects"].as_array().unwrap();
    assert_eq!(objs.len(), 2);
    assert_eq!(objs[0]["accesses"], 24);
    assert_eq!(objs[0]["bytes"], 8 << 20);
    // static at the same budget hits exactly what the recommendation says.
    let static_hits = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["policy"] == "static")
        .unwrap()["hits"]
        .clone();
    assert_eq!(static_hits, v["recommend"]["hits"]);
}

#[test]
fn bad_input_fails_clearly() {
    let o = run(&["simulate", &small_csv(), "--capacity", "0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("0 bytes"), "{}", stderr(&o));
    let o = run(&["simulate", &small_csv(), "--capacity", "2XB"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unknown unit"), "{}", stderr(&o));
    let o = run(&[
        "simulate",
        &small_csv(),
        "--capacity",
        "1GB",
        "--policy",
        "fifo",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unknown policy"), "{}", stderr(&o));
    let o = run(&["simulate", &small_csv()]);
    assert!(!o.status.success(), "no capacity and no --recommend");

    let scratch = tmp("bad");
    let d = scratch.path();
    // A binary trace cut short.
    let t = Trace::read(std::path::Path::new(&small_csv())).unwrap();
    let full = t.write_binary_to(Vec::new()).unwrap();
    let cut = d.join("cut.bin");
    std::fs::write(&cut, &full[..full.len() - 10]).unwrap();
    let o = run(&["simulate", cut.to_str().unwrap(), "--capacity", "1GB"]);
    assert!(!o.status.success());
    let want = format!("byte {}: truncated access record", full.len() - 32);
    assert!(stderr(&o).contains(&want), "{} lacks {want}", stderr(&o));
    assert!(stderr(&o).contains("cut.bin"), "{}", stderr(&o));
    // The whole file works, as binary.
    let ok = d.join("ok.bin");
    std::fs::write(&ok, &full).unwrap();
    let o = run(&[
        "simulate",
        ok.to_str().unwrap(),
        "--capacity",
        "1GB",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A foreign file.
    let png = d.join("x.png");
    std::fs::write(&png, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0").unwrap();
    let o = run(&["simulate", png.to_str().unwrap(), "--capacity", "1GB"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("not an llm-cache trace"),
        "{}",
        stderr(&o)
    );
    // A bad CSV row.
    let csv = d.join("bad.csv");
    std::fs::write(
        &csv,
        "time_ns,object,bytes,direction\n1,a,10,h2d\n2,a,ten,h2d\n",
    )
    .unwrap();
    let o = run(&["simulate", csv.to_str().unwrap(), "--capacity", "1GB"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("line 3: bytes `ten`"), "{}", stderr(&o));
    // Only device-to-host rows: nothing to look up.
    std::fs::write(&csv, "time_ns,object,bytes,direction\n1,a,10,d2h\n").unwrap();
    let o = run(&["simulate", csv.to_str().unwrap(), "--capacity", "1GB"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no host-to-device transfers"),
        "{}",
        stderr(&o)
    );
}

fn png_size(path: &std::path::Path) -> (u32, u32) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
    assert_eq!(&b[12..16], b"IHDR");
    assert!(
        b.len() > 5_000,
        "{} is only {} bytes",
        path.display(),
        b.len()
    );
    (
        u32::from_be_bytes(b[16..20].try_into().unwrap()),
        u32::from_be_bytes(b[20..24].try_into().unwrap()),
    )
}

#[test]
fn plots_are_valid_pngs() {
    if let Err(e) = llm_cache::plot::font() {
        // scripts/test installs a font; a bare machine says which is missing.
        eprintln!("SKIPPING: {e}");
        assert!(
            std::env::var_os("BPFTIME_REQUIRE_CLANG").is_none(),
            "no font in CI"
        );
        return;
    }
    let scratch = tmp("plot");
    let d = scratch.path();
    let o = run(&[
        "simulate",
        &small_csv(),
        "--capacity",
        "16MB,32MB,64MB,128MB,256MB",
        "--plot",
        d.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        serde_json::from_str::<Value>(&stdout(&o)).is_ok(),
        "stdout stays JSON"
    );
    for f in ["hit_rate.png", "bytes_moved.png"] {
        assert_eq!(png_size(&d.join(f)), (1000, 600), "{f}");
        assert!(stderr(&o).contains(f), "{}", stderr(&o));
    }
}
