//! `observe` end to end without a GPU: the fake `libcuda.so.1` of the host's trace tests
//! (host/tests/fake_cuda) and its `app_copies`, run under `bpftime-super trace --api-log`
//! with the real shim; the trace must hold exactly the app's successful host↔device copies,
//! grouped by host range and size.

use llm_cache::trace::{Direction, Trace};
use std::path::PathBuf;
use std::process::Command;

/// `bpftime-super` and the shim, built by `cargo test --workspace` next to this binary.
fn tools() -> Option<(PathBuf, PathBuf)> {
    let dir = PathBuf::from(env!("CARGO_BIN_EXE_bpftime-super-llm-cache"))
        .parent()?
        .to_path_buf();
    let (bin, shim) = (dir.join("bpftime-super"), dir.join("libbpftime_attach.so"));
    if bin.is_file() && shim.is_file() {
        return Some((bin, shim));
    }
    assert!(
        std::env::var_os("BPFTIME_REQUIRE_CLANG").is_none(),
        "{} or {} missing: `cargo build -p host -p attach-shim`",
        bin.display(),
        shim.display()
    );
    eprintln!("SKIPPING: bpftime-super or the shim not built");
    None
}

#[test]
fn observe_turns_the_apps_copies_into_a_trace() {
    let Some((bin, shim)) = tools() else {
        return;
    };
    let scratch = bpftime_tests::scratch_dir("llm-cache-observe");
    let dir = scratch.path();
    bpftime_tests::fake_cuda::build(dir, &[("app_copies", true)]);
    let out = dir.join("app.trace");
    let o = Command::new(env!("CARGO_BIN_EXE_bpftime-super-llm-cache"))
        .args(["observe", "--json", "-o"])
        .arg(&out)
        .arg("--bpftime")
        .arg(&bin)
        .arg("--trace-arg=--shim")
        .arg(format!("--trace-arg={}", shim.display()))
        .arg("--")
        .arg(dir.join("app_copies"))
        .env("LD_LIBRARY_PATH", dir)
        .output()
        .unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{so}\n{se}");
    // The app's own output comes first (it shares stdout); the summary is the JSON after it.
    assert!(so.starts_with("app_copies ok\n"), "{so}");
    let s: serde_json::Value = serde_json::from_str(&so["app_copies ok\n".len()..]).unwrap();
    // app_copies: HtoD 4096, cuMemcpy 1000 (unified, host to device), HtoDAsync 512, the
    // per-thread-stream HtoDAsync 256; DtoH 2048 and 128; one failed HtoD of 16 bytes.
    assert_eq!(s["h2d_copies"], 4, "{so}");
    assert_eq!(s["h2d_bytes"], 4096 + 1000 + 512 + 256);
    assert_eq!(
        (s["d2h_copies"].clone(), s["d2h_bytes"].clone()),
        (2.into(), 2176.into())
    );
    assert_eq!(
        (s["failed"].clone(), s["launches"].clone()),
        (1.into(), 1.into())
    );
    assert_eq!(
        (s["allocs"].clone(), s["alloc_bytes"].clone()),
        (1.into(), (1 << 20).into())
    );
    let t = Trace::read(&out).unwrap();
    let got: Vec<(u64, Direction)> = t.accesses.iter().map(|a| (a.bytes, a.dir)).collect();
    use Direction::*;
    assert_eq!(
        got,
        [
            (4096, HostToDevice),
            (2048, DeviceToHost),
            (1000, HostToDevice),
            (512, HostToDevice),
            (256, HostToDevice),
            (128, DeviceToHost),
        ]
    );
    assert_eq!(t.objects.len(), 6, "one object per host range and size");
    assert!(
        t.objects[0].name.starts_with("h2d@0x"),
        "{:?}",
        t.objects[0]
    );
    // A program that never touches CUDA leaves no log: a clear error, not an empty trace.
    let o = Command::new(env!("CARGO_BIN_EXE_bpftime-super-llm-cache"))
        .args(["observe", "-o"])
        .arg(dir.join("none.trace"))
        .arg("--bpftime")
        .arg(&bin)
        .arg("--trace-arg=--shim")
        .arg(format!("--trace-arg={}", shim.display()))
        .args(["--", "true"])
        .output()
        .unwrap();
    let se = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && se.contains("did it use CUDA"),
        "{se}"
    );
}

/// The live mode against the simulator: `examples/live_lru.bpf.c` keeps an LRU of 12 KiB in
/// eBPF maps, driven by host probes on the copies of `app_offload` while it runs under
/// `observe`; its lookups, hits and bytes moved must equal `simulate --policy lru` on the
/// trace of the same run.
#[test]
fn live_lru_in_ebpf_equals_the_simulator() {
    let Some((bin, shim)) = tools() else {
        return;
    };
    let Some(probe) = bpftime_tests::compile_with(
        "../llm-cache/examples/live_lru",
        &["CAPACITY=(12ULL<<10)"],
        "live_lru_12k",
    ) else {
        return;
    };
    let scratch = bpftime_tests::scratch_dir("llm-cache-live");
    let dir = scratch.path();
    bpftime_tests::fake_cuda::build(dir, &[("app_offload", true)]);
    let trace = dir.join("offload.trace");
    let o = Command::new(env!("CARGO_BIN_EXE_bpftime-super-llm-cache"))
        .args(["observe", "--json", "-o"])
        .arg(&trace)
        .arg("--bpftime")
        .arg(&bin)
        .arg("--trace-arg=--json")
        .arg("--trace-arg=--shim")
        .arg(format!("--trace-arg={}", shim.display()))
        .arg(format!("--trace-arg={}", probe.display()))
        .arg("--")
        .arg(dir.join("app_offload"))
        .env("LD_LIBRARY_PATH", dir)
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{so}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // trace's last print of the `lru` map: [lookups, hits, bytes moved, evictions, skipped].
    let live: Vec<u64> = so
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "map" && v["map"] == "live_lru_12k:lru" && v["final"] == true)
        .flat_map(|v| {
            let mut by_key = [0u64; 5];
            for e in v["printed"].as_array().cloned().unwrap_or_default() {
                let k: usize = e["key"].as_str().unwrap().parse().unwrap();
                by_key[k] = e["value"][0].as_u64().unwrap();
            }
            by_key
        })
        .collect();
    assert_eq!(live.len(), 5, "{so}");
    let sim = Command::new(env!("CARGO_BIN_EXE_bpftime-super-llm-cache"))
        .arg("simulate")
        .arg(&trace)
        .args(["--capacity", "12KB", "--policy", "lru", "--json"])
        .output()
        .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&sim.stdout).unwrap();
    let r = &rows[0];
    assert_eq!(live[0], 600, "every copy was a lookup");
    assert_eq!(live[4], 0, "nothing skipped");
    assert_eq!(
        (live[0], live[1], live[2]),
        (
            r["accesses"].as_u64().unwrap(),
            r["hits"].as_u64().unwrap(),
            r["bytes_moved"].as_u64().unwrap()
        ),
        "live {live:?} against simulated {r}"
    );
    assert!(
        live[1] > 0 && live[1] < 600 && live[3] > 0,
        "hits and evictions both happen: {live:?}"
    );
}
