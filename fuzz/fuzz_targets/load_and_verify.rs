//! Fuzz target: load (ELF or raw bytecode), then verify every program that loads. Neither
//! may panic; the verifier must terminate within its instruction budget.
#![no_main]

use ebpf::program::Program;
use ebpf::verifier::{VerifyOptions, verify};
use libfuzzer_sys::fuzz_target;

fn check(prog: &Program) {
    let opts = VerifyOptions {
        max_insns: 100_000,
        ..VerifyOptions::default()
    };
    let _ = verify(prog, &opts);
}

fuzz_target!(|data: &[u8]| {
    if ebpf::elf::is_elf(data) {
        if let Ok(obj) = ebpf::elf::Object::parse(data, "fuzz.o") {
            for info in &obj.programs {
                if let Ok(prog) = obj.program(Some(&info.name)) {
                    check(&prog);
                }
            }
        }
    } else if let Ok(prog) = ebpf::elf::load_raw(data, "fuzz.bin") {
        check(&prog);
    }
});
