//! The body of the `ptx_jit` fuzz target (`fuzz/fuzz_targets/ptx_jit.rs`), here so that
//! the stable test suite replays the kept corpus (`fuzz/replay/ptx_jit/`) through the same
//! code: every program the verifier accepts lowers to PTX that `ptxas` accepts.
//!
//! This function loads (ELF or raw bytecode), verifies (job ctx) and compiles every
//! program of the input, and returns the PTX of each one that compiled; the caller
//! assembles it (the target runs `ptxas` on each module, the replay test on all of them
//! at once). A compile error is a clear refusal, not a bug; a panic is.

use ebpf::verifier::{VerifyOptions, verify};

/// The PTX modules of the input's verified programs.
pub fn ptx_jit(data: &[u8]) -> Vec<String> {
    let progs = ebpf::fuzz::programs(data);
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
