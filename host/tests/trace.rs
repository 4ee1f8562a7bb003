//! `bpftime-super trace` end to end without a GPU: a fake `libcuda.so.1` (tests/fake_cuda,
//! built here with `cc`) records every image the driver is given, and three apps reach it
//! the three ways real programs do: linked with `-lcuda`, through `dlsym` (CuPy, Numba,
//! PyTorch), and through `cuGetProcAddress` as static cudart does. The shim must hand the
//! driver instrumented PTX on every path, leave SASS-only images alone with a warning,
//! pass the app's exit code through, and refuse a rejected probe before the app starts.

#[path = "../../jit/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_bpftime-super"))
}

/// The shim next to the binary; `cargo test --workspace` builds it (a workspace member).
fn shim() -> Option<PathBuf> {
    let p = bin().parent().unwrap().join("libbpftime_attach.so");
    if p.is_file() {
        return Some(p);
    }
    assert!(
        std::env::var_os("BPFTIME_REQUIRE_CLANG").is_none(),
        "{} missing: build it with `cargo build -p attach-shim`",
        p.display()
    );
    eprintln!("SKIPPING: {} not built", p.display());
    None
}

struct Fake {
    dir: PathBuf,
    /// Removes `dir` when the test ends.
    _scratch: bpftime_tests::tempfile::TempDir,
}

fn fake(name: &str) -> Fake {
    let scratch = bpftime_tests::scratch_dir(&format!("trace-test-{name}"));
    let dir = scratch.path().to_path_buf();
    std::fs::create_dir_all(dir.join("rec")).unwrap();
    bpftime_tests::fake_cuda::build(
        &dir,
        &[
            ("app_direct", true),
            ("app_copies", true),
            ("app_cudart", false),
            ("app_dlsym", false),
            ("app_leak", true),
            ("app_launch", true),
            ("app_pause", true),
            ("app_alloc", true),
        ],
    );
    Fake {
        dir,
        _scratch: scratch,
    }
}

impl Fake {
    fn run(&self, probes: &[&Path], app: &[&str]) -> (i32, String, String) {
        self.run_with(&[], probes, app)
    }

    fn run_with(&self, opts: &[&str], probes: &[&Path], app: &[&str]) -> (i32, String, String) {
        self.run_env(&[], opts, probes, app)
    }

    fn run_env(
        &self,
        env: &[(&str, &str)],
        opts: &[&str],
        probes: &[&Path],
        app: &[&str],
    ) -> (i32, String, String) {
        let _ = std::fs::remove_dir_all(self.dir.join("rec"));
        std::fs::create_dir_all(self.dir.join("rec")).unwrap();
        let mut c = Command::new(bin());
        c.arg("trace").arg("--interval").arg("0").arg("--json");
        c.args(opts);
        if let Some(s) = shim() {
            c.arg("--shim").arg(s);
        }
        c.args(probes)
            .arg("--")
            .arg(self.dir.join(app[0]))
            .args(&app[1..]);
        c.env("LD_LIBRARY_PATH", &self.dir)
            .env("FAKE_CUDA_DIR", self.dir.join("rec"))
            .envs(env.iter().copied());
        let out = c.output().expect("run trace");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("rec/calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Every PTX image the fake driver got, assembled with ptxas.
    fn assemble_loaded(&self) -> usize {
        let mut n = 0;
        for e in std::fs::read_dir(self.dir.join("rec")).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "ptx") {
                let text = std::fs::read_to_string(&p).unwrap();
                if !text.contains("bpftime-super: k") && !text.contains("bpftime-super: memprobe") {
                    continue;
                }
                let f = jit::ptx::parse::parse(&text).unwrap();
                let mut t = text.clone();
                if let Some(max) = common::ptxas_max_isa()
                    && f.version > max
                {
                    t.replace_range(f.version_span.clone(), &format!("{}.{}", max.0, max.1));
                }
                // Unique per test: tests run in parallel and ptxas's scratch file is named
                // after `what`.
                let what = format!(
                    "{}-{}",
                    self.dir.file_name().unwrap().to_string_lossy(),
                    p.file_name().unwrap().to_string_lossy()
                );
                common::assemble_for(&t, &what, "sm_90");
                n += 1;
            }
        }
        n
    }
}

fn events(stdout: &str, kind: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == kind)
        .collect()
}

