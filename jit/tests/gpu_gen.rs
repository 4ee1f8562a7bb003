//! Earlier GPU differential test, generator half (r0 only): writes PTX for many programs plus
//! the results the reference interpreter gives. Superseded by `src/bin/gpu_diff.rs` with
//! `gpu/run.sh` (r0, output records and maps; `gpu/run_cases.cu` now reads that format, not
//! this one). Kept for its hand-written helper cases (ring buffer, GPU ids, exit), which
//! `gpu_diff` does not generate yet.
//!
//! Runs only when `BPFTIME_GPU_GEN_OUT` names an output folder; `BPFTIME_GPU_MAP_BASE` is
//! the device address of a zeroed region (64 MiB) where the maps live. Every case runs as
//! one block of `N` threads (record `i` = thread `i`), so the interpreter's emulated launch
//! geometry (`block_dim = N`) equals the real one.
//!
//! Output: `cases.ptx` (one module) and `cases.txt`:
//! `case <entry> <n> <arg0> <arg1> <arg2> <arg3>` followed by `n` lines `<expected r0>`.

mod common;

use ebpf::asm::assemble;
use ebpf::interp::{Env, Vm};
use ebpf::isa::{Insn, OpKind, Opcode, Src, Width};
use ebpf::maps::create_local;
use ebpf::program::{MapDef, MapKind, MapOrigin, Program};
use jit::{JitOptions, MapBinding};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::fmt::Write;

const N: u64 = 64;
/// Bytes of the map region given to each case.
const CASE_SPAN: u64 = 1 << 20;

fn map(name: &str, kind: MapKind, ks: u32, vs: u32, max: u32) -> MapDef {
    MapDef {
        name: name.into(),
        kind,
        key_size: ks,
        value_size: vs,
        max_entries: max,
        flags: 0,
        origin: MapOrigin::Manual,
        init: None,
    }
}

/// A random program: registers seeded from the ctx, random ALU/byte-order/stack/atomic
/// instructions and forward jumps, then every register folded into r0.
fn random_program(rng: &mut StdRng, name: &str) -> Program {
    let mut items: Vec<Vec<Insn>> = Vec::new();
    let pick_imm = |rng: &mut StdRng| -> i32 {
        match rng.gen_range(0..8) {
            0 => 0,
            1 => -1,
            2 => i32::MIN,
            3 => rng.gen_range(-8..64),
            _ => rng.r#gen(),
        }
    };
    let ops: Vec<Opcode> = Opcode::ALL
        .iter()
        .copied()
        .filter(|op| {
            !matches!(
                op.kind(),
                OpKind::Call
                    | OpKind::CallLocal
                    | OpKind::CallKfunc
                    | OpKind::Exit
                    | OpKind::JaLong
            ) && !matches!(
                op.kind(),
                OpKind::Ld64(k) if k != ebpf::isa::Ld64Kind::Imm
            )
        })
        .collect();
    let len = rng.gen_range(10..60);
    // (item index, jump) placeholders are fixed up after layout.
    let mut jumps: Vec<(usize, usize)> = Vec::new();
    for _ in 0..len {
        let op = ops[rng.gen_range(0..ops.len())];
        let dst = rng.gen_range(0..10u8);
        let src = rng.gen_range(0..10u8);
        let imm = pick_imm(rng);
        let slot = -8 * rng.gen_range(1..=8i16);
        let item = match op.kind() {
            OpKind::Alu { .. } | OpKind::End { .. } => vec![op.insn(dst, src, 0, imm)],
            OpKind::Ld64(_) => vec![
                op.insn(dst, 0, 0, imm),
                Insn::new(0, 0, 0, 0, pick_imm(rng)),
            ],
            OpKind::Load { size, .. } => {
                let sub = rng.gen_range(0..(8 / size.bytes() as i16)) * size.bytes() as i16;
                vec![op.insn(dst, 10, slot + sub, 0)]
            }
            OpKind::Store { size, src: s } => {
                let sub = rng.gen_range(0..(8 / size.bytes() as i16)) * size.bytes() as i16;
                match s {
                    Src::Imm => vec![op.insn(10, 0, slot + sub, imm)],
                    Src::Reg => vec![op.insn(10, src, slot + sub, 0)],
                }
            }
            OpKind::Atomic { size, .. } => {
                let sub = if size.bytes() == 4 {
                    rng.gen_range(0..2) * 4
                } else {
                    0
                };
                vec![op.insn(10, src, slot + sub, 0)]
            }
            OpKind::Ja | OpKind::Jmp { .. } => {
                jumps.push((items.len(), rng.gen_range(1..=4)));
                let w = matches!(
                    op.kind(),
                    OpKind::Jmp {
                        width: Width::W32,
                        ..
                    }
                );
                let _ = w;
                vec![op.insn(dst, src, 0, imm)]
            }
            _ => unreachable!("filtered"),
        };
        items.push(item);
    }
    // Layout: slot index of each item.
    let mut prologue = assemble(
        "r6 = *(u64 *)(r1 + 48)\nr7 = *(u64 *)(r1 + 56)\nr8 = *(u64 *)(r1 + 32)\nr9 = *(u64 *)(r1 + 64)\nr1 = *(u64 *)(r1 + 72)\n\
         *(u64 *)(r10 - 8) = 0\n*(u64 *)(r10 - 16) = 0\n*(u64 *)(r10 - 24) = 0\n*(u64 *)(r10 - 32) = 0\n\
         *(u64 *)(r10 - 40) = 0\n*(u64 *)(r10 - 48) = 0\n*(u64 *)(r10 - 56) = 0\n*(u64 *)(r10 - 64) = 0\n\
         r0 = r6\nr0 ^= r8\nr2 = r7\nr2 *= r8\nr3 = r9\nr3 += r8\nr4 = r6\nr4 -= r7\nr5 = r8\nr5 <<= 7",
    )
    .unwrap();
    let base = prologue.len();
    let mut starts = Vec::with_capacity(items.len() + 1);
    let mut at = base;
    for it in &items {
        starts.push(at);
        at += it.len();
    }
    starts.push(at); // the epilogue
    for (i, ahead) in jumps {
        let target = starts[(i + ahead).min(items.len())];
        let off = target as i64 - starts[i] as i64 - 1;
        items[i][0].off = off as i16;
    }
    let mut epilogue = String::new();
    for r in 1..=9 {
        let _ = writeln!(epilogue, "r0 *= 1000003\nr0 ^= r{r}");
    }
    epilogue.push_str("exit");
    prologue.extend(items.into_iter().flatten());
    prologue.extend(assemble(&epilogue).unwrap());
    Program::from_insns(name, prologue)
}

