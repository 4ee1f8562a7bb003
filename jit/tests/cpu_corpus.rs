//! The verifier's accept corpus (`ebpf/tests/verifier/accept/*.s`) and the C test programs
//! (`tests/programs`, when clang is installed) on both CPU engines: the native JIT, with
//! every access checked and trusting the verifier, gives the interpreter's r0 or error,
//! memory, output, maps, trace and instruction count.

use bpftime_tests::corpus;
use ebpf::interp::{Env, ExecError, Vm};
use ebpf::maps::{MapOps, create_local};
use ebpf::program::Program;
use ebpf::verifier::{CtxKind, VerifyOptions, verify};
use jit::cpu::CpuJitOptions;
use std::sync::Arc;

fn norm(e: &ExecError) -> String {
    let s = e.to_string();
    let mut out = String::new();
    let mut rest = s.as_str();
    while let Some(p) = rest.find("0x") {
        out.push_str(&rest[..p + 2]);
        rest = rest[p + 2..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
        out.push('?');
    }
    out.push_str(rest);
    out
}

#[derive(Debug, PartialEq)]
struct Outcome {
    r0: Result<u64, String>,
    bytes: Vec<u8>,
    maps: Vec<Vec<(Vec<u8>, Vec<u8>)>>,
    trace: Vec<String>,
    insns: u64,
}

fn run(p: &Program, ctx: CtxKind, jit: Option<&CpuJitOptions>) -> Outcome {
    let maps: Vec<Arc<dyn MapOps>> = p.maps.iter().map(|d| create_local(d, 1).unwrap()).collect();
    let vm = Vm::new(p, maps.clone()).expect("decodes");
    let native = jit.map(|o| {
        jit::cpu::compile(&vm, o).unwrap_or_else(|e| panic!("{}: compile failed: {e}", p.name))
    });
    let mut env = Env::new(1).with_seed(7);
    let input: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
    let (r0, bytes) = match ctx {
        // A probe ctx is plain scalar memory to both engines (r2 is ignored by probes).
        CtxKind::Mem { len } | CtxKind::Probe { size: len } => {
            let mut mem: Vec<u8> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
            let r = match &native {
                Some(c) => c.run_mem(&vm, &mut mem, &mut env),
                None => vm.run_mem(&mut mem, &mut env),
            };
            (r, mem)
        }
        CtxKind::Job => {
            let mut out = vec![0u8; 64];
            let args = [3, 5, 7, 11];
            let r = match &native {
                Some(c) => c.run_job(&vm, &input, &mut out, 3, 8, args, &mut env),
                None => vm.run_job(&input, &mut out, 3, 8, args, &mut env),
            };
            (r, out)
        }
    };
    Outcome {
        r0: r0.map_err(|e| norm(&e)),
        bytes,
        maps: maps.iter().map(|m| m.entries()).collect(),
        trace: env.trace.clone(),
        insns: env.last_insns,
    }
}

fn compare(p: &Program, ctx: CtxKind) {
    let a = run(p, ctx, None);
    for o in [CpuJitOptions::default(), CpuJitOptions::verified()] {
        let b = run(p, ctx, Some(&o));
        assert_eq!(a, b, "{} ({o:?})", p.name);
    }
}

#[test]
fn accept_corpus_runs_the_same_on_both_engines() {
    let files = corpus::files("accept");
    assert!(!files.is_empty());
    for f in &files {
        let case = corpus::load(f);
        let opts = VerifyOptions {
            log: false,
            ..case.opts.clone()
        };
        verify(&case.prog, &opts).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        compare(&case.prog, opts.ctx);
    }
    eprintln!("cpu_corpus: {} accepted programs", files.len());
}

#[test]
fn c_test_programs_run_the_same_on_both_engines() {
    if !bpftime_tests::clang_available() {
        eprintln!("clang not found: skipping the C test programs");
        return;
    }
    let dir = bpftime_tests::repo_root().join("tests/programs");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let Some(stem) = path
            .file_name()
            .and_then(|s| s.to_str())
            .and_then(|s| s.strip_suffix(".bpf.c"))
        else {
            continue;
        };
        let Some(obj) = bpftime_tests::compile(stem) else {
            continue;
        };
        let bytes = std::fs::read(&obj).unwrap();
        let file = obj.display().to_string();
        let Ok(object) = ebpf::elf::Object::parse(&bytes, &file) else {
            continue;
        };
        // Every program of the object, on the ctx its section implies.
        for info in &object.programs {
            let p = object
                .program(Some(&info.name))
                .unwrap_or_else(|e| panic!("{file}: {}: {e}", info.name));
            let ctx = match p.kind {
                ebpf::ProgKind::Kprobe(_) | ebpf::ProgKind::Kretprobe(_) => CtxKind::Probe {
                    size: ebpf::ProbeCtx::SIZE,
                },
                // Host probes: x86-64 `struct pt_regs` (attach::shim::uprobes::PT_REGS_SIZE).
                ebpf::ProgKind::Uprobe(_) | ebpf::ProgKind::Uretprobe(_) => {
                    CtxKind::Mem { len: 168 }
                }
                _ => CtxKind::Job,
            };
            let opts = VerifyOptions {
                ctx,
                ..VerifyOptions::default()
            };
            if verify(&p, &opts).is_err() {
                continue;
            }
            compare(&p, ctx);
            n += 1;
        }
    }
    eprintln!("cpu_corpus: {n} C test programs");
}