/// `(key, first value word)` of each printed entry of map `name`'s final dump, in order.
fn printed_rows(out: &str, name: &str) -> Vec<(String, u64)> {
    events(out, "map")
        .iter()
        .rfind(|v| v["map"] == name && v["final"] == true)
        .unwrap_or_else(|| panic!("no {name}: {out}"))["printed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["key"].as_str().unwrap().to_string(),
                e["value"][0].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn every_driver_path_gets_instrumented_ptx() {
    let (Some(probe), Some(_)) = (bpftime_tests::compile("vecadd_args"), shim()) else {
        return;
    };
    let f = fake("direct");
    let ptx = root().join("jit/tests/ptx_corpus/nvcc/vecadd_sm90.ptx");
    let fat = root().join("attach/tests/corpus/vecadd_multi_compressed.fatbin");
    let app = [
        "app_direct",
        &ptx.display().to_string(),
        &fat.display().to_string(),
        "7",
    ];
    // With --jit-linker each instrumented PTX goes through the JIT linker first (one
    // `cuLinkAddData` of instrumented PTX per distinct image) and the loader gets the cubin.
    let (code, _, err) = f.run_with(&["--jit-linker"], &[&probe], &app);
    assert_eq!(code, 7, "{err}");
    let calls = f.calls();
    let linked = calls
        .iter()
        .filter(|c| *c == "cuLinkAddData.type1 instrumented")
        .count();
    // Two distinct PTX (the file's, the fat binary's) linked once each, plus the app's two
    // own cuLink inputs.
    assert_eq!(linked, 2 + 2, "{calls:#?}");
    assert_eq!(f.assemble_loaded(), 2 + 2);
    let loads: Vec<&String> = calls
        .iter()
        .filter(|c| c.starts_with("cuModuleLoad") || c.starts_with("cuLibraryLoad"))
        .collect();
    assert_eq!(
        loads.len(),
        7,
        "6 image calls and the app's own cubin: {calls:#?}"
    );
    assert!(loads.iter().all(|c| c.ends_with(" linked")), "{calls:#?}");
    // By default the loaders get the instrumented PTX itself:
    let (code, out, err) = f.run(&[&probe], &app);
    assert_eq!(code, 7, "the app's exit code passes through\n{err}\n{out}");
    let calls = f.calls();
    let expected = [
        "cuMemHostRegister",
        "cuModuleLoadData instrumented",
        "cuModuleLoadDataEx instrumented",
        "cuModuleLoadData instrumented", // cuModuleLoad(path): the file's PTX, instrumented
        "cuModuleLoadData instrumented", // cuModuleLoadFatBinary: its PTX, instrumented
        "cuLibraryLoadData instrumented",
        "cuLibraryLoadData instrumented", // cuLibraryLoadFromFile
        "cuLinkAddData.type1 instrumented",
        "cuLinkAddData.type1 instrumented", // cuLinkAddFile
        "cuModuleLoadData linked",          // the app's linked cubin
    ];
    // The image calls (device-resident maps add allocations and copies: tested below).
    let got: Vec<&str> = calls
        .iter()
        .map(String::as_str)
        .filter(|l| {
            ["cuMemHostRegister", "cuModule", "cuLibrary", "cuLink"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    assert_eq!(got.len(), expected.len(), "{calls:#?}\n{err}");
    for (g, e) in got.iter().zip(expected) {
        assert!(g.starts_with(e), "got `{g}`, expected `{e}`\n{calls:#?}");
    }
    assert!(f.assemble_loaded() >= 8);
    let attach = events(&out, "attach");
    assert!(!attach.is_empty(), "{out}");
    assert!(
        attach
            .iter()
            .all(|a| a["kernel"] == "_Z9vectorAddPKfS0_Pfi" && a["site"] == "entry")
    );
    // The final map print, as `map dump --json` prints a map.
    let maps = events(&out, "map");
    assert!(
        maps.iter()
            .any(|m| m["map"] == "vecadd_args:vecadd_n" && m["final"] == true),
        "{out}"
    );
}

#[test]
fn cudart_and_dlsym_paths() {
    let (Some(probe), Some(_)) = (bpftime_tests::compile("kernel_count"), shim()) else {
        return;
    };
    let f = fake("cudart");
    let fat = root().join("attach/tests/corpus/vecadd_multi.fatbin");
    let (code, out, err) = f.run(&[&probe], &["app_cudart", &fat.display().to_string()]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(
        out.contains("\"kernel\":\"_Z9vectorAddPKfS0_Pfi\""),
        "{out}"
    );
    assert!(
        f.calls()
            .iter()
            .any(|c| c == "cuLibraryLoadData instrumented"),
        "{:?}\n{err}",
        f.calls()
    );
    assert_eq!(f.assemble_loaded(), 1);

    let ptx = root().join("jit/tests/ptx_corpus/numba/saxpy_sm90.ptx");
    let (code, out, err) = f.run(&[&probe], &["app_dlsym", &ptx.display().to_string()]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(
        f.calls()
            .iter()
            .any(|c| c == "cuModuleLoadData instrumented"),
        "{:?}",
        f.calls()
    );
    assert_eq!(f.assemble_loaded(), 1);
}

#[test]
fn sass_only_images_run_unmodified_with_one_warning() {
    let (Some(probe), Some(_)) = (bpftime_tests::compile("vecadd_args"), shim()) else {
        return;
    };
    let f = fake("sass");
    let fat = root().join("attach/tests/corpus/vecadd_sass_only.fatbin");
    let (code, out, err) = f.run(&[&probe], &["app_cudart", &fat.display().to_string()]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(
        f.calls().iter().any(|c| c == "cuLibraryLoadData original"),
        "{:?}",
        f.calls()
    );
    let warnings = events(&out, "warning");
    assert!(
        warnings
            .iter()
            .any(|w| w["what"].as_str().unwrap().contains("SASS-only")
                && w["what"].as_str().unwrap().contains("vectorAdd")),
        "{out}"
    );
    // The probe attached nowhere: reported once.
    assert_eq!(
        warnings
            .iter()
            .filter(|w| w["what"].as_str().unwrap().contains("matched no kernel"))
            .count(),
        1,
        "{out}"
    );
}

#[test]
fn rejected_probe_stops_before_the_app_starts() {
    let (Some(bad), Some(_)) = (bpftime_tests::compile("kprobe_reject"), shim()) else {
        return;
    };
    let f = fake("reject");
    let (code, out, err) = f.run(&[&bad], &["app_dlsym", "/nonexistent"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("read_past_ctx") && err.contains("insn"),
        "{err}"
    );
    assert!(
        f.calls().is_empty(),
        "the app must not have run: {:?}",
        f.calls()
    );
    assert!(out.is_empty());
}

/// The value of `@<map>[0]` in the final JSON print of a one-entry array.
fn final_value(out: &str, map: &str) -> u64 {
    let m = events(out, "map")
        .into_iter()
        .find(|m| m["map"] == map && m["final"] == true)
        .unwrap_or_else(|| panic!("no final print of {map}: {out}"));
    // Zero values are not printed, as bpftrace does not print them.
    if m["printed"].as_array().is_some_and(|p| p.is_empty()) {
        return 0;
    }
    m["printed"][0]["value"][0]
        .as_u64()
        .unwrap_or_else(|| panic!("no value in {m}"))
}

#[test]
fn device_resident_maps_come_back_to_the_host() {
    // The fake launch adds 1 to value 0 of a one-entry array in every 256-byte block of
    // every device allocation. count.bpf.c only adds to its counter, so its device copy is
    // striped: 128 copies 256 bytes apart, each getting 1 per launch, summed by the shim.
    // `trace` must show that sum at exit; with `--maps host` nothing is allocated and the
    // (fake, code-less) launches change nothing.
    let (Some(probe), Some(_)) = (bpftime_tests::compile("count"), shim()) else {
        return;
    };
    let f = fake("devmaps");
    let ptx = root().join("jit/tests/ptx_corpus/nvcc/vecadd_sm90.ptx");
    let fat = root().join("attach/tests/corpus/vecadd_multi.fatbin");
    let app = [
        "app_direct",
        &ptx.display().to_string(),
        &fat.display().to_string(),
        "0",
        "5",
    ];
    let (code, out, err) = f.run(&[&probe], &app);
    assert_eq!(code, 0, "{err}\n{out}");
    assert_eq!(final_value(&out, "count:entries"), 5 * 128, "{out}");
    let calls = f.calls();
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("cuMemAlloc"))
            .collect::<Vec<_>>(),
        ["cuMemAlloc 32768"],
        "one map, 128 stripes of 256 bytes: {calls:#?}"
    );
    let dm = &events(&out, "device_maps")[0];
    assert_eq!(
        (dm["maps"].as_u64(), dm["striped"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(
        calls.iter().any(|c| c == "cuStreamCreate 1"),
        "non-blocking stream: {calls:#?}"
    );
    let last_launch = calls.iter().rposition(|c| c == "cuLaunchKernel").unwrap();
    assert!(
        calls[last_launch..]
            .iter()
            .any(|c| c.starts_with("cuMemcpyDtoHAsync")),
        "copied out after the last launch (at exit): {calls:#?}"
    );
    assert_eq!(events(&out, "device_maps").len(), 1, "{out}");
    assert!(f.assemble_loaded() >= 2);

    let (code, out, err) = f.run_with(&["--maps", "host"], &[&probe], &app);
    assert_eq!(code, 0, "{err}\n{out}");
    assert_eq!(final_value(&out, "count:entries"), 0, "{out}");
    assert!(!f.calls().iter().any(|c| c.starts_with("cuMemAlloc")));
    assert!(events(&out, "device_maps").is_empty());
}

#[test]
fn device_maps_are_copied_before_the_context_is_released() {
    // app_cudart launches twice, releases the primary context through the pointer
    // cuGetProcAddress gave it (as cudart's teardown does), then launches once more: the
    // copy made before the release is the last one.
    let (Some(probe), Some(_)) = (bpftime_tests::compile("count"), shim()) else {
        return;
    };
    let f = fake("release");
    let fat = root().join("attach/tests/corpus/vecadd_multi.fatbin");
    let (code, out, err) = f.run(&[&probe], &["app_cudart", &fat.display().to_string()]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert_eq!(final_value(&out, "count:entries"), 2 * 128, "{out}");
    let calls = f.calls();
    let release = calls
        .iter()
        .position(|c| c.starts_with("cuDevicePrimaryCtxRelease"))
        .unwrap_or_else(|| panic!("{calls:#?}"));
    assert!(
        calls[release - 1].starts_with("cuMemcpyDtoHAsync"),
        "{calls:#?}"
    );
    assert!(
        !calls[release..]
            .iter()
            .any(|c| c.starts_with("cuMemcpyDtoHAsync")),
        "no copy after the release: {calls:#?}"
    );
}

#[test]
fn memory_probes_name_their_sites_by_source_line() {
    // The shim runs the memory pass on every module: each global access of vecadd (built
    // with -lineinfo) becomes a site, reported with its source line before any launch, and
    // the PTX the driver gets assembles.
    let (Some(probe), Some(_)) = (bpftime_tests::compile("mem_count"), shim()) else {
        return;
    };
    let f = fake("memprobe");
    let ptx = root().join("jit/tests/ptx_corpus/nvcc/vecadd_sm90_lineinfo.ptx");
    let p = ptx.display().to_string();
    let app = ["app_direct", &p, &p, "0", "2"];
    let (code, out, err) = f.run_with(&["--sample", "4"], &[&probe], &app);
    assert_eq!(code, 0, "{err}\n{out}");
    // The module is loaded twice (as PTX and through cuModuleLoadFatBinary): each load
    // reports its sites, ids dense over the session; a cache hit repeats the same ids.
    let all: Vec<serde_json::Value> = events(&out, "sites")
        .iter()
        .flat_map(|e| e["sites"].as_array().cloned().unwrap_or_default())
        .collect();
    let ids: std::collections::BTreeSet<u64> =
        all.iter().map(|s| s["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len() % 3, 0, "{out}");
    assert_eq!(ids.iter().next_back().copied(), Some(ids.len() as u64 - 1));
    let sites: Vec<serde_json::Value> = events(&out, "sites")[0]["sites"]
        .as_array()
        .cloned()
        .unwrap();
    let got: Vec<(String, String, u64)> = sites
        .iter()
        .map(|s| {
            (
                s["op"].as_str().unwrap().to_string(),
                s["opcode"].as_str().unwrap().to_string(),
                s["id"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("load".into(), "ld.global.f32".into(), 0),
            ("load".into(), "ld.global.f32".into(), 1),
            ("store".into(), "st.global.f32".into(), 2)
        ],
        "{out}"
    );
    assert!(
        sites.iter().all(
            |s| s["file"].as_str().is_some_and(|f| f.ends_with("vecadd.cu"))
                && s["line"].as_u64().is_some()
        ),
        "{out}"
    );
    let attach = events(&out, "attach");
    assert!(attach.iter().any(|a| a["site"] == "memory"), "{out}");
    assert!(f.assemble_loaded() >= 1);
}

#[test]
fn mem_report_adds_its_probe_and_prints_a_report_not_its_maps() {
    let Some(_) = shim() else {
        return;
    };
    let f = fake("memreport");
    let ptx = root().join("jit/tests/ptx_corpus/nvcc/vecadd_sm90_lineinfo.ptx");
    let p = ptx.display().to_string();
    let (code, out, err) = f.run_with(&["--mem-report"], &[], &["app_direct", &p, &p, "3", "1"]);
    // The app's exit code passes through.
    assert_eq!(code, 3, "{err}\n{out}");
    assert!(
        events(&out, "attach")
            .iter()
            .any(|a| a["probe"] == "mem_report" && a["site"] == "memory"),
        "{out}"
    );
    let r = events(&out, "mem_report");
    assert_eq!(r.len(), 1, "{out}");
    assert!(r[0]["kernels"].is_array());
    assert!(
        events(&out, "map")
            .iter()
            .all(|m| !m["map"].as_str().unwrap_or("").starts_with("mem_report:")),
        "{out}"
    );
    assert!(f.assemble_loaded() >= 1);
}

#[test]
fn mem_trace_writes_a_file_and_reports_drops() {
    // The fake launch adds 1 at offset 128 of every 256-byte block of every allocation: in
    // each of the 128 per-SM control blocks that is the drop counter, so two launches read
    // as 256 dropped records, and no record was reserved (heads stay 0). The ring is
    // rounded up to MIN_SUB records per SM, each with a 32-byte slot and two 8-byte hole
    // marks. The file gets its header,
    // the site table its sites, and `memtrace` reads both.
    let Some(_) = shim() else {
        return;
    };
    let f = fake("memtrace");
    let ptx = root().join("jit/tests/ptx_corpus/nvcc/vecadd_sm90_lineinfo.ptx");
    let p = ptx.display().to_string();
    let file = f.dir.join("trace.bin");
    let fs = file.display().to_string();
    let (code, out, err) = f.run_with(
        &["--mem-trace", &fs, "--mem-trace-records", "4096"],
        &[],
        &["app_direct", &p, &p, "0", "2"],
    );
    assert_eq!(code, 0, "{err}\n{out}");
    let done = events(&out, "mem_trace");
    assert_eq!(done.len(), 1, "{out}");
    assert_eq!(
        (done[0]["records"].as_u64(), done[0]["dropped"].as_u64()),
        (Some(0), Some(256)),
        "{out}"
    );
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(&bytes[..8], b"BPFTMTR1");
    let calls = f.calls();
    assert!(
        calls
            .iter()
            .any(|c| c == &format!("cuMemAlloc {}", 128 * 8192 * (32 + 16))),
        "{calls:#?}"
    );
    let sites: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(format!("{fs}.sites.json")).unwrap()).unwrap();
    assert!(sites.len() >= 3, "{sites:?}");
    let o = Command::new(bin())
        .args(["memtrace", "--json", &fs])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["records"], 0);
    assert!(f.assemble_loaded() >= 1);
}

/// One `GET /metrics` of the exporter on `port`: the whole response.
fn scrape(port: u16) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    Ok(body)
}

#[test]
fn prometheus_serves_the_maps_and_counters_while_the_app_runs() {
    // The fake launches add 5 × 128 to count:entries (see the device-map test); the shim
    // copies it out every 100 ms, and a scrape during the app's sleep must show it, labelled
    // by map and key, with trace's own module counter.
    let (Some(probe), Some(_)) = (bpftime_tests::compile("count"), shim()) else {
        return;
    };
    let f = fake("prometheus");
    let ptx = root().join("jit/tests/ptx_corpus/nvcc/vecadd_sm90.ptx");
    let fat = root().join("attach/tests/corpus/vecadd_multi.fatbin");
    // A free port: bind one, let it go, hand it to trace.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = Command::new(bin());
    c.args(["trace", "--interval", "100ms", "--json", "--prometheus"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--shim")
        .arg(shim().unwrap())
        .arg(&probe)
        .arg("--")
        .arg(f.dir.join("app_direct"))
        .args([
            &ptx.display().to_string(),
            &fat.display().to_string(),
            "0",
            "5",
        ])
        .env("LD_LIBRARY_PATH", &f.dir)
        .env("FAKE_CUDA_DIR", f.dir.join("rec"))
        .env("FAKE_SLEEP_MS", "3000")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = c.spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut last = String::new();
    let mut seen = false;
    while std::time::Instant::now() < deadline {
        if let Ok(b) = scrape(port) {
            if b.contains("bpftime_map_value{map=\"count:entries\",key=\"0\"} 640") {
                seen = true;
                last = b;
                break;
            }
            last = b;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(seen, "never saw the map in a scrape; last:\n{last}");
    assert!(
        last.contains("bpftime_trace_modules_total{instrumented=\"true\"}"),
        "{last}"
    );
    assert!(last.starts_with("HTTP/1.0 200 OK"), "{last}");
}

#[test]
fn api_log_records_every_call_on_every_path() {
    // app_copies makes its calls linked with -lcuda, then two through cuGetProcAddress
    // (one the per-thread-stream twin); the log must hold each, in order, with its
    // direction, bytes, stream, flags and result, and no call of the shim's own.
    use attach::api::call_name;
    use attach::apilog::{FLAG_ASYNC, FLAG_PTDS, Kind};
    if shim().is_none() {
        return;
    }
    let f = fake("api_log");
    let log = f.dir.join("api.log");
    let (code, out, err) = f.run_with(
        &["--api-log", &log.display().to_string()],
        &[],
        &["app_copies"],
    );
    assert_eq!(code, 0, "{err}\n{out}");
    let ev = attach::apilog::read(&log).unwrap();
    let got: Vec<(&str, Kind, u64, i32, u8)> = ev
        .iter()
        .map(|e| (call_name(e.call), e.kind, e.bytes, e.result, e.flags))
        .collect();
    let want = [
        ("cuMemAlloc_v2", Kind::Alloc, 1 << 20, 0, 0),
        ("cuMemAllocHost_v2", Kind::HostAlloc, 1 << 20, 0, 0),
        ("cuMemcpyHtoD_v2", Kind::HtoD, 4096, 0, 0),
        ("cuMemcpyDtoH_v2", Kind::DtoH, 2048, 0, 0),
        ("cuMemcpy", Kind::HtoD, 1000, 0, 0),
        ("cuMemcpyHtoDAsync_v2", Kind::HtoD, 512, 0, FLAG_ASYNC),
        ("cuMemcpyHtoD_v2", Kind::HtoD, 16, 1, 0),
        ("cuLaunchKernel", Kind::Launch, 256, 0, FLAG_ASYNC),
        ("cuStreamSynchronize", Kind::Sync, 0, 0, 0),
        ("cuCtxSynchronize", Kind::Sync, 0, 0, 0),
        (
            "cuMemcpyHtoDAsync_v2_ptsz",
            Kind::HtoD,
            256,
            0,
            FLAG_ASYNC | FLAG_PTDS,
        ),
        ("cuMemcpyDtoH_v2", Kind::DtoH, 128, 0, 0),
        ("cuMemFree_v2", Kind::Free, 0, 0, 0),
        ("cuMemFreeHost", Kind::HostFree, 0, 0, 0),
    ];
    assert_eq!(got, want, "{ev:#?}");
    // Addresses: every copy's device side is the allocation; the host side the pinned buffer.
    let (d, h) = (ev[0].dst, ev[1].src);
    assert!(d != 0 && h != 0);
    assert_eq!((ev[2].dst, ev[2].src), (d, h));
    assert_eq!((ev[3].device_addr(), ev[3].host_addr()), (Some(d), Some(h)));
    assert_eq!(ev[4].dst, d + 64);
    assert_eq!((ev[5].stream, ev[7].stream, ev[7].aux), (5, 5, 0x77));
    assert_eq!((ev[12].dst, ev[13].src), (d, h));
    // Times are ordered and the thread is the app's.
    assert!(ev.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
    assert!(ev.iter().all(|e| e.tid == ev[0].tid && e.tid != 0));
    let done = events(&out, "api_log");
    assert_eq!(done.len(), 1, "{out}");
    assert_eq!(done[0]["events"].as_u64(), Some(want.len() as u64));
    // Without --api-log the exported wrappers only forward: no file, same exit code.
    let (code, out, err) = f.run(&[], &["app_copies"]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(events(&out, "api_log").is_empty(), "{out}");
    // A damaged log is refused with the offset.
    let bytes = std::fs::read(&log).unwrap();
    std::fs::write(&log, &bytes[..bytes.len() - 5]).unwrap();
    let e = attach::apilog::read(&log).unwrap_err().to_string();
    assert!(
        e.contains("truncated record") && e.contains("offset"),
        "{e}"
    );
}

#[test]
fn the_application_can_pause_host_probes() {
    // app_pause copies 100 bytes twice, pauses the probes through the shim's
    // bpftime_host_probes_pause, copies 200 bytes five times, resumes, copies 300 bytes.
    let (Some(probe), Some(_)) = (bpftime_tests::compile("cuda_uprobe"), shim()) else {
        return;
    };
    let f = fake("pause");
    let (code, out, err) = f.run(&[&probe], &["app_pause"]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(out.contains("app_pause ok found=1 was=0 paused=1"), "{out}");
    let mut by_size = printed_rows(&out, "cuda_uprobe:htod_by_size");
    by_size.sort();
    assert_eq!(
        by_size,
        [("100".to_string(), 2), ("300".to_string(), 1)],
        "no probe ran while paused: {out}"
    );
    // The API log (what `llm-cache observe` records) pauses with them.
    let log = f.dir.join("pause.log");
    let (code, out, err) = f.run_with(
        &["--api-log", &log.display().to_string()],
        &[],
        &["app_pause"],
    );
    assert_eq!(code, 0, "{err}\n{out}");
    let copies: Vec<u64> = attach::apilog::read(&log)
        .unwrap()
        .iter()
        .filter(|e| attach::api::call_name(e.call) == "cuMemcpyHtoD_v2")
        .map(|e| e.bytes)
        .collect();
    assert_eq!(copies, [100, 100, 300], "no record while paused");
    // Without the shim the switch is not there, and nothing else changes.
    let plain = std::process::Command::new(f.dir.join("app_pause"))
        .env("LD_LIBRARY_PATH", &f.dir)
        .env("FAKE_CUDA_DIR", f.dir.join("rec"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&plain.stdout).contains("app_pause ok found=0"),
        "{plain:?}"
    );
}

#[test]
fn host_probes_on_driver_calls_read_their_arguments_and_results() {
    // cuda_uprobe.bpf.c is written with libbpf's BPF_KPROBE/BPF_KRETPROBE: on app_copies,
    // cuMemcpyHtoD_v2 runs twice (4096 bytes, then 16 bytes that fail with 1), and one
    // launch has grid x 2 and block x 128 on stream 5. The ctx is pt_regs: the arguments
    // must land in PARM1..5, those past the sixth on the stack at PT_REGS_SP, the result in
    // RC, and the maps must reach `trace` from the app's thread.
    let (Some(probe), Some(_)) = (bpftime_tests::compile("cuda_uprobe"), shim()) else {
        return;
    };
    let f = fake("uprobe");
    let (code, out, err) = f.run(&[&probe], &["app_copies"]);
    assert_eq!(code, 0, "{err}\n{out}");
    let mut by_size = printed_rows(&out, "cuda_uprobe:htod_by_size");
    by_size.sort();
    assert_eq!(
        by_size,
        [("16".to_string(), 1), ("4096".to_string(), 1)],
        "{out}"
    );
    let totals = printed_rows(&out, "cuda_uprobe:totals");
    assert_eq!(
        totals,
        [
            ("0".to_string(), 4112),
            ("1".to_string(), 2),
            ("2".to_string(), 1),
            ("3".to_string(), 256),
            // The stream, argument 9, read from the stack image at PT_REGS_SP.
            ("4".to_string(), 5)
        ],
        "{out}"
    );
    assert!(
        !err.contains("matched no kernel"),
        "host probes match no kernel by design: {err}"
    );
}

/// Builds `libbpftsym.so.1` (and its `libbpftsym.so` link) and `app_sym`, which calls it.
fn sym_app(f: &Fake) {
    let src = root().join("host/tests/fake_cuda");
    let d = f.dir.display().to_string();
    bpftime_tests::fake_cuda::cc(&[
        "-shared",
        "-fPIC",
        "-O1",
        "-Wl,-soname,libbpftsym.so.1",
        "-o",
        &format!("{d}/libbpftsym.so.1"),
        &src.join("libbpftsym.c").display().to_string(),
    ]);
    let _ = std::fs::remove_file(f.dir.join("libbpftsym.so"));
    std::os::unix::fs::symlink(f.dir.join("libbpftsym.so.1"), f.dir.join("libbpftsym.so"))
        .expect("link libbpftsym.so");
    bpftime_tests::fake_cuda::cc(&[
        "-O1",
        "-o",
        &format!("{d}/app_sym"),
        &src.join("app_sym.c").display().to_string(),
        &format!("-L{d}"),
        "-lbpftsym",
        "-ldl",
    ]);
    bpftime_tests::fake_cuda::cc(&[
        "-O1",
        "-o",
        &format!("{d}/app_sym_late"),
        &src.join("app_sym_late.c").display().to_string(),
        "-ldl",
    ]);
}

#[test]
fn host_probes_on_a_library_loaded_at_run_time_start_when_it_appears() {
    // app_sym_late dlopens libbpftsym.so after start and calls sym_add three times through
    // dlsym (i and 10 * i for i = 1..3): the probes wait for the library, say so, and then
    // see every call.
    let (Some(probe), Some(_)) = (bpftime_tests::compile("uprobe_sym"), shim()) else {
        return;
    };
    let f = fake("uprobe_sym_late");
    sym_app(&f);
    let (code, out, err) = f.run(&[&probe], &["app_sym_late"]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(out.contains("app_sym_late ok 66"), "{out}\n{err}");
    assert!(
        err.contains("is not loaded yet") || out.contains("is not loaded yet"),
        "{err}\n{out}"
    );
    let totals: Vec<_> = printed_rows(&out, "uprobe_sym:sym_totals")
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .collect();
    assert_eq!(
        totals,
        [
            ("0".to_string(), 3),
            ("1".to_string(), 6),
            ("2".to_string(), 60),
            ("3".to_string(), 66),
            ("4".to_string(), 3)
        ],
        "{out}\n{err}"
    );
}

#[test]
fn host_probes_on_a_library_function_read_arguments_stack_arguments_and_results() {
    // uprobe_sym.bpf.c on libbpftsym.so's sym_add: ten calls through the PLT (i, 2, 3, 4,
    // 5, 6, 100 + i, 8 for i = 1..10) and one through dlsym (1000, 0, …, 7, 0). The
    // application's own results must not change (2397, and 10.25 from a function taking
    // and returning doubles through the same library).
    let (Some(probe), Some(_)) = (bpftime_tests::compile("uprobe_sym"), shim()) else {
        return;
    };
    let f = fake("uprobe_sym");
    sym_app(&f);
    let (code, out, err) = f.run(&[&probe], &["app_sym"]);
    assert_eq!(code, 0, "{err}\n{out}");
    // app_mul(i, i + 1) for i = 1..4: 2 + 6 + 12 + 20.
    assert!(out.contains("app_sym ok 2397 10.25 40"), "{out}\n{err}");
    let totals = printed_rows(&out, "uprobe_sym:sym_totals");
    assert_eq!(
        totals,
        [
            ("0".to_string(), 11),
            ("1".to_string(), 55 + 1000),
            ("2".to_string(), (101..=110).sum::<u64>() + 7),
            ("3".to_string(), 2397),
            ("4".to_string(), 11),
            // The executable's own function, entered through the jump at its entry.
            ("5".to_string(), 4),
            ("6".to_string(), 2 + 3 + 4 + 5),
            ("7".to_string(), 40),
            // `libcudart.so:cudaFakeSync`, found in the executable (no libcudart.so).
            ("8".to_string(), 2)
        ],
        "{out}\n{err}"
    );
}

#[test]
fn a_host_probe_on_a_missing_library_function_stops_the_app_naming_it() {
    let Some(probe) = bpftime_tests::compile_with(
        "uprobe_sym",
        &["SYM_FN=\"sym_nothere\""],
        "uprobe_sym_missing",
    ) else {
        return;
    };
    if shim().is_none() {
        return;
    }
    let f = fake("uprobe_sym_missing");
    sym_app(&f);
    let (code, out, err) = f.run(&[&probe], &["app_sym"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("libbpftsym.so:sym_nothere") && !out.contains("app_sym ok"),
        "{err}\n{out}"
    );
}

#[test]
fn an_executable_function_too_short_to_patch_stops_the_app_naming_it() {
    let Some(probe) =
        bpftime_tests::compile_with("uprobe_sym", &["APP_FN=\"tiny_inc\""], "uprobe_sym_tiny")
    else {
        return;
    };
    if shim().is_none() {
        return;
    }
    let f = fake("uprobe_sym_tiny");
    sym_app(&f);
    let (code, out, err) = f.run(&[&probe], &["app_sym"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("app_sym:tiny_inc")
            && err.contains("does not relocate")
            && !out.contains("app_sym ok"),
        "{err}\n{out}"
    );
}

#[test]
fn a_host_probe_on_a_function_the_shim_does_not_wrap_is_refused_before_the_app_starts() {
    let Some(probe) = bpftime_tests::compile_with(
        "cuda_uprobe",
        &["HTOD_FN=\"cuModuleGetFunction\""],
        "cuda_uprobe_bad",
    ) else {
        return;
    };
    let f = fake("uprobe_bad");
    let (code, out, err) = f.run(&[&probe], &["app_copies"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("libcuda.so:cuModuleGetFunction") && !out.contains("app_copies ok"),
        "{err}\n{out}"
    );
}

#[test]
fn memcpy_bw_and_sync_stalls_examples_count_what_the_app_did() {
    // examples/memcpy_bw.bpf.c and sync_stalls.bpf.c on app_copies: synchronous copies of
    // 4096 bytes host to device (one more of 16 bytes fails and is left out), 2048 and 128
    // bytes device to host (the second through cuGetProcAddress); one stream and one
    // context synchronisation.
    let (Some(bw), Some(stalls), Some(_)) = (
        bpftime_tests::compile("memcpy_bw"),
        bpftime_tests::compile("sync_stalls"),
        shim(),
    ) else {
        return;
    };
    let f = fake("host_examples");
    let (code, out, err) = f.run(&[&bw, &stalls], &["app_copies"]);
    assert_eq!(code, 0, "{err}\n{out}");
    let m = events(&out, "map");
    let slots = |name: &str| -> Vec<(u64, u64)> {
        let v = m
            .iter()
            .rfind(|v| v["map"] == name && v["final"] == true)
            .unwrap_or_else(|| panic!("no {name}: {out}"));
        let mut s: Vec<(u64, u64)> = v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let word = |h: &str| {
                    let b: Vec<u8> = (0..h.len())
                        .step_by(2)
                        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                        .collect();
                    b.iter().rev().fold(0u64, |a, &x| a << 8 | x as u64)
                };
                (word(e[0].as_str().unwrap()), word(e[1].as_str().unwrap()))
            })
            .filter(|&(_, v)| v != 0)
            .collect();
        s.sort();
        s
    };
    assert_eq!(slots("memcpy_bw:htod_bytes_hist"), [(12, 1)], "{out}");
    assert_eq!(slots("memcpy_bw:dtoh_bytes_hist"), [(7, 1), (11, 1)]);
    let total = |name: &str| slots(name).iter().map(|s| s.1).sum::<u64>();
    assert_eq!(total("memcpy_bw:htod_mbps_small_hist"), 1);
    assert_eq!(total("memcpy_bw:dtoh_mbps_small_hist"), 2);
    assert_eq!(
        total("memcpy_bw:htod_mbps_large_hist") + total("memcpy_bw:dtoh_mbps_large_hist"),
        0
    );
    assert_eq!(
        slots("sync_stalls:calls"),
        [(0, 1), (1, 1)],
        "stream, then context"
    );
    assert_eq!(total("sync_stalls:stall_us_hist"), 2);
}

#[test]
fn api_errors_names_every_failing_driver_call_and_its_result() {
    // examples/api_errors.bpf.c probes the return of every wrapped driver function
    // (`uretprobe/libcuda.so:*`). app_copies makes one failing call: cuMemcpyHtoD_v2 on a
    // null device pointer, which the fake driver answers with 1 (CUDA_ERROR_INVALID_VALUE);
    // its other calls (allocations, copies, a launch, syncs, frees) succeed and must not
    // be counted. The key's address prints as the function's name.
    let (Some(probe), Some(_)) = (bpftime_tests::compile("api_errors"), shim()) else {
        return;
    };
    let f = fake("api_errors");
    let (code, out, err) = f.run(&[&probe], &["app_copies"]);
    assert_eq!(code, 0, "{err}\n{out}");
    let rows = printed_rows(&out, "api_errors:errors");
    assert_eq!(rows, [("cuMemcpyHtoD_v2, 1".to_string(), 1)], "{out}");
    // The probe really ran on the successful calls too: the shim named each function.
    let named = events(&out, "host_function").len();
    assert!(named >= 8, "only {named} functions named: {out}");
}

#[test]
fn cumem_leak_reports_outstanding_device_memory_by_call_stack() {
    // examples/cumem_leak.bpf.c on app_leak: alloc_buffers() keeps 2 of its 3 allocations
    // of 4096 bytes, alloc_table() keeps 1000 bytes, main()'s freed scratch leaves nothing.
    // The stacks come from bpf_get_stack (unwind tables) in the shim; the new pointer from
    // bpf_probe_read_user on cuMemAlloc's out-parameter. Keys print frame by frame, by name.
    let (Some(probe), Some(_)) = (bpftime_tests::compile("cumem_leak"), shim()) else {
        return;
    };
    let f = fake("cumem_leak");
    let (code, out, err) = f.run(&[&probe], &["app_leak"]);
    assert_eq!(code, 0, "{err}\n{out}");
    let rows = |name: &str| {
        let mut v = printed_rows(&out, name);
        v.sort();
        v
    };
    let bytes = rows("cumem_leak:outstanding_bytes");
    let allocs = rows("cumem_leak:outstanding_allocs");
    assert_eq!(bytes.len(), 2, "two leaking stacks: {bytes:?}\n{out}");
    assert!(
        bytes[0].0.starts_with("alloc_buffers+0x") && bytes[0].0.contains(", main+0x"),
        "{bytes:?}"
    );
    assert!(
        bytes[1].0.starts_with("alloc_table+0x") && bytes[1].0.contains(", main+0x"),
        "{bytes:?}"
    );
    assert_eq!((bytes[0].1, bytes[1].1), (8192, 1000), "{bytes:?}");
    assert_eq!(
        allocs.iter().map(|r| r.1).collect::<Vec<_>>(),
        [2, 1],
        "{allocs:?}"
    );
}

/// `(name, params, correlation id, launch time)` of each logged launch of a fake function.
fn launches_logged(calls: &[String], call: &str) -> Vec<(String, u32, u64, u64)> {
    calls
        .iter()
        .filter_map(|l| {
            let rest = l.strip_prefix(call)?.strip_prefix(' ')?;
            let mut w = rest.split(' ');
            let name = w.next()?.to_string();
            let params = w.next()?.strip_prefix("params=")?.parse().ok()?;
            let (a, b) = w.next()?.strip_prefix("last=")?.split_once(',')?;
            Some((name, params, a.parse().ok()?, b.parse().ok()?))
        })
        .collect()
}

#[test]
fn launches_pass_correlation_ids_and_calibrated_launch_times() {
    // launchlate.bpf.c reads ctx->launch_time: the kernel gets two hidden parameters, and
    // every launch of it must pass them, on each path (kernelParams, extra's buffer, a graph
    // node). The fake's clock kernel runs CLOCK_MONOTONIC + 1 s as %globaltimer: the
    // calibration must find that offset within its stated uncertainty, and the launch times
    // must be the host's time of the call on that clock.
    if shim().is_none() {
        return;
    }
    let Some(probe) = bpftime_tests::compile("launchlate") else {
        eprintln!("SKIPPING: no clang");
        return;
    };
    let f = fake("launch");
    let ptx = f.dir.join("k.ptx");
    std::fs::write(
        &ptx,
        ".version 8.0\n.target sm_70\n.address_size 64\n\n.visible .entry k(\n\t.param .u64 k_a,\n\t.param .u32 k_b\n)\n{\n\tret;\n}\n",
    )
    .unwrap();
    let before = ebpf::interp::monotonic_ns();
    let (code, out, err) = f.run(
        &[&probe],
        &["app_launch", &ptx.display().to_string(), "k", "2", "5"],
    );
    let after = ebpf::interp::monotonic_ns();
    assert_eq!(code, 0, "{err}\n{out}");
    let clock = events(&out, "clock");
    assert!(!clock.is_empty(), "no calibration: {out}\n{err}");
    let off = clock[0]["offset_ns"].as_i64().unwrap();
    let unc = clock[0]["uncertainty_ns"].as_u64().unwrap() as i64;
    assert!(
        (off - 1_000_000_000).abs() <= unc,
        "offset {off} ± {unc}, the fake's is 1e9"
    );
    assert!(unc < 5_000_000, "uncertainty {unc} ns");
    let calls = f.calls();
    let launched = launches_logged(&calls, "cuLaunchKernel");
    assert_eq!(launched.len(), 6, "{calls:#?}");
    for (i, (name, params, corr, t)) in launched.iter().enumerate() {
        assert_eq!((name.as_str(), *params), ("k", 4), "{calls:#?}");
        // Ids count launches from 1; times are the calls' host times plus the offset.
        assert_eq!(*corr, i as u64 + 1, "{calls:#?}");
        let host = t.wrapping_add_signed(-off);
        assert!(
            host + unc as u64 >= before && host <= after + unc as u64,
            "launch {i}: time {t} is not between the run's start and end on the GPU clock"
        );
    }
    assert!(launched.windows(2).all(|w| w[0].3 <= w[1].3));
    // The graph node: the next id, and no time (a node runs at every graph launch).
    let nodes = launches_logged(&calls, "cuGraphAddKernelNode");
    assert_eq!(nodes, vec![("k".to_string(), 4, 7, 0)], "{calls:#?}");
    // The instrumented kernel assembles, hidden parameters and all.
    assert_eq!(f.assemble_loaded(), 1);
    // Without a probe reading the launch fields, the signature and the launches stay as
    // they are (and the fake sees the app's own two parameters).
    let Some(count) = bpftime_tests::compile("kernel_count") else {
        return;
    };
    let (code, out, err) = f.run(
        &[&count],
        &["app_launch", &ptx.display().to_string(), "k", "2", "1"],
    );
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(events(&out, "clock").is_empty(), "{out}");
    let calls = f.calls();
    let launched = launches_logged(&calls, "cuLaunchKernel");
    assert_eq!(launched.len(), 2, "{calls:#?}");
    assert!(launched.iter().all(|l| l.1 == 2), "{calls:#?}");
    // A host probe on the launch call reads the same ids from its ctx (launches 1..=4 of
    // this run); no kernel probe reads them, so the kernel keeps its signature.
    if let Some(corr) = bpftime_tests::compile("uprobe_corr") {
        let (code, out, err) = f.run(
            &[&corr],
            &["app_launch", &ptx.display().to_string(), "k", "2", "3"],
        );
        assert_eq!(code, 0, "{err}\n{out}");
        assert_eq!(
            final_value(&out, "uprobe_corr:corr_sum"),
            1 + 2 + 3 + 4,
            "{out}"
        );
        assert_eq!(final_value(&out, "uprobe_corr:corr_max"), 4, "{out}");
        assert!(
            launches_logged(&f.calls(), "cuLaunchKernel")
                .iter()
                .all(|l| l.1 == 2)
        );
    }
    // launch_profile: its uprobe counts the launch calls; its scratch map is not printed.
    if let Some(prof) = bpftime_tests::compile("launch_profile") {
        let (code, out, err) = f.run(
            &[&prof],
            &["app_launch", &ptx.display().to_string(), "k", "2", "3"],
        );
        assert_eq!(code, 0, "{err}\n{out}");
        assert_eq!(final_value(&out, "launch_profile:launch_calls"), 4, "{out}");
        assert!(
            events(&out, "map")
                .iter()
                .all(|m| m["map"] != "launch_profile:_inflight"),
            "{out}"
        );
    }
    // --timeline alone brings its probe and the API log: the file holds every launch call
    // with its correlation id (the fake runs no kernel, so there are no GPU spans here;
    // the builder's own test lines those up).
    let tl = f.dir.join("timeline.json");
    let (code, out, err) = f.run_with(
        &["--timeline", &tl.display().to_string()],
        &[],
        &["app_launch", &ptx.display().to_string(), "k", "2", "3"],
    );
    assert_eq!(code, 0, "{err}\n{out}");
    assert_eq!(events(&out, "timeline").len(), 1, "{out}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&tl).unwrap()).unwrap();
    let ids: Vec<u64> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "launch")
        .map(|e| e["args"]["correlation_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [1, 2, 3, 4], "{doc}");
    assert!(
        !doc["otherData"]["calibrations"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let calls = f.calls();
    assert!(
        launches_logged(&calls, "cuLaunchKernel")
            .iter()
            .all(|l| l.1 == 4),
        "{calls:#?}"
    );
}

#[test]
fn kernel_events_show_the_apps_threads_off_the_cpu() {
    // --kernel-events loads a kernel eBPF program on sched/sched_switch (aya). app_alloc
    // sleeps 300 ms after its work ($FAKE_SLEEP_MS): its thread must show a blocked span of
    // at least that long, on the app's own track. Needs root and tracefs; elsewhere trace
    // warns and writes the timeline without kernel events, which this test then checks.
    if shim().is_none() {
        return;
    }
    let f = fake("kernel_events");
    let ptx = f.dir.join("k.ptx");
    std::fs::write(
        &ptx,
        ".version 8.0\n.target sm_70\n.address_size 64\n\n.visible .entry k()\n{\n\tret;\n}\n",
    )
    .unwrap();
    let tl = f.dir.join("kernel_timeline.json");
    let (code, out, err) = f.run_env(
        &[("FAKE_SLEEP_MS", "300")],
        &["--timeline", &tl.display().to_string(), "--kernel-events"],
        &[],
        &["app_alloc", &ptx.display().to_string(), "4096"],
    );
    assert_eq!(code, 0, "{err}\n{out}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&tl).unwrap()).unwrap();
    if err.contains("--kernel-events:") {
        assert!(
            std::env::var_os("BPFTIME_REQUIRE_KERNEL_BPF").is_none(),
            "kernel events required: {err}"
        );
        eprintln!("SKIPPING the kernel-event checks: {err}");
        return;
    }
    let evs = doc["traceEvents"].as_array().unwrap();
    let pid = evs
        .iter()
        .find(|e| e["cat"] == "launch")
        .map(|e| e["pid"].clone())
        .expect("the app's launch call");
    let off: Vec<&serde_json::Value> = evs.iter().filter(|e| e["cat"] == "sched").collect();
    assert!(!off.is_empty(), "no off-CPU span: {err}");
    assert!(off.iter().all(|e| e["pid"] == pid), "on the app's tracks");
    // The main thread (its tid is the process id) sleeps 300 ms in one piece.
    let longest = off
        .iter()
        .filter(|e| e["name"] == "off CPU (blocked)" && e["tid"] == pid)
        .map(|e| e["dur"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(
        (300_000.0..2_000_000.0).contains(&longest),
        "the 300 ms sleep is one blocked span of the main thread (longest {longest} µs)"
    );
    let t = &events(&out, "timeline")[0];
    assert_eq!(t["off_cpu"].as_u64(), Some(off.len() as u64), "{t}");
}

/// Waits up to 20 s for `path` to exist.
fn wait_for(path: &Path) -> bool {
    for _ in 0..2000 {
        if path.exists() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

/// Waits up to 20 s for the shim's report file of trace `pid` to hold a line with `needle`.
fn wait_report(pid: u32, needle: &str, count: usize) -> bool {
    let p = std::env::temp_dir().join(format!("bpftime-trace-{pid}.jsonl"));
    for _ in 0..2000 {
        if std::fs::read_to_string(&p).is_ok_and(|t| t.matches(needle).count() >= count) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

#[test]
fn hot_attach_loads_and_unloads_probes_while_the_app_runs() {
    // app_launch runs three phases of 3 launches, pausing between them. After phase 1,
    // `load --name` attaches launchlate (which needs the hidden launch parameters); after
    // phase 2, `unload` removes it. The kernel must move to a module with the new probes
    // at its next launch and back after the unload, every launch succeeding: the fake
    // driver logs each launch's parameter count (2 own, 4 with the hidden pair).
    if shim().is_none() {
        return;
    }
    let (Some(count), Some(late)) = (
        bpftime_tests::compile("kernel_count"),
        bpftime_tests::compile("launchlate"),
    ) else {
        eprintln!("SKIPPING: no clang");
        return;
    };
    let f = fake("hot");
    let _ = std::fs::remove_dir_all(f.dir.join("rec"));
    std::fs::create_dir_all(f.dir.join("rec")).unwrap();
    let ptx = f.dir.join("k.ptx");
    std::fs::write(
        &ptx,
        ".version 8.0\n.target sm_70\n.address_size 64\n\n.visible .entry k(\n\t.param .u64 k_a,\n\t.param .u32 k_b\n)\n{\n\tret;\n}\n",
    )
    .unwrap();
    let name = format!("bpftime-hot-test-{}", std::process::id());
    let wait = f.dir.join("wait");
    // `--prometheus` too: an object loaded later has its maps served as well.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = Command::new(bin());
    c.args([
        "trace",
        "--interval",
        "0",
        "--json",
        "--name",
        &name,
        "--prometheus",
    ])
    .arg(format!("127.0.0.1:{port}"));
    if let Some(s) = shim() {
        c.arg("--shim").arg(s);
    }
    c.arg(&count)
        .arg("--")
        .arg(f.dir.join("app_launch"))
        .args([ptx.to_str().unwrap(), "k", "2", "3"])
        .env("LD_LIBRARY_PATH", &f.dir)
        .env("FAKE_CUDA_DIR", f.dir.join("rec"))
        .env("APP_WAIT", &wait)
        .env("APP_PHASES", "3")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = c.spawn().unwrap();
    let tpid = child.id();
    let ready = |k: u32| PathBuf::from(format!("{}.ready{k}", wait.display()));
    let go = |k: u32| PathBuf::from(format!("{}.go{k}", wait.display()));
    let cli = |args: &[&str]| {
        let o = Command::new(bin()).args(args).output().unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    assert!(wait_for(&ready(1)), "phase 1 never ended");
    // A bad object is refused with the verifier's reason, and nothing changes.
    let bad = f.dir.join("bad.bpf.o");
    std::fs::write(&bad, b"not an ELF").unwrap();
    let (ok, out) = cli(&["load", "--name", &name, bad.to_str().unwrap()]);
    assert!(!ok && out.contains("bad.bpf.o"), "{out}");
    let (ok, out) = cli(&["load", "--name", &name, "--json", late.to_str().unwrap()]);
    assert!(ok, "{out}");
    let info: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    assert_eq!(info["name"], "launchlate", "{out}");
    let (ok, out) = cli(&["list", "--name", &name]);
    assert!(
        ok && out.contains("kernel_count") && out.contains("launchlate"),
        "{out}"
    );
    assert!(
        wait_report(tpid, "\"event\":\"hot\"", 1),
        "the shim never took generation 1"
    );
    // The change started the clock (launchlate reads launch times): wait for a calibration
    // (a first one that timed out on a loaded machine is redone a second later).
    assert!(
        wait_report(tpid, "\"event\":\"clock\"", 1),
        "no calibration"
    );
    std::fs::write(go(1), b"").unwrap();
    assert!(wait_for(&ready(2)), "phase 2 never ended");
    // The loaded object's maps reach the exporter (a histogram is served whole, zeros
    // included).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut last = String::new();
    while std::time::Instant::now() < deadline {
        last = scrape(port).unwrap_or_else(|e| format!("scrape: {e}"));
        if last.contains("map=\"launchlate:launch_ns_hist\"") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(
        last.contains("map=\"launchlate:launch_ns_hist\""),
        "the loaded object's map is not served:\n{last}"
    );
    let (ok, out) = cli(&["unload", "--name", &name, "launchlate"]);
    assert!(ok, "{out}");
    assert!(
        wait_report(tpid, "\"event\":\"hot\"", 2),
        "the shim never took generation 2"
    );
    std::fs::write(go(2), b"").unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    assert!(stdout.contains("app_launch ok launches=11"), "{stdout}");
    let calls = f.calls();
    let launched = launches_logged(&calls, "cuLaunchKernel");
    let params: Vec<u32> = launched.iter().map(|l| l.1).collect();
    // Phase 1 as loaded, phase 2 with the hidden pair, phase 3 without; then the extra
    // and graph launches of the app (after the unload).
    assert_eq!(params[..9], [2, 2, 2, 4, 4, 4, 2, 2, 2], "{calls:#?}");
    let ids: Vec<u64> = launched[3..6].iter().map(|l| l.2).collect();
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1) && ids[0] >= 1,
        "{calls:#?}"
    );
    assert!(
        launched[3..6].iter().all(|l| l.3 > 0),
        "no launch time: {calls:#?}"
    );
    // Two modules moved (one per change), each instrumented.
    let loads = calls
        .iter()
        .filter(|l| l.starts_with("cuModuleLoadData"))
        .count();
    assert_eq!(loads, 3, "{calls:#?}");
    // The loaded object's maps were printed with the session's.
    assert!(
        events(&stdout, "map")
            .iter()
            .any(|m| m["map"] == "launchlate:launches"),
        "{stdout}"
    );
    // The session's socket is gone with trace.
    assert!(!PathBuf::from(format!("/dev/shm/{name}.sock")).exists());
}
