//! The bodies of the fuzz targets (`fuzz/fuzz_targets/`), here so that the stable test
//! suite replays the kept corpus (`fuzz/replay/`) through exactly the same code.
//!
//! Each must return on every input; a panic, a hang or an abort is a bug.

use crate::program::Program;
use crate::verifier::{VerifyOptions, verify};

/// `load_and_verify`: the ELF loader (every program linked, and the default program) or
/// the raw-bytecode loader, then the verifier (100,000-instruction budget) on every program
/// that loaded.
pub fn load_and_verify(data: &[u8]) {
    fn check(prog: &Program) {
        let opts = VerifyOptions {
            max_insns: 100_000,
            ..VerifyOptions::default()
        };
        let _ = verify(prog, &opts);
    }
    if crate::elf::is_elf(data) {
        if let Ok(obj) = crate::elf::Object::parse(data, "fuzz.o") {
            for info in &obj.programs {
                if let Ok(prog) = obj.program(Some(&info.name)) {
                    check(&prog);
                }
            }
            let _ = obj.program(None);
        }
    } else if let Ok(prog) = crate::elf::load_raw(data, "fuzz.bin") {
        check(&prog);
    }
}
