//! `bpftime-super cxl` as a user runs it: bad parameters are refused before the command
//! starts, `place` shows a policy's choice on an API log, and `run` passes the command's
//! exit code through.

use attach::apilog::{ApiEvent, Kind};
use std::path::PathBuf;
use std::process::{Command, Output};

/// The CLI with `args`; no calibration file but the ones a test names (a configuration
/// directory that does not exist).
fn cxl(args: &[&str]) -> Output {
    cxl_env(args, &[])
}

/// The same with more environment variables.
fn cxl_env(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bpftime-super-cxl"))
        .args(args)
        .env("XDG_CONFIG_HOME", "/nonexistent/bpftime-cxl-tests")
        .envs(env.iter().copied())
        .output()
        .expect("run bpftime-super-cxl")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `name` in a fresh scratch directory, removed when the guard drops.
fn tmp(name: &str) -> (bpftime_tests::tempfile::TempDir, PathBuf) {
    let d = bpftime_tests::scratch_dir("cxl-cli");
    let p = d.path().join(name);
    (d, p)
}

/// An executable shell script `dir/name` (a stand-in for a program the CLI runs).
fn script(dir: &std::path::Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// The configuration a probe object carries (its `cxl_config` global).
fn object_config(path: &std::path::Path) -> cxl_sim::abi::CxlConfig {
    use object::{Object, ObjectSection};
    let bytes = std::fs::read(path).unwrap();
    let elf = object::File::parse(&*bytes).unwrap();
    let data = elf
        .section_by_name(".data.cxl_config")
        .unwrap()
        .data()
        .unwrap()
        .to_vec();
    cxl_sim::abi::CxlConfig::from_bytes(&data).unwrap()
}

#[test]
fn presets_are_listed() {
    let o = cxl(&["presets"]);
    let (out, _) = text(&o);
    assert!(o.status.success());
    for p in ["direct-x8", "switch", "pooled"] {
        assert!(out.contains(p), "{out}");
    }
    let o = cxl(&["presets", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 3);
    assert_eq!(v[0]["params"]["bandwidth_gbps"], 26.0);
}

#[test]
fn bad_parameters_are_refused_before_the_command_starts() {
    let (_scratch, marker) = tmp("started");
    let touch = format!("touch {}", marker.display());
    for (args, want) in [
        (
            vec!["--latency-ns", "2e9"],
            "latency 2000000000 ns is out of range",
        ),
        (vec!["--latency-ns", "-5"], "latency -5 ns is out of range"),
        (
            vec!["--bandwidth-gbps", "0"],
            "bandwidth cap 0 GB/s is out of range",
        ),
        (vec!["--seq-ratio", "0.5"], "sequential ratio 0.5"),
        (vec!["--cache-mib", "100"], "emulated cache of 100 MiB"),
        (
            vec!["--preset", "nvme"],
            "no preset `nvme`: the presets are direct-x8, switch, pooled",
        ),
        (
            vec!["--placement", "site=a:b"],
            "is not a function of an executable",
        ),
        (
            vec!["--placement", "bogus"],
            "placement `bogus`: expected all",
        ),
    ] {
        let mut a = vec!["run"];
        a.extend(args.iter().copied());
        a.extend(["--", "sh", "-c", &touch]);
        let o = cxl(&a);
        let (_, err) = text(&o);
        assert!(!o.status.success(), "{args:?} accepted");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!marker.exists(), "{args:?}: the command ran");
    }
}

#[test]
fn place_shows_the_policys_choice() {
    let (_scratch, log) = tmp("api.log");
    let mut bytes = attach::apilog::header().to_vec();
    let ev = |t: u64, kind, addr: u64, mb: u64| {
        let mut e = ApiEvent::new(1, kind);
        e.start_ns = t;
        e.dst = addr;
        e.bytes = mb << 20;
        e.to_bytes()
    };
    bytes.extend(ev(1, Kind::Alloc, 0x7f00_0000_0000, 512));
    bytes.extend(ev(2, Kind::Alloc, 0x7f00_4000_0000, 64));
    bytes.extend(ev(3, Kind::Free, 0x7f00_4000_0000, 0));
    bytes.extend(ev(4, Kind::Alloc, 0x7f00_8000_0000, 2048));
    std::fs::write(&log, bytes).unwrap();
    let p = log.to_str().unwrap();
    let o = cxl(&["place", "--placement", "size>=1GB", p]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("0x7f0080000000") && out.contains("cxl"),
        "{out}"
    );
    assert!(
        out.contains("1 of 3 allocations in the tier, 2147483648 bytes"),
        "{out}"
    );
    // Local capacity first: 512 MiB fits, 64 MiB does not, the 2 GiB after its free does not.
    let o = cxl(&["place", "--placement", "local=520MB", p]);
    assert!(
        text(&o).0.contains("2 of 3 allocations in the tier"),
        "{}",
        text(&o).0
    );
    let o = cxl(&["place", "--placement", "site=nothing", "--json", p]);
    let (out, err) = text(&o);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tiers"], serde_json::json!(["local", "local", "local"]));
    assert!(err.contains("matches no allocation"), "{err}");
    let o = cxl(&["place", "--placement", "all", "/nonexistent/api.log"]);
    assert!(!o.status.success() && text(&o).1.contains("/nonexistent/api.log"));
}

/// `bpftime-super` beside this binary, when it and the shim are built (`run` drives
/// `bpftime-super trace`; the workspace's tests build both).
fn bpftime_and_shim() -> Option<PathBuf> {
    let bin =
        PathBuf::from(env!("CARGO_BIN_EXE_bpftime-super-cxl")).with_file_name("bpftime-super");
    if bin.is_file() && bin.with_file_name("libbpftime_attach.so").is_file() {
        return Some(bin);
    }
    eprintln!(
        "SKIPPING: {} or the shim is not built (scripts/test builds both)",
        bin.display()
    );
    None
}

#[test]
fn run_passes_the_exit_code_through() {
    let Some(bin) = bpftime_and_shim() else {
        return;
    };
    let o = cxl(&[
        "run",
        "--latency-ns",
        "100",
        "--json",
        "--bpftime",
        bin.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo from-the-app >&2; exit 3",
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("from-the-app"), "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["exit_code"], 3);
    assert_eq!(v["params"]["latency_ns"], 100.0);
    assert_eq!(v["kernels"], serde_json::json!({}));
}

/// `run` asks `trace` to split the probe (`--cold-split`) only when its configuration
/// never takes the probe past its first test: no delay, no cap, no statistics, no change
/// planned. `sweep` never does, its baseline included. A stand-in for bpftime-super
/// records the arguments of each trace it is asked for.
#[test]
fn run_splits_the_probe_only_when_it_delays_and_counts_nothing() {
    let (_scratch, dir) = tmp("fake-trace");
    let args_file = dir.join("args");
    let fake = script(
        &dir,
        "bpftime-super",
        &format!("echo \"$@\" >> {}\n", args_file.display()),
    );
    let traced = |args: &[&str]| -> String {
        let _ = std::fs::remove_file(&args_file);
        let mut a = vec![args[0], "--bpftime", fake.to_str().unwrap()];
        a.extend_from_slice(&args[1..]);
        a.extend_from_slice(&["--", "true"]);
        let o = cxl(&a);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{args:?}: {out}{err}");
        std::fs::read_to_string(&args_file).unwrap()
    };
    let run = |extra: &[&str]| traced(&[&["run", "--no-kernel-time"][..], extra].concat());
    let idle = run(&["--latency-ns", "0", "--no-cap", "--no-stats"]);
    assert!(idle.contains("--cold-split"), "{idle}");
    for busy in [
        &["--latency-ns", "100", "--no-cap", "--no-stats"][..],
        &["--latency-ns", "0", "--bandwidth-gbps", "32", "--no-stats"],
        &["--latency-ns", "0", "--no-cap"],
        &[
            "--latency-ns",
            "0",
            "--no-cap",
            "--no-stats",
            "--at",
            "1s:latency-ns=200",
        ],
    ] {
        let a = run(busy);
        assert!(!a.contains("--cold-split"), "{busy:?}: {a}");
    }
    let out = dir.join("sweep");
    let sweep = traced(&[
        "sweep",
        "--no-stats",
        "--latency",
        "0",
        "--bandwidth",
        "none",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        sweep.lines().count(),
        2,
        "the baseline and one setting: {sweep}"
    );
    assert!(!sweep.contains("--cold-split"), "{sweep}");
}

#[test]
fn load_places_a_services_map_in_the_tier() {
    let bin =
        PathBuf::from(env!("CARGO_BIN_EXE_bpftime-super-cxl")).with_file_name("bpftime-super");
    let Some(obj) = bpftime_tests::compile("job_counter") else {
        return;
    };
    if !bin.is_file() {
        eprintln!(
            "SKIPPING: {} is not built (scripts/test builds it)",
            bin.display()
        );
        return;
    }
    let name = format!("bpftime-cxl-load-{}", std::process::id());
    let mut svc = Command::new(&bin)
        .args([
            "run",
            "--persistent",
            "--backend",
            "cpu",
            "--arena-mib",
            "16",
            "--name",
            &name,
        ])
        .spawn()
        .unwrap();
    let sock = PathBuf::from(format!("/dev/shm/{name}.sock"));
    for _ in 0..400 {
        if sock.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let b = bin.to_str().unwrap();
    let o = cxl(&[
        "load",
        "--preset",
        "direct-x8",
        "--map",
        "counts",
        "--bpftime",
        b,
        obj.to_str().unwrap(),
        "--name",
        &name,
        "--json",
    ]);
    let listed = Command::new(&bin)
        .args(["list", "--json", "--name", &name])
        .output()
        .unwrap();
    let bad = cxl(&[
        "load",
        "--latency-ns",
        "10",
        "--map",
        "nope",
        "--bpftime",
        b,
        obj.to_str().unwrap(),
        "--name",
        &name,
        "--as",
        "other",
    ]);
    let _ = Command::new(&bin).args(["stop", "--name", &name]).status();
    let _ = svc.wait();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let l = String::from_utf8_lossy(&listed.stdout);
    assert!(l.contains("\"cxl:170:26\""), "{l}");
    // A map the program does not have: the service's error, and a failing exit code.
    let (_, err) = text(&bad);
    assert!(
        !bad.status.success() && err.contains("no map `nope`"),
        "{err}"
    );
}

/// `run --placement` on an application (the fake driver of the attach tests: device memory
/// is host memory, kernels run no code): the allocator's host probes put what the policy
/// chooses in the tier, the shim uploads the configuration before `cuMemAlloc` returns, and
/// `run` reports the placement.
#[test]
fn placement_follows_the_applications_allocations() {
    let Some(bin) = bpftime_and_shim() else {
        return;
    };
    let (_scratch, dir) = tmp("fake");
    std::fs::create_dir_all(dir.join("rec")).unwrap();
    bpftime_tests::fake_cuda::build(&dir, &[("app_alloc", true)]);
    let ptx = bpftime_tests::repo_root().join("jit/tests/ptx_corpus/nvcc/vecadd_sm90.ptx");
    // `bpftime-super cxl run ARGS… -- app_alloc PTX SIZES…` on the fake driver.
    let app = |args: &[&str], sizes: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_bpftime-super-cxl"));
        c.arg("run")
            .args(args)
            .arg("--bpftime")
            .arg(&bin)
            .arg("--")
            .arg(dir.join("app_alloc"))
            .arg(&ptx)
            .args(sizes)
            .env("LD_LIBRARY_PATH", &dir)
            .env("FAKE_CUDA_DIR", dir.join("rec"));
        c
    };
    // One run under `placement` over `sizes`: the report, and the app's stderr and the
    // fake driver's call log.
    let run_with = |placement: &str, sizes: &[&str]| {
        let _ = std::fs::remove_file(dir.join("rec/calls.log"));
        let o = app(
            &[
                "--latency-ns",
                "100",
                "--json",
                "--no-kernel-time",
                "--placement",
                placement,
            ],
            sizes,
        )
        .output()
        .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{placement}: {err}");
        let v: serde_json::Value =
            serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        let calls = std::fs::read_to_string(dir.join("rec/calls.log")).unwrap_or_default();
        (v, err, calls)
    };
    // Where the app says it allocated `size`.
    let addr = |err: &str, size: &str| {
        err.lines()
            .find_map(|l| l.strip_prefix(&format!("alloc {size} at 0x")))
            .map(|h| u64::from_str_radix(h, 16).unwrap())
            .unwrap_or_else(|| panic!("{err}"))
    };
    let run = |placement: &str| {
        let (v, err, calls) = run_with(placement, &["4096", "3145728", "65536"]);
        let a = |size| addr(&err, size);
        (v, a("4096"), a("3145728"), a("65536"), calls)
    };
    // size>=1MB: the 3 MiB allocation only.
    let (v, _, big, _, calls) = run("size>=1MB");
    assert_eq!(v["placement"], "size>=1048576");
    assert_eq!(
        v["placed"],
        serde_json::json!([{"address": big, "bytes": 3145728}]),
        "{v}"
    );
    // The configuration reached the device copy before cuMemAlloc returned: an upload
    // right after that allocation, before the next one.
    let lines: Vec<&str> = calls.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == "cuMemAlloc 3145728")
        .unwrap();
    assert!(lines[at + 1].starts_with("cuMemcpyHtoDAsync"), "{calls}");
    // local=8KB first: 4 KiB fits, 3 MiB does not, 64 KiB does not either (4 KiB + 64 KiB).
    let (v, _, big, mid, _) = run("local=8KB");
    let placed: Vec<u64> = v["placed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["address"].as_u64().unwrap())
        .collect();
    assert_eq!(placed, [big, mid], "{v}");
    // Interleave: every allocation, with its pages.
    let (v, small, big, mid, _) = run("interleave=1:3@4KB");
    let placed = v["placed"].as_array().unwrap();
    assert_eq!(placed.len(), 3, "{v}");
    assert_eq!(placed[0]["address"].as_u64(), Some(small));
    assert!(placed.iter().all(|p| p["interleave"] == "1:3@4096"), "{v}");
    let _ = (big, mid);
    // site=FUNCTION: what the executable's kv_cache_alloc allocates, nothing else.
    let (v, err, _) = run_with(
        "site=kv_cache_alloc",
        &["4096", "kv:65536", "8192", "kv:12288"],
    );
    let at = |size| addr(&err, size);
    assert_eq!(v["placement"], "site=kv_cache_alloc", "{v}");
    assert_eq!(
        v["placed"],
        serde_json::json!([
            {"address": at("kv:65536"), "bytes": 65536},
            {"address": at("kv:12288"), "bytes": 12288}
        ]),
        "{v}"
    );
    // A parameter change while the app runs: the app waits after its launch (for a file
    // this test makes once it has seen the upload); the change comes 12 s after `run`
    // started, well after the launch even on a loaded machine. The latency words of the
    // region's copy change, and the shim uploads them: 24 bytes (three words).
    let _ = std::fs::remove_file(dir.join("rec/calls.log"));
    let exit = dir.join("exit-now");
    let _ = std::fs::remove_file(&exit);
    let child = app(
        &[
            "--latency-ns",
            "100",
            "--json",
            "--no-kernel-time",
            "--at",
            "12s:latency-ns=700",
        ],
        &["4096"],
    )
    .env("FAKE_EXIT_FILE", &exit)
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let uploaded = |calls: &str| {
        let launch = calls.lines().position(|l| l == "cuLaunchKernel");
        launch.is_some_and(|at| calls.lines().skip(at).any(|l| l == "cuMemcpyHtoDAsync 24"))
    };
    let t = std::time::Instant::now();
    let mut calls = String::new();
    while t.elapsed() < std::time::Duration::from_secs(60) {
        calls = std::fs::read_to_string(dir.join("rec/calls.log")).unwrap_or_default();
        if uploaded(&calls) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::fs::write(&exit, b"").unwrap();
    let o = child.wait_with_output().unwrap();
    let (out, err) = text(&o);
    assert!(
        uploaded(&calls),
        "no upload after the launch: {calls}\n{err}"
    );
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert_eq!(v["changes"].as_array().map(Vec::len), Some(1), "{v}");
    // A policy that matches nothing says so (in the text report).
    let o = app(&["--no-kernel-time", "--placement", "size>=1GB"], &["4096"])
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(
        out.contains("placement size>=1073741824 matched no allocation"),
        "{out}{err}"
    );
}

/// The compensation the probe gets (`cxl_config.compensation` in the object `trace` is
/// given): `--compensate-ns`, else the calibration file's, else 0; each run says which. A
/// calibration file that does not parse is refused, naming it. A stand-in for
/// bpftime-super keeps the probe object it is given.
#[test]
fn compensation_comes_from_the_flag_else_the_calibration() {
    let (_scratch, dir) = tmp("fake-trace");
    let kept = dir.join("kept.o");
    let fake = script(
        &dir,
        "bpftime-super",
        &format!("cp \"$2\" {}\n", kept.display()),
    );
    let file = dir.join("calibration.json");
    let mut cal =
        cxl_sim::calibrate::Calibration::from_times(1000, 1000, &[350_000], &[1_392_000]).unwrap();
    cal.gpu = None;
    cal.save(&file).unwrap();
    let compensation = |extra: &[&str]| -> (u64, String) {
        let _ = std::fs::remove_file(&kept);
        let mut a = vec![
            "run",
            "--bpftime",
            fake.to_str().unwrap(),
            "--no-kernel-time",
            "--latency-ns",
            "400",
        ];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--", "true"]);
        let o = cxl(&a);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{extra:?}: {out}{err}");
        (object_config(&kept).compensation, out)
    };
    let f = file.to_str().unwrap();
    let (n, out) = compensation(&["--calibration", f]);
    assert_eq!(n, 42, "{out}");
    assert!(
        out.contains("probe compensation 42 ns (calibrated in"),
        "{out}"
    );
    let (n, out) = compensation(&["--calibration", f, "--compensate-ns", "7"]);
    assert_eq!(n, 7, "{out}");
    // A sleep's cost is not the spin's that `calibrate` measured.
    let (n, out) = compensation(&["--calibration", f, "--wait", "sleep"]);
    assert_eq!(n, 0, "{out}");
    assert!(out.contains("the calibration is for --wait spin"), "{out}");
    let missing = dir.join("none.json");
    let (n, out) = compensation(&["--calibration", missing.to_str().unwrap()]);
    assert_eq!(n, 0, "{out}");
    assert!(out.contains("not calibrated"), "{out}");

    std::fs::write(&file, "{ not json").unwrap();
    let o = cxl(&[
        "run",
        "--bpftime",
        fake.to_str().unwrap(),
        "--calibration",
        f,
        "--",
        "true",
    ]);
    let (_, err) = text(&o);
    assert!(
        !o.status.success() && err.contains("calibration file"),
        "{err}"
    );
    let o = cxl(&["run", "--compensate-ns", "200000", "--", "true"]);
    assert!(
        text(&o)
            .1
            .contains("compensation 200000 ns is out of range"),
        "{:?}",
        text(&o)
    );
}

/// `calibrate` on a command whose loads give no per-load figure says why and writes
/// nothing: here one that launches no kernel at all (CI has no GPU).
#[test]
fn calibrate_refuses_a_command_without_loads() {
    let Some(bin) = bpftime_and_shim() else {
        return;
    };
    let (_scratch, file) = tmp("calibration.json");
    let o = cxl(&[
        "calibrate",
        "--runs",
        "1",
        "--bpftime",
        bin.to_str().unwrap(),
        "--calibration",
        file.to_str().unwrap(),
        "--",
        "true",
    ]);
    let (_, err) = text(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("the command made no load in the tier"),
        "{err}"
    );
    assert!(!file.exists());
    let o = cxl(&["calibrate", "--runs", "0", "--", "true"]);
    assert!(text(&o).1.contains("--runs must be at least 1"));
}

/// A calibration made on one GPU is used on that GPU only: `nvidia-smi` (a stand-in on
/// PATH) names this machine's.
#[test]
fn another_gpus_calibration_is_not_used() {
    let (_scratch, dir) = tmp("gpus");
    script(&dir, "nvidia-smi", "echo 'NVIDIA H200'\n");
    let fake = script(&dir, "bpftime-super", "exit 0\n");
    let path = std::ffi::OsString::from(format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    ));
    let file = dir.join("calibration.json");
    let mut cal =
        cxl_sim::calibrate::Calibration::from_times(1000, 1000, &[350_000], &[1_392_000]).unwrap();
    for (gpu, want) in [
        ("NVIDIA H200", "probe compensation 42 ns (calibrated in"),
        ("NVIDIA H100 80GB HBM3", "probe compensation 0 ns ("),
    ] {
        cal.gpu = Some(gpu.into());
        cal.save(&file).unwrap();
        let o = cxl_env(
            &[
                "run",
                "--bpftime",
                fake.to_str().unwrap(),
                "--calibration",
                file.to_str().unwrap(),
                "--latency-ns",
                "400",
                "--",
                "true",
            ],
            &[("PATH", &path)],
        );
        let (out, err) = text(&o);
        assert!(
            o.status.success() && out.contains(want),
            "{gpu}: {out}{err}"
        );
        if gpu != "NVIDIA H200" {
            assert!(
                out.contains("was calibrated on NVIDIA H100 80GB HBM3, this is NVIDIA H200"),
                "{out}"
            );
        }
    }
}

/// `calibrate` runs CMD at Δt = 0 and at Δt = D alternating (the same probe inlined whole,
/// no statistics, no compensation; the delayed runs in the fixed configuration), then once
/// counting the tier's requests without the kernel timer, and writes (TD − T0)/N − D from
/// the medians. A stand-in for bpftime-super keeps each run's probe object and arguments
/// and answers with the maps `trace` prints at exit: kernel times of 350 / 900 / 349 µs at
/// Δt = 0, 1,450 µs at Δt = 1,000, and 1,000 requests.
#[test]
fn calibrate_takes_the_medians_of_alternating_runs() {
    use cxl_sim::abi;
    let (_scratch, dir) = tmp("calibrate");
    std::fs::create_dir_all(&dir).unwrap();
    let hex = |words: &[u64]| -> String {
        words
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let kernels = |ns: u64| {
        format!(
            r#"{{"event":"map","final":true,"map":"cxl_time:cxl_kernels","entries":[["00000000","{}"]]}}"#,
            hex(&[0x1234, 4, ns, 0])
        )
    };
    let stats: Vec<String> = (0..abi::STATS.len())
        .map(|i| format!(r#"["{i:08x}","{}"]"#, hex(&[if i == 5 { 1000 } else { 0 }])))
        .collect();
    let stats = format!(
        r#"{{"event":"map","final":true,"map":"cxl:cxl_stats","entries":[{}]}}"#,
        stats.join(",")
    );
    let d = dir.display();
    let body = format!(
        "n=$(cat {d}/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > {d}/n\n\
         cp \"$2\" {d}/obj_$n; echo \"$@\" > {d}/args_$n\n\
         case $n in\n\
         1) echo '{}';; 3) echo '{}';; 5) echo '{}';;\n\
         2|4|6) echo '{}';;\n\
         7) echo '{}';;\n\
         esac\n",
        kernels(350_000),
        kernels(900_000),
        kernels(349_000),
        kernels(1_450_000),
        stats
    );
    let fake = script(&dir, "bpftime-super", &body);
    let file = dir.join("cal.json");
    let o = cxl(&[
        "calibrate",
        "--bpftime",
        fake.to_str().unwrap(),
        "--calibration",
        file.to_str().unwrap(),
        "--",
        "true",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("the probe's own cost: 100 ns a load"), "{out}");
    let c = cxl_sim::calibrate::Calibration::load(&file)
        .unwrap()
        .unwrap();
    assert_eq!(
        (c.compensation_ns, c.loads, c.latency_ns, c.runs),
        (100, 1000, 1000, 3)
    );
    assert_eq!(c.command, ["true"]);

    let config = |n: u32| object_config(&dir.join(format!("obj_{n}")));
    let args = |n: u32| std::fs::read_to_string(dir.join(format!("args_{n}"))).unwrap();
    for n in 1..=6 {
        let c = config(n);
        let a = args(n);
        assert_eq!(c.compensation, 0, "run {n}");
        assert_eq!(
            c.flags & (abi::FLAG_STATS | abi::FLAG_NO_WAIT),
            0,
            "run {n}"
        );
        assert!(
            a.contains("cxl_time.bpf.o") && !a.contains("--cold-split"),
            "run {n}: {a}"
        );
        if n % 2 == 1 {
            assert_eq!(c.latency, [0; 3], "run {n}");
        } else {
            assert_eq!(c.latency, [1000; 3], "run {n}");
            assert!(c.fixed_latency(), "run {n}");
        }
    }
    let count = config(7);
    assert_ne!(count.flags & abi::FLAG_STATS, 0);
    assert_ne!(count.flags & abi::FLAG_NO_WAIT, 0);
    assert_eq!((count.latency, count.cache_lines), ([1000; 3], 0));
    assert!(!args(7).contains("cxl_time.bpf.o"), "{}", args(7));

    // A variant object's calibration never goes to the default file.
    let o = cxl(&["calibrate", "--object", "/dev/null", "--", "true"]);
    assert!(
        text(&o)
            .1
            .contains("needs its own file (--calibration FILE)"),
        "{:?}",
        text(&o)
    );
}
