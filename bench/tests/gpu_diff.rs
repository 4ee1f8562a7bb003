//! `gpu_diff` without a GPU. The GPU half (`bench/gpu/jit_diff.sh`) runs what `gen` writes
//! and `check` compares it; here:
//! - every module `gen` and `bench` write assembles with ptxas;
//! - `check` passes the interpreter's own results given back as the GPU's;
//! - it fails a changed GPU result, a changed device-interpreter result, and a missing one.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn gpu_diff(args: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpu_diff"))
        .args(args)
        .output()
        .expect("run gpu_diff")
}

fn ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "gpu_diff {what} failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Every `.ptx` file in `dir` assembles for sm_90; returns how many.
fn assemble_all(dir: &Path) -> usize {
    let Some(ptxas) = bpftime_tests::ptxas() else {
        return 0;
    };
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "ptx") {
            continue;
        }
        let o = Command::new(&ptxas)
            .arg("-arch=sm_90")
            .arg("-o")
            .arg(p.with_extension("cubin"))
            .arg(&p)
            .output()
            .expect("run ptxas");
        assert!(
            o.status.success(),
            "ptxas rejected {}:\n{}",
            p.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        n += 1;
    }
    n
}

fn summary(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

fn chunks(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "want"))
        .collect();
    v.sort();
    v
}

/// Gives the interpreter's results back as both GPU runs' (`.got`, `.igot`).
fn answer_with_want(dir: &Path) {
    for w in chunks(dir) {
        std::fs::copy(&w, w.with_extension("got")).unwrap();
        std::fs::copy(&w, w.with_extension("igot")).unwrap();
    }
}

/// Flips every bit of `file`'s bytes in `range` (clamped to its length).
fn flip(file: &Path, range: std::ops::Range<usize>) {
    let mut b = std::fs::read(file).unwrap();
    let end = range.end.min(b.len());
    for x in &mut b[range.start..end] {
        *x = !*x;
    }
    std::fs::write(file, b).unwrap();
}

#[test]
fn generated_cases_assemble_and_check_tells_right_from_wrong() {
    let scratch = bpftime_tests::scratch_dir("gpu_diff");
    let dir = scratch.path().join("cases");
    std::fs::create_dir_all(&dir).unwrap();
    // The C test programs too, where clang is here (objects in target/bpf-programs).
    let objs: Vec<PathBuf> = ["add", "loop", "counter", "ringbuf", "calls"]
        .iter()
        .filter_map(|n| bpftime_tests::compile(n))
        .collect();
    let objdir = objs.first().and_then(|o| o.parent()).map(Path::to_path_buf);
    let mut args: Vec<&Path> = vec![
        Path::new("gen"),
        Path::new("11"),
        Path::new("150"),
        dir.as_path(),
    ];
    if let Some(d) = &objdir {
        args.push(d);
    }
    ok(&gpu_diff(&args), "gen");
    let made: Value =
        serde_json::from_slice(&std::fs::read(dir.join("gen.json")).unwrap()).unwrap();
    let cases = made["cases"].as_u64().unwrap();
    assert!(cases >= 150, "gen wrote {cases} cases: {made}");
    assert_eq!(made["gen_errors"], serde_json::json!([]), "{made}");
    if objdir.is_some() {
        assert!(
            made["by_category"]["c_program"].as_u64().unwrap_or(0) >= objs.len() as u64,
            "the C programs are cases too: {made}"
        );
    }
    let ptx = assemble_all(&dir);
    assert!(ptx == 0 || ptx == chunks(&dir).len(), "one module a chunk");

    // Right: the interpreter's own results pass, both runs, every case.
    answer_with_want(&dir);
    ok(&gpu_diff(&[Path::new("check"), &dir]), "check");
    let s = summary(&dir);
    assert_eq!(s["passed"].as_u64(), Some(cases), "{s}");
    assert_eq!(s["interp"]["passed"].as_u64(), Some(cases), "{s}");

    // Wrong: every result byte of the GPU run changed fails every case that compares one.
    let first = chunks(&dir).remove(0);
    flip(&first.with_extension("got"), 0..usize::MAX);
    let o = gpu_diff(&[Path::new("check"), &dir]);
    assert!(!o.status.success(), "check passed changed results");
    let s = summary(&dir);
    let failed = s["failed"].as_u64().unwrap();
    assert!(failed > 0 && s["failures"][0]["why"].is_string(), "{s}");
    assert_eq!(s["interp"]["failed"].as_u64(), Some(0), "{s}");

    // Wrong in the device interpreter's run only: the first case's first r0.
    answer_with_want(&dir);
    flip(&first.with_extension("igot"), 0..8);
    let o = gpu_diff(&[Path::new("check"), &dir]);
    assert!(
        !o.status.success(),
        "check passed a changed interpreter result"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("device interpreter: 1 cases failed"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let s = summary(&dir);
    assert_eq!(s["failed"].as_u64(), Some(0), "{s}");

    // Missing: a chunk the GPU never answered fails its cases.
    answer_with_want(&dir);
    std::fs::remove_file(first.with_extension("got")).unwrap();
    let o = gpu_diff(&[Path::new("check"), &dir]);
    assert!(!o.status.success(), "check passed a chunk with no results");
}

#[test]
fn benchmark_modules_assemble() {
    let scratch = bpftime_tests::scratch_dir("gpu_diff_bench");
    let dir = scratch.path();
    ok(&gpu_diff(&[Path::new("bench"), dir]), "bench");
    for f in ["vecadd", "filter", "hist", "hashcount", "big"] {
        assert!(dir.join(format!("{f}.ptx")).exists(), "{f}.ptx missing");
    }
    let n = assemble_all(dir);
    assert!(n == 0 || n >= 5, "{n} modules assembled");
}
