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

/// `verify_exec`: the verifier with the interpreter as its oracle. Every program that
/// loads and that the verifier accepts (job ctx) runs two records in the interpreter over
/// fresh maps, with an input and an output buffer made from the fuzz bytes. A verified
/// program must never fault (an access outside its regions, a bad helper argument, a
/// division the verifier let through...) nor run past the budget: any `ExecError` is a
/// verifier bug and panics here.
pub fn verify_exec(data: &[u8]) {
    for prog in programs(data) {
        run_verified(&prog, data);
    }
}

/// Every program the input holds: each one an ELF object links, or the raw bytecode.
pub fn programs(data: &[u8]) -> Vec<Program> {
    let mut progs = Vec::new();
    if crate::elf::is_elf(data) {
        if let Ok(obj) = crate::elf::Object::parse(data, "fuzz.o") {
            for info in &obj.programs {
                if let Ok(p) = obj.program(Some(&info.name)) {
                    progs.push(p);
                }
            }
        }
    } else if let Ok(p) = crate::elf::load_raw(data, "fuzz.bin") {
        progs.push(p);
    }
    progs
}

/// Runs `prog` if the verifier accepts it; panics on any run-time fault.
fn run_verified(prog: &Program, data: &[u8]) {
    let opts = VerifyOptions {
        max_insns: 100_000,
        ..VerifyOptions::default()
    };
    if verify(prog, &opts).is_err() {
        return;
    }
    // Maps the fuzzer declares may be huge: storage over 64 MiB is not worth the memory.
    let bytes: u64 = prog
        .maps
        .iter()
        .map(|d| d.max_entries as u64 * (d.key_size as u64 + d.value_size as u64))
        .sum();
    if bytes > 64 << 20 {
        return;
    }
    let Ok(maps) = prog
        .maps
        .iter()
        .map(|d| crate::maps::create_local(d, 1))
        .collect::<Result<Vec<_>, _>>()
    else {
        return;
    };
    let Ok(vm) = crate::interp::Vm::new(prog, maps) else {
        return;
    };
    let mut input = [0u8; 64];
    for (d, s) in input.iter_mut().zip(data.iter().rev()) {
        *d = *s;
    }
    let mut output = [0u8; 64];
    let mut env = crate::interp::Env::new(0);
    env.sink = crate::interp::TraceSink::Discard;
    env.max_insns = 10_000_000;
    for index in 0..2 {
        if let Err(e) = vm.run_job(&input, &mut output, index, 2, [1, 2, 3, 4], &mut env) {
            panic!(
                "the verifier accepted `{}`, which faults at run time: {e}",
                prog.name
            );
        }
    }
}