const HASH_CASE: &str = "
r6 = *(u64 *)(r1 + 32)
*(u64 *)(r10 - 8) = r6
r7 = r6
r7 *= 3
*(u64 *)(r10 - 16) = r7
r1 = map_idx[0] ll
r2 = r10
r2 += -8
r3 = r10
r3 += -16
r4 = 0
call map_update_elem
r9 = r0
r1 = map_idx[0] ll
r2 = r10
r2 += -8
r3 = r10
r3 += -16
r4 = 1
call map_update_elem
r9 += r0
r1 = map_idx[0] ll
r2 = r10
r2 += -8
r3 = r10
r3 += -16
r4 = 2
call map_update_elem
r9 += r0
r1 = map_idx[0] ll
r2 = r10
r2 += -8
call map_lookup_elem
if r0 == 0 goto miss
r8 = *(u64 *)(r0 + 0)
r9 += r8
r3 = 5
lock *(u64 *)(r0 + 0) += r3
r8 = *(u64 *)(r0 + 0)
r9 += r8
miss:
if r6 & 1 goto keep
r1 = map_idx[0] ll
r2 = r10
r2 += -8
call map_delete_elem
r9 += r0
r1 = map_idx[0] ll
r2 = r10
r2 += -8
call map_delete_elem
r9 += r0
r1 = map_idx[0] ll
r2 = r10
r2 += -8
call map_lookup_elem
r9 += r0
keep:
r0 = r9
exit
";

const ARRAY_CASE: &str = "
r6 = *(u64 *)(r1 + 32)
*(u32 *)(r10 - 4) = r6
r7 = r6
r7 *= 5
*(u64 *)(r10 - 16) = r7
r1 = map_idx[0] ll
r2 = r10
r2 += -4
r3 = r10
r3 += -16
r4 = 0
call map_update_elem
r9 = r0
r1 = map_idx[0] ll
r2 = r10
r2 += -4
call map_lookup_elem
if r0 == 0 goto out1
r8 = *(u64 *)(r0 + 0)
r9 += r8
r3 = 1
r3 = atomic_fetch_add((u64 *)(r0 + 0), r3)
r9 += r3
r8 = *(u64 *)(r0 + 0)
r9 += r8
out1:
*(u32 *)(r10 - 4) = 99
r1 = map_idx[0] ll
r2 = r10
r2 += -4
call map_lookup_elem
if r0 != 0 goto out3
r9 += 1000
out3:
r1 = map_idx[0] ll
r2 = r10
r2 += -4
r3 = r10
r3 += -16
r4 = 7
call map_update_elem
r9 += r0
r1 = map_idx[0] ll
r2 = r10
r2 += -4
r3 = r10
r3 += -16
r4 = 0
call map_update_elem
r9 += r0
r1 = map_idx[0] ll
r2 = r10
r2 += -4
call map_delete_elem
r9 += r0
r0 = r9
exit
";

