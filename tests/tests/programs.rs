//! Every C test program end to end: clang → ELF loader → verifier → interpreter, with the
//! results the programs' header comments promise, computed by hand.

use ebpf::interp::{Env, Vm};
use ebpf::maps::{MapOps, create_local};
use ebpf::verifier::{CtxKind, VerifyOptions, verify};
use std::sync::Arc;

struct Loaded {
    vm: Vm,
    maps: Vec<Arc<dyn MapOps>>,
}

fn load(file: &str, prog: Option<&str>) -> Option<Loaded> {
    let (path, bytes) = bpftime_tests::compile_bytes(file)?;
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let p = ebpf::elf::load(&bytes, &name, prog).unwrap_or_else(|e| panic!("{file}: {e}"));
    let v = verify(&p, &VerifyOptions::default()).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert!(v.insns_processed >= 1);
    let maps: Vec<_> = p.maps.iter().map(|d| create_local(d, 1).unwrap()).collect();
    let vm = Vm::new(&p, maps.clone()).unwrap();
    Some(Loaded { vm, maps })
}

fn run(
    l: &Loaded,
    input: &[u8],
    out: &mut [u8],
    index: u64,
    n: u64,
    args: [u64; 4],
) -> (u64, Vec<String>) {
    let mut env = Env::new(0);
    let r0 = l.vm.run_job(input, out, index, n, args, &mut env).unwrap();
    (r0, env.trace)
}

fn map<'a>(l: &'a Loaded, name: &str) -> &'a Arc<dyn MapOps> {
    l.maps
        .iter()
        .find(|m| m.def().name == name)
        .unwrap_or_else(|| panic!("no map {name}"))
}

#[test]
fn add_returns_42() {
    let Some(l) = load("add", None) else { return };
    assert_eq!(run(&l, &[], &mut [], 0, 1, [0; 4]).0, 42);
}

#[test]
fn vec_add_bounds_and_sum() {
    let Some(l) = load("vec_add", None) else {
        return;
    };
    let mut out = [0u8; 4];
    let input = [3u32.to_le_bytes(), 4u32.to_le_bytes()].concat();
    assert_eq!(run(&l, &input, &mut out, 0, 1, [0; 4]).0, 0);
    assert_eq!(u32::from_le_bytes(out), 7);
    assert_eq!(run(&l, &[], &mut [], 0, 1, [0; 4]).0, 1, "short input");
    assert_eq!(
        run(&l, &input, &mut [0u8; 3], 0, 1, [0; 4]).0,
        2,
        "short output"
    );
}

#[test]
fn filter_verdicts() {
    let Some(l) = load("filter", None) else {
        return;
    };
    let mut rec = [0u8; 64];
    rec[..8].copy_from_slice(&10u64.to_le_bytes());
    rec[8] = 1;
    let mut out = [0u8; 8];
    assert_eq!(run(&l, &rec, &mut out, 7, 9, [5, 0, 0, 0]).0, 1);
    assert_eq!(out, [1, 0, 0, 0, 7, 0, 0, 0]);
    assert_eq!(
        run(&l, &rec, &mut out, 0, 1, [10, 0, 0, 0]).0,
        0,
        "key not above args[0]"
    );
    rec[8] = 0;
    assert_eq!(
        run(&l, &rec, &mut out, 0, 1, [5, 0, 0, 0]).0,
        0,
        "flag clear"
    );
    assert_eq!(
        run(&l, &[], &mut out, 0, 1, [0; 4]).0,
        0xffff_ffff,
        "short input"
    );
}

#[test]
fn bpf_to_bpf_calls() {
    let Some(l) = load("calls", Some("calls")) else {
        return;
    };
    assert_eq!(run(&l, &[], &mut [], 0, 1, [0; 4]).0, 14);
    let Some(l) = load("calls", Some("calls2")) else {
        return;
    };
    assert_eq!(run(&l, &[], &mut [], 0, 1, [0; 4]).0, 8);
}

#[test]
fn btf_maps_count() {
    let Some(l) = load("counter", None) else {
        return;
    };
    assert_eq!(run(&l, &[], &mut [], 0, 1, [0; 4]).0, 1);
    assert_eq!(run(&l, &[], &mut [], 0, 1, [0; 4]).0, 2);
    assert_eq!(run(&l, &[], &mut [], 17, 32, [0; 4]).0, 1, "slot 1");
    let counts = map(&l, "counts").entries();
    assert_eq!(counts[0].1, 2u64.to_le_bytes());
    assert_eq!(counts[1].1, 1u64.to_le_bytes());
}

#[test]
fn legacy_maps_count() {
    let Some(l) = load("legacy_map", None) else {
        return;
    };
    assert_eq!(run(&l, &[], &mut [], 0, 1, [0; 4]).0, 1);
    assert_eq!(run(&l, &[], &mut [], 0, 1, [0; 4]).0, 2);
}

#[test]
fn global_data() {
    let Some(l) = load("globals", None) else {
        return;
    };
    assert_eq!(run(&l, &[], &mut [], 0, 1, [0; 4]).0, 104);
    // Second run, index 2: table[2] + 100 + 2 runs so far = 7 + 102.
    assert_eq!(run(&l, &[], &mut [], 2, 4, [0; 4]).0, 109);
}

