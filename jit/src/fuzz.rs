//! The body of the `ptx_jit` fuzz target (`fuzz/fuzz_targets/ptx_jit.rs`), here so that
//! the stable test suite replays the kept corpus (`fuzz/replay/ptx_jit/`) through the same
//! code: every program the verifier accepts lowers to PTX that `ptxas` accepts.
//!
//! This function loads (ELF or raw bytecode), verifies (job ctx) and compiles every
//! program of the input, and returns the PTX of each one that compiled; the caller
//! assembles it (the target runs `ptxas` on each module, the replay test on all of them
//! at once). A compile error is a clear refusal, not a bug; a panic is.

use ebpf::program::Program;
use ebpf::verifier::{VerifyOptions, verify};

/// The PTX modules of the input's verified programs.
pub fn ptx_jit(data: &[u8]) -> Vec<String> {
    let mut progs: Vec<Program> = Vec::new();
    if ebpf::elf::is_elf(data) {
        if let Ok(obj) = ebpf::elf::Object::parse(data, "fuzz.o") {
            for info in &obj.programs {
                if let Ok(p) = obj.program(Some(&info.name)) {
                    progs.push(p);
                }
            }
        }
    } else if let Ok(p) = ebpf::elf::load_raw(data, "fuzz.bin") {
        progs.push(p);
    }
    let opts = VerifyOptions {
        max_insns: 100_000,
        ..VerifyOptions::default()
    };
    progs
        .iter()
        .filter(|p| verify(p, &opts).is_ok())
        .filter_map(|p| crate::compile(p, &crate::JitOptions::default()).ok())
        .map(|m| m.text())
        .collect()
}