/// Per-thread array: the interpreter's worker id must be the record index here.
const PER_THREAD_CASE: &str = "
r6 = *(u64 *)(r1 + 32)
r9 = 0
*(u32 *)(r10 - 4) = 2
r1 = map_idx[0] ll
r2 = r10
r2 += -4
call map_lookup_elem
if r0 == 0 goto out2
r8 = *(u64 *)(r0 + 0)
r9 += r8
*(u64 *)(r0 + 0) = r6
r8 = *(u64 *)(r0 + 0)
r9 += r8
r8 = r6
r8 *= 9
*(u64 *)(r10 - 16) = r8
r1 = map_idx[0] ll
r2 = r10
r2 += -4
r3 = r10
r3 += -16
r4 = 2
call map_update_elem
r9 += r0
r1 = map_idx[0] ll
r2 = r10
r2 += -4
call map_lookup_elem
if r0 == 0 goto out2
r8 = *(u64 *)(r0 + 0)
r9 += r8
out2:
r0 = r9
exit
";

const RINGBUF_CASE: &str = "
r6 = *(u64 *)(r1 + 32)
r1 = map_idx[0] ll
r2 = 16
r3 = 0
call ringbuf_reserve
if r0 == 0 goto fail
*(u64 *)(r0 + 0) = r6
*(u64 *)(r0 + 8) = r6
r1 = r0
r2 = 0
call ringbuf_submit
r9 = 1
*(u64 *)(r10 - 8) = r6
r1 = map_idx[0] ll
r2 = r10
r2 += -8
r3 = 8
r4 = 0
call ringbuf_output
r9 += r0
r1 = map_idx[0] ll
r2 = r10
r2 += -8
r3 = 8
r4 = 8
call ringbuf_output
r9 += r0
r1 = map_idx[0] ll
r2 = 16
r3 = 1
call ringbuf_reserve
r9 += r0
r1 = map_idx[0] ll
r2 = 100000
r3 = 0
call ringbuf_reserve
r9 += r0
r0 = r9
exit
fail:
r0 = 77
exit
";

const GPU_CASE: &str = "
r6 = r10
r6 += -24
r1 = r6
r2 = r10
r2 += -16
r3 = r10
r3 += -8
call get_thread_idx
r9 = *(u64 *)(r10 - 24)
r8 = *(u64 *)(r10 - 16)
r8 *= 1000
r9 += r8
r1 = r6
r2 = 0
r3 = 0
call get_block_dim
r8 = *(u64 *)(r10 - 24)
r8 *= 7
r9 += r8
r1 = r6
r2 = r10
r2 += -16
r3 = 0
call get_block_idx
r8 = *(u64 *)(r10 - 24)
r9 += r8
r1 = r6
r2 = 0
r3 = 0
call get_grid_dim
r8 = *(u64 *)(r10 - 24)
r8 *= 100000
r9 += r8
call get_warp_id
r0 *= 11
r9 += r0
call get_lane_id
r0 *= 13
r9 += r0
call membar
call ktime_get_ns
call get_prandom_u32
r1 = *(u64 *)(r1 + 0)
r0 = r9
exit
";

const EXIT_CASE: &str = "
r6 = *(u64 *)(r1 + 32)
r0 = r6
r0 += 1
if r6 & 1 goto out
call exit
r0 = 55
out:
exit
";

const CALLS_CASE: &str = "
r1 = *(u64 *)(r1 + 32)
r6 = r1
*(u64 *)(r10 - 8) = r6
call f1
r0 += r6
r2 = *(u64 *)(r10 - 8)
r0 += r2
exit
f1:
*(u64 *)(r10 - 8) = r1
r1 += 1
call f2
r2 = *(u64 *)(r10 - 8)
r0 *= r2
exit
f2:
r0 = r1
r0 <<= 2
r0 s/= -1
exit
";

