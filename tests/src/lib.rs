//! Test support shared by the workspace's integration tests: building the eBPF C programs,
//! the fake CUDA driver ([`fake_cuda`]), and the fuzz campaigns' kept inputs
//! ([`fuzz_inputs`]).
//!
//! The C sources live in `tests/programs/*.bpf.c` and the shipped examples in
//! `examples/*.bpf.c`. [`compile`] builds one with `clang -O2 -g -target bpf` into
//! `target/bpf-programs/` (rebuilt when the source is newer) and returns the object's path.
//! Where clang is missing, [`compile`] returns `None` so a test can skip with a loud message,
//! unless `BPFTIME_REQUIRE_CLANG` is set (as the test command sets it), in which case it panics.
#![deny(missing_docs)]

pub mod corpus;
pub mod fake_cuda;

pub use tempfile;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A fresh directory under the system's temp dir, named `bpftime-{what}-…`, removed with
/// everything in it when the guard drops (a test's files must not outlive it: ptxas output
/// alone left 8 GB in /tmp over a few hundred runs).
pub fn scratch_dir(what: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("bpftime-{what}-"))
        .tempdir()
        .expect("create a scratch directory in the temp dir")
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn clang() -> Option<&'static str> {
    static CLANG: OnceLock<Option<&'static str>> = OnceLock::new();
    *CLANG.get_or_init(|| {
        ["clang", "clang-19", "clang-14"].into_iter().find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        })
    })
}

/// Every file directly in each of `dirs` (relative to `fuzz/`: `replay/<target>`, `seeds`),
/// with its bytes, sorted by path; a missing folder gives nothing.
pub fn fuzz_inputs(dirs: &[&str]) -> Vec<(PathBuf, Vec<u8>)> {
    let root = repo_root().join("fuzz");
    let mut out = Vec::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(root.join(d)) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_file() {
                let data = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                out.push((p, data));
            }
        }
    }
    out.sort();
    out
}

/// The ptxas to use: `$PTXAS`, else what `scripts/ptxas --locate` finds. `None` (with a
/// loud skip message) when there is none, unless `BPFTIME_REQUIRE_PTXAS` is set (as the test
/// command sets it), in which case it panics.
pub fn ptxas() -> Option<PathBuf> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            if let Some(p) = std::env::var_os("PTXAS") {
                return Some(PathBuf::from(p));
            }
            let found = Command::new(repo_root().join("scripts/ptxas"))
                .arg("--locate")
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim().to_string()));
            if found.is_none() {
                if std::env::var_os("BPFTIME_REQUIRE_PTXAS").is_some() {
                    panic!("ptxas is required (BPFTIME_REQUIRE_PTXAS is set) but was not found");
                }
                eprintln!(
                    "SKIPPING ptxas check: ptxas not found (pip install --user nvidia-cuda-nvcc-cu12)"
                );
            }
            found
        })
        .clone()
}

/// Whether clang can be used; panics if it is required but missing.
pub fn clang_available() -> bool {
    let found = clang().is_some();
    if !found && std::env::var_os("BPFTIME_REQUIRE_CLANG").is_some() {
        panic!("clang is required (BPFTIME_REQUIRE_CLANG is set) but was not found");
    }
    if !found {
        eprintln!("SKIPPING: clang not found; install clang and libbpf-dev to run this test");
    }
    found
}

/// Compiles `tests/programs/<name>.bpf.c` (or `examples/<name>.bpf.c`) and returns the object.
pub fn compile(name: &str) -> Option<PathBuf> {
    compile_with(name, &[], name)
}

/// Like [`compile`], with `-D` defines, into `target/bpf-programs/<out>.bpf.o`.
pub fn compile_with(name: &str, defines: &[&str], out: &str) -> Option<PathBuf> {
    if !clang_available() {
        return None;
    }
    let root = repo_root();
    let src = [
        root.join("tests/programs").join(format!("{name}.bpf.c")),
        root.join("examples").join(format!("{name}.bpf.c")),
        root.join("bench/probes").join(format!("{name}.bpf.c")),
    ]
    .into_iter()
    .find(|p| p.exists())
    .unwrap_or_else(|| panic!("no C source for test program `{name}`"));
    let out_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("bpf-programs");
    std::fs::create_dir_all(&out_dir).expect("create target/bpf-programs");
    let obj = out_dir.join(format!("{out}.bpf.o"));
    let fresh = match (obj.metadata(), src.metadata()) {
        (Ok(o), Ok(s)) => o.modified().ok() >= s.modified().ok(),
        _ => false,
    };
    if fresh {
        return Some(obj);
    }
    // Several test threads may build the same object: write a private file, then rename.
    let tmp = out_dir.join(format!(
        "{out}.{}.{:?}.tmp.o",
        std::process::id(),
        std::thread::current().id()
    ));
    let status = Command::new(clang().expect("checked above"))
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg("-I/usr/include/x86_64-linux-gnu")
        .arg(format!("-I{}", root.join("include").display()))
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(&tmp)
        .status()
        .expect("run clang");
    assert!(status.success(), "clang failed on {}", src.display());
    std::fs::rename(&tmp, &obj).expect("rename compiled object");
    Some(obj)
}

/// Reads a compiled test program.
pub fn compile_bytes(name: &str) -> Option<(PathBuf, Vec<u8>)> {
    let p = compile(name)?;
    let bytes = std::fs::read(&p).expect("read compiled object");
    Some((p, bytes))
}
