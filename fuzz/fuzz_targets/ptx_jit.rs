//! Fuzz target: every program the verifier accepts lowers to PTX that `ptxas` accepts.
//! The body (`jit::fuzz::ptx_jit`) returns the PTX; this target assembles each module
//! with the ptxas named by `$PTXAS` or found by `scripts/ptxas --locate`. Replayed by the
//! stable tests over `fuzz/replay/ptx_jit/`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

fn ptxas() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        if let Some(p) = std::env::var_os("PTXAS") {
            return p.into();
        }
        let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/ptxas"))
            .arg("--locate")
            .output()
            .expect("scripts/ptxas --locate");
        assert!(out.status.success(), "no ptxas: set PTXAS");
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

fuzz_target!(|data: &[u8]| {
    for ptx in jit::fuzz::ptx_jit(data) {
        let dir = std::env::temp_dir();
        let src = dir.join(format!("ptx_jit-{}.ptx", std::process::id()));
        std::fs::write(&src, &ptx).unwrap();
        let out = Command::new(ptxas())
            .args(["-arch=sm_90", "-o", "/dev/null"])
            .arg(&src)
            .output()
            .expect("run ptxas");
        assert!(
            out.status.success(),
            "ptxas rejected the JIT's PTX:\n{}\n{ptx}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
});