#[test]
fn bounded_loops() {
    let Some(l) = load("loop", None) else { return };
    assert_eq!(run(&l, &[], &mut [], 0, 1, [0; 4]).0, 0);
    assert_eq!(run(&l, &[], &mut [], 0, 1, [3, 0, 0, 0]).0, 18);
    assert_eq!(run(&l, &[1, 2, 3], &mut [], 0, 1, [3, 0, 0, 0]).0, 24);
}

#[test]
fn several_programs_by_name() {
    for (name, want) in [
        ("on_entry", 1),
        ("on_exit", 2),
        ("on_foo", 3),
        ("xdp_pass", 2),
        ("pair_a", 10),
        ("pair_b", 30),
    ] {
        let Some(l) = load("multi", Some(name)) else {
            return;
        };
        assert_eq!(run(&l, &[], &mut [], 0, 1, [0; 4]).0, want, "{name}");
    }
}

#[test]
fn ringbuf_events() {
    let Some(l) = load("ringbuf", None) else {
        return;
    };
    assert_eq!(run(&l, &[], &mut [], 0, 2, [0; 4]).0, 0);
    assert_eq!(run(&l, &[], &mut [], 1, 2, [0; 4]).0, 0);
    let events = map(&l, "events").drain_ringbuf();
    // Index 0: the reserved record (submitted) and the output copy; index 1: only the
    // output copy (the reserved one was discarded).
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(events.iter().all(|e| !e.is_empty()));
}

#[test]
fn printk_output() {
    let Some(l) = load("printk", None) else {
        return;
    };
    let (r0, trace) = run(&l, &[], &mut [], 0, 0, [0; 4]);
    assert_eq!(r0, 0);
    assert!(
        trace.iter().any(|t| t.contains("index 0 of 0")),
        "{trace:?}"
    );
    assert!(trace.iter().any(|t| t.contains("args 0 0 0")), "{trace:?}");
}

#[test]
fn gpu_helpers_emulated_from_the_record_index() {
    let Some(l) = load("gpu_helpers", None) else {
        return;
    };
    // Record 0 of 1 with the default emulated block of 256 threads: all indices 0, grid
    // (1,1,1), block dims (256,1,1), sm = worker 0, warp 0, lane 0.
    let (r0, trace) = run(&l, &[], &mut [], 0, 1, [0; 4]);
    assert_eq!(r0, 1 + 256);
    assert!(!trace.is_empty(), "puts printed something");
    // Record 300 of 600: thread 44 of block 1, grid of 3 blocks, warp 1, lane 12.
    let (r0, _) = run(&l, &[], &mut [], 300, 600, [0; 4]);
    assert_eq!(r0, (1 + 44) + 3 + 256 + 1 + 12);
}

#[test]
fn minimal_header_only_program() {
    let Some(l) = load("minimal", None) else {
        return;
    };
    assert_eq!(run(&l, &[], &mut [], 0, 1, [0; 4]).0, 6, "lane 0 + 5 + n");
    assert_eq!(run(&l, &[], &mut [], 3, 7, [0; 4]).0, 3 + 5 + 7);
}

#[test]
fn unchecked_read_is_rejected_at_its_instruction() {
    let Some((path, bytes)) = bpftime_tests::compile_bytes("reject_unchecked") else {
        return;
    };
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let p = ebpf::elf::load(&bytes, &name, None).unwrap();
    let e = verify(&p, &VerifyOptions::default()).unwrap_err();
    assert_eq!(e.loc.pc, 1);
    assert_eq!(e.loc.section, "offload");
    assert!(
        e.to_string()
            .starts_with("reject_unchecked.bpf.o:offload: insn 1: "),
        "{e}"
    );
}

#[test]
fn shipped_examples_verify_and_run() {
    let Some(l) = load("vec_add", None) else {
        return;
    };
    drop(l);
    let root = bpftime_tests::repo_root();
    let bytes = std::fs::read(root.join("examples/sum.bpf.o")).unwrap();
    let p = ebpf::elf::load(&bytes, "sum.bpf.o", None).unwrap();
    verify(
        &p,
        &VerifyOptions {
            ctx: CtxKind::Mem { len: 12 },
            ..Default::default()
        },
    )
    .unwrap();
    let maps: Vec<_> = p.maps.iter().map(|d| create_local(d, 1).unwrap()).collect();
    let vm = Vm::new(&p, maps).unwrap();
    let mut mem = [5u32.to_le_bytes(), 6u32.to_le_bytes(), 7u32.to_le_bytes()].concat();
    assert_eq!(vm.run_mem(&mut mem, &mut Env::new(0)).unwrap(), 18);
    let bytes = std::fs::read(root.join("examples/vec_add.bpf.o")).unwrap();
    let p = ebpf::elf::load(&bytes, "vec_add.bpf.o", None).unwrap();
    verify(&p, &VerifyOptions::default()).unwrap();
}