#[test]
fn gpu_gen() {
    let Some(out) = std::env::var_os("BPFTIME_GPU_GEN_OUT") else {
        eprintln!("gpu_gen: BPFTIME_GPU_GEN_OUT not set, nothing to generate");
        return;
    };
    let map_base: u64 = std::env::var("BPFTIME_GPU_MAP_BASE")
        .expect("BPFTIME_GPU_MAP_BASE")
        .parse()
        .expect("decimal address");
    let mut rng = StdRng::seed_from_u64(
        std::env::var("BPFTIME_GPU_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1),
    );
    let mut cases: Vec<(Program, String)> = Vec::new();
    let named = |name: &str, src: &str, maps: Vec<MapDef>| {
        let mut p = Program::from_insns(
            name,
            assemble(src).unwrap_or_else(|e| panic!("{name}: {e}")),
        );
        p.maps = maps;
        p
    };
    cases.push((
        named("hash", HASH_CASE, vec![map("h", MapKind::Hash, 8, 8, 128)]),
        String::new(),
    ));
    cases.push((
        named(
            "array",
            ARRAY_CASE,
            vec![map("a", MapKind::Array, 4, 8, 64)],
        ),
        String::new(),
    ));
    cases.push((
        named(
            "per_thread",
            PER_THREAD_CASE,
            vec![map("p", MapKind::PerThreadArray, 4, 8, 4)],
        ),
        String::new(),
    ));
    cases.push((
        named(
            "ringbuf",
            RINGBUF_CASE,
            vec![map("r", MapKind::RingBuf, 0, 0, 8192)],
        ),
        String::new(),
    ));
    cases.push((named("gpu", GPU_CASE, vec![]), String::new()));
    cases.push((named("exit507", EXIT_CASE, vec![]), String::new()));
    cases.push((named("calls", CALLS_CASE, vec![]), String::new()));
    for file in ["add", "loop", "calls", "minimal"] {
        if let Some((path, bytes)) = bpftime_tests::compile_bytes(file) {
            let f = path.file_name().unwrap().to_string_lossy().into_owned();
            let mut p = ebpf::elf::load(&bytes, &f, Some(file)).unwrap();
            p.name = format!("c_{file}");
            cases.push((p, String::new()));
        }
    }
    let randoms: usize = std::env::var("BPFTIME_GPU_RANDOM")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    for i in 0..randoms {
        let name = format!("rnd{i}");
        cases.push((random_program(&mut rng, &name), String::new()));
    }

    if let Ok(which) = std::env::var("BPFTIME_GPU_DUMP") {
        for (p, _) in cases
            .iter()
            .filter(|(p, _)| which.split(',').any(|w| w == p.name))
        {
            eprintln!("== {}\n{}", p.name, ebpf::asm::disasm(&p.insns));
        }
    }
    if let Ok(only) = std::env::var("BPFTIME_GPU_ONLY") {
        cases.retain(|(p, _)| only.split(',').any(|w| w == p.name));
    }
    let mut modules = Vec::new();
    let mut txt = String::new();
    for (k, (p, _)) in cases.iter().enumerate() {
        let region = map_base + k as u64 * CASE_SPAN;
        let bindings: Vec<MapBinding> = p
            .maps
            .iter()
            .enumerate()
            .map(|(i, d)| MapBinding::for_def(d, region + i as u64 * (CASE_SPAN / 4), N as u32))
            .collect();
        let opts = JitOptions {
            maps: bindings,
            lock_pid: 1,
            ..JitOptions::default()
        };
        let m = jit::compile(p, &opts).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        let args: [u64; 4] = [rng.r#gen(), rng.r#gen(), rng.r#gen(), rng.r#gen()];
        let _ = writeln!(
            txt,
            "case {} {N} {} {} {} {}",
            m.entry_func().unwrap(),
            args[0],
            args[1],
            args[2],
            args[3]
        );
        modules.push(m.text());
        // The reference: the interpreter, one run per record, maps shared across records.
        let live: Vec<_> = p
            .maps
            .iter()
            .map(|d| create_local(d, N as usize).unwrap())
            .collect();
        let vm = Vm::new(p, live).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        for i in 0..N {
            // The interpreter's in-process Array refuses worker ids other than 0 (its value
            // set count is 1), so only per-thread maps get the record index as worker id.
            let per_thread = p.maps.iter().any(|d| d.kind == MapKind::PerThreadArray);
            let mut env = Env::new(if per_thread { i as usize } else { 0 });
            env.block_dim = N;
            let r0 = vm
                .run_job(&[], &mut [], i, N, args, &mut env)
                .unwrap_or_else(|e| panic!("{}: record {i}: {e}", p.name));
            let _ = writeln!(txt, "{r0}");
        }
    }
    let merged = common::merge(&modules);
    common::assemble(&merged, "gpu_cases");
    let out = std::path::PathBuf::from(out);
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("cases.ptx"), merged).unwrap();
    std::fs::write(out.join("cases.txt"), txt).unwrap();
    eprintln!(
        "gpu_gen: {} cases written to {}",
        cases.len(),
        out.display()
    );
}
