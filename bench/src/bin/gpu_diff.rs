//! `gpu_diff`: the GPU differential test and the JIT benchmarks' host half.
//!
//! ```text
//! gpu_diff gen SEED COUNT DIR [OBJDIR]   programs → DIR/chunk_K.{ptx,run,in,want,json} + DIR/gen.json
//!        (GPU) bench/gpu/run_cases DIR/chunk_K → DIR/chunk_K.got (+ .fault)
//! gpu_diff check DIR                     compares .got with .want → DIR/summary.json
//! gpu_diff bench DIR                     eBPF→PTX compile time + the benchmark PTX (bench/gpu/)
//! ```
//!
//! | file          | writer      | content                                                           |
//! |---------------|-------------|-------------------------------------------------------------------|
//! | `chunk_K.ptx` | gen         | one PTX module: every case's `.entry` (+ a serial `.entry`)        |
//! | `chunk_K.run` | gen         | per case one line: entry, mode, threads, sizes, args, blob offsets |
//! | `chunk_K.in`  | gen         | inputs, initial outputs, initial map images (shm-maps layouts)     |
//! | `chunk_K.want`| gen         | the interpreter's r0s, outputs, final map images                   |
//! | `chunk_K.got` | run_cases   | the GPU's r0s, outputs, final map images, same layout as `.want`  |
//! | `chunk_K.igot`| run_cases   | the same, from the device interpreter (`bpf_interp.cuh`) run      |
//! | `chunk_K.json`| gen         | per case: name, category, map definitions, what to compare         |
//!
//! Maps: the interpreter (`ebpf::interp`) runs on `shm_maps::maps` maps laid out by
//! `shm_maps::maps::init` in host buffers; the GPU gets the same initial bytes at the
//! addresses baked into the PTX. `check` compares the final maps *logically*: arrays and
//! per-thread arrays bytewise over their whole layout (their layout is deterministic), hash
//! maps as sorted `entries()` of `shm_maps::maps::attach` on both images (slot placement and
//! lock/generation words depend on the thread interleaving, the contents do not), after a
//! scan that every lock is free and every slot settled; ring buffers as multisets of records.
//!
//! Interpreter: every case also carries its bytecode relocated for the device maps
//! (`device::cuda::bytecode`) and its map descriptors, at the blob offset given after the map triples of its
//! `.run` line (`INTERP_OFF N_INSNS STACK_SIZE`); `run_cases` runs the case a second time
//! through `bpf_interp_run` (same threads, same initial bytes) and `check` compares those
//! results too, counted separately (`interp` in `summary.json`).
//!
//! Threads: `par` cases launch one block of `n` threads (one per record); `ser` cases run
//! record by record, one thread each, through a PTX wrapper around the program's `.func`
//! (for programs whose result depends on the order of records, e.g. non-atomic `*v += 1`).
//! Generated `par` programs are order-independent by construction: a thread writes only its
//! own output record, its own map keys/values, or shared words with one commutative atomic.

use device::cuda::bytecode;
use ebpf::asm::assemble;
use ebpf::interp::{Env, Vm};
use ebpf::isa::{Insn, Ld64Kind, OpKind, Opcode, Src};
use ebpf::maps::{MapError, MapOps};
use ebpf::program::{JobCtx, MapDef, MapKind, MapOrigin, Program};
use jit::{AtomicScope, JitOptions, MapBinding};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};
use shm_maps::maps as sm;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

/// Device address of map `i` of every case: `map_base() + i * MAP_SPAN`.
/// The base: `$GPU_DIFF_BASE` (decimal or 0x-hex; `run_cases --probe` finds a free one on
/// the GPU machine), else 0x6000_0000_0000.
fn map_base() -> u64 {
    std::env::var("GPU_DIFF_BASE")
        .ok()
        .and_then(|s| match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => s.trim().parse().ok(),
        })
        .unwrap_or(0x6000_0000_0000)
}
/// Bytes reserved for each map index.
const MAP_SPAN: u64 = 1 << 20;
/// Cases per PTX module.
const CHUNK: usize = 200;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let r = match args.get(1).map(String::as_str) {
        Some("gen") if args.len() >= 5 => gen_cmd(
            args[2].parse().expect("SEED"),
            args[3].parse().expect("COUNT"),
            Path::new(&args[4]),
            args.get(5).map(PathBuf::from),
        ),
        Some("check") if args.len() >= 3 => check_cmd(Path::new(&args[2])),
        Some("bench") if args.len() >= 3 => bench_cmd(Path::new(&args[2])),
        Some("regs") if args.len() >= 6 => regs_cmd(
            args[2].parse().expect("SEED"),
            args[3].parse().expect("COUNT"),
            &args[4],
            args[5].parse().expect("PC"),
        ),
        _ => {
            eprintln!(
                "usage: gpu_diff gen SEED COUNT DIR [OBJDIR] | check DIR | bench DIR\n(see the module doc)"
            );
            std::process::exit(2)
        }
    };
    if let Err(e) = r {
        eprintln!("gpu_diff: {e}");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------------------------------
// Host map storage
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A 64-byte aligned host buffer holding one map layout.
struct MapBuf {
    lines: Vec<Line>,
    len: usize,
}

impl MapBuf {
    fn new(len: usize) -> MapBuf {
        MapBuf {
            lines: vec![Line([0; 64]); len.div_ceil(64).max(1)],
            len,
        }
    }
    fn from_bytes(b: &[u8]) -> MapBuf {
        let mut m = MapBuf::new(b.len());
        m.bytes_mut().copy_from_slice(b);
        m
    }
    fn base(&mut self) -> NonNull<u8> {
        NonNull::new(self.lines.as_mut_ptr().cast()).expect("vec pointer")
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: `lines` holds at least `len` initialized bytes.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), self.len) }
    }
}

/// The interpreter passes its worker id to every map; the GPU uses the thread id only for
/// per-thread arrays. This adapter gives the other kinds worker 0 (their only value set).
struct ThreadFix(Arc<dyn MapOps>);

impl MapOps for ThreadFix {
    fn def(&self) -> &MapDef {
        self.0.def()
    }
    fn lookup(&self, key: &[u8], thread: usize) -> Option<NonNull<u8>> {
        self.0.lookup(key, self.t(thread))
    }
    fn update(&self, key: &[u8], value: &[u8], flags: u64, thread: usize) -> Result<(), MapError> {
        self.0.update(key, value, flags, self.t(thread))
    }
    fn delete(&self, key: &[u8]) -> Result<(), MapError> {
        self.0.delete(key)
    }
    fn ringbuf_reserve(&self, size: u64) -> Option<NonNull<u8>> {
        self.0.ringbuf_reserve(size)
    }
    fn ringbuf_commit(&self, ptr: NonNull<u8>, discard: bool) {
        self.0.ringbuf_commit(ptr, discard)
    }
    fn ringbuf_output(&self, data: &[u8], flags: u64) -> Result<(), MapError> {
        self.0.ringbuf_output(data, flags)
    }
    fn regions(&self) -> Vec<(usize, usize)> {
        self.0.regions()
    }
    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.0.entries()
    }
    fn drain_ringbuf(&self) -> Vec<Vec<u8>> {
        self.0.drain_ringbuf()
    }
}

impl ThreadFix {
    fn t(&self, thread: usize) -> usize {
        if self.0.def().kind == MapKind::PerThreadArray {
            thread
        } else {
            0
        }
    }
}

fn map_threads(def: &MapDef, n: u32) -> u32 {
    if def.kind == MapKind::PerThreadArray {
        n.max(1)
    } else {
        1
    }
}

fn mapdef(name: &str, kind: MapKind, ks: u32, vs: u32, max: u32) -> MapDef {
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

fn kind_name(k: MapKind) -> &'static str {
    match k {
        MapKind::Array => "array",
        MapKind::PerThreadArray => "per_thread_array",
        MapKind::Hash => "hash",
        MapKind::RingBuf => "ringbuf",
    }
}

fn kind_from(s: &str) -> MapKind {
    match s {
        "array" => MapKind::Array,
        "per_thread_array" => MapKind::PerThreadArray,
        "hash" => MapKind::Hash,
        _ => MapKind::RingBuf,
    }
}

// ---------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------

/// One differential case.
struct Case {
    name: String,
    category: String,
    prog: Program,
    /// Records (= threads).
    n: u32,
    in_size: u32,
    out_size: u32,
    args: [u64; 4],
    /// Record by record, one thread each (see the module doc).
    serial: bool,
    /// r0 is compared (false only for programs whose r0 reads a GPU-only fact).
    compare_r0: bool,
    note: String,
}

fn op_of(kind: impl Fn(OpKind) -> bool) -> Opcode {
    *Opcode::ALL
        .iter()
        .find(|o| kind(o.kind()))
        .expect("opcode exists")
}

fn exit_insn() -> Insn {
    op_of(|k| k == OpKind::Exit).insn(0, 0, 0, 0)
}

/// Opcodes a random straight-line body may use.
fn body_ops() -> Vec<Opcode> {
    Opcode::ALL
        .iter()
        .copied()
        .filter(|op| {
            !matches!(
                op.kind(),
                OpKind::Call | OpKind::Callx | OpKind::CallLocal | OpKind::CallKfunc | OpKind::Exit
            ) && !matches!(op.kind(), OpKind::Ld64(k) if k != Ld64Kind::Imm)
        })
        .collect()
}

fn alu_ops() -> Vec<Opcode> {
    Opcode::ALL
        .iter()
        .copied()
        .filter(|op| {
            matches!(
                op.kind(),
                OpKind::Alu { .. } | OpKind::End { .. } | OpKind::Ld64(Ld64Kind::Imm)
            )
        })
        .collect()
}

fn pick_imm(rng: &mut StdRng) -> i32 {
    match rng.gen_range(0..10) {
        0 => 0,
        1 => -1,
        2 => i32::MIN,
        3 => i32::MAX,
        4 => 1,
        5 => rng.gen_range(-8..70),
        _ => rng.r#gen(),
    }
}

/// One random ALU/byte-order/ld_imm64 instruction writing a register of `dsts`.
fn rand_alu(rng: &mut StdRng, ops: &[Opcode], dsts: &[u8], srcs: &[u8]) -> Vec<Insn> {
    let op = ops[rng.gen_range(0..ops.len())];
    alu_item(rng, op, dsts, srcs)
}

fn alu_item(rng: &mut StdRng, op: Opcode, dsts: &[u8], srcs: &[u8]) -> Vec<Insn> {
    let dst = dsts[rng.gen_range(0..dsts.len())];
    let src = srcs[rng.gen_range(0..srcs.len())];
    let imm = pick_imm(rng);
    match op.kind() {
        OpKind::Ld64(_) => vec![
            op.insn(dst, 0, 0, imm),
            Insn::new(0, 0, 0, 0, pick_imm(rng)),
        ],
        _ => vec![op.insn(dst, src, 0, imm)],
    }
}

/// Prologue shared by the generated programs: r6 = index, r7 = arg0, r8 = arg1,
/// r9 = arg2, r1 = arg3; 64 stack bytes zeroed; r0, r2..r5 mixed from those.
const PROLOGUE: &str = "r6 = *(u64 *)(r1 + 32)\nr7 = *(u64 *)(r1 + 48)\nr8 = *(u64 *)(r1 + 56)\nr9 = *(u64 *)(r1 + 64)\nr1 = *(u64 *)(r1 + 72)\n\
*(u64 *)(r10 - 8) = 0\n*(u64 *)(r10 - 16) = 0\n*(u64 *)(r10 - 24) = 0\n*(u64 *)(r10 - 32) = 0\n\
*(u64 *)(r10 - 40) = 0\n*(u64 *)(r10 - 48) = 0\n*(u64 *)(r10 - 56) = 0\n*(u64 *)(r10 - 64) = 0\n\
r0 = r7\nr0 ^= r6\nr2 = r8\nr2 *= r6\nr3 = r9\nr3 += r6\nr4 = r7\nr4 -= r8\nr5 = r6\nr5 <<= 7\n";

fn fold_epilogue(regs: &[u8]) -> Vec<Insn> {
    let mut s = String::new();
    for r in regs {
        let _ = writeln!(s, "r0 *= 1000003\nr0 ^= r{r}");
    }
    s.push_str("exit");
    assemble(&s).expect("epilogue")
}

/// Lays out `items`, resolving forward jumps `(item, items ahead)` to item starts.
fn layout(
    head: Vec<Insn>,
    mut items: Vec<Vec<Insn>>,
    jumps: &[(usize, usize)],
    tail: Vec<Insn>,
) -> Vec<Insn> {
    let base = head.len();
    let mut starts = Vec::with_capacity(items.len() + 1);
    let mut at = base;
    for it in &items {
        starts.push(at);
        at += it.len();
    }
    starts.push(at);
    for &(i, ahead) in jumps {
        let target = starts[(i + ahead).min(items.len())];
        let off = target as i64 - starts[i] as i64 - 1;
        let ins = &mut items[i][0];
        if Opcode::decode(ins).map(|o| o.kind()) == Ok(OpKind::JaLong) {
            ins.imm = off as i32;
        } else {
            ins.off = off as i16;
        }
    }
    let mut out = head;
    out.extend(items.into_iter().flatten());
    out.extend(tail);
    out
}

/// Straight-line code with forward jumps over every body opcode; `force` is placed once.
fn gen_alu(rng: &mut StdRng, name: &str, force: Opcode) -> Program {
    let ops = body_ops();
    let len = rng.gen_range(10..70);
    let force_at = rng.gen_range(0..len);
    let mut items = Vec::new();
    let mut jumps = Vec::new();
    for k in 0..len {
        let op = if k == force_at {
            force
        } else {
            ops[rng.gen_range(0..ops.len())]
        };
        let dst = rng.gen_range(0..10u8);
        let src = rng.gen_range(0..10u8);
        let imm = pick_imm(rng);
        let slot = -8 * rng.gen_range(1..=8i16);
        let item = match op.kind() {
            OpKind::Alu { .. } | OpKind::End { .. } | OpKind::Ld64(_) => {
                alu_item(rng, op, &[dst], &[src])
            }
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
            OpKind::Ja | OpKind::JaLong | OpKind::Jmp { .. } => {
                jumps.push((items.len(), rng.gen_range(1..=4)));
                vec![op.insn(dst, src, 0, imm)]
            }
            _ => unreachable!("filtered"),
        };
        items.push(item);
    }
    let head = assemble(PROLOGUE).expect("prologue");
    let insns = layout(
        head,
        items,
        &jumps,
        fold_epilogue(&[1, 2, 3, 4, 5, 6, 7, 8, 9]),
    );
    Program::from_insns(name, insns)
}

/// A bounded loop (trip count 1..=16 from the record index) with a random body and an
/// optional early exit.
fn gen_loop(rng: &mut StdRng, name: &str) -> Program {
    let alu = alu_ops();
    let mut s = String::from(PROLOGUE);
    let mask = [0, 3, 7, 15][rng.gen_range(0..4)];
    let _ = writeln!(s, "r9 = r6\nr9 &= {mask}\nr9 += 1");
    let mut insns = assemble(&s).expect("loop head");
    let top = insns.len();
    let body_len = rng.gen_range(2..20);
    let mut brk_at: Vec<usize> = Vec::new();
    for _ in 0..body_len {
        match rng.gen_range(0..10) {
            0 => {
                // stack round trip
                let slot = -8 * rng.gen_range(1..=8i16);
                let r = rng.gen_range(0..6u8);
                insns.extend(
                    assemble(&format!(
                        "*(u64 *)(r10 {slot}) = r{r}\nr{} = *(u64 *)(r10 {slot})",
                        rng.gen_range(0..6)
                    ))
                    .unwrap(),
                );
            }
            1 => {
                // early exit, taken for some data
                let conds = ["==", "!=", ">", ">=", "<", "<=", "s>", "s<", "&"];
                let c = conds[rng.gen_range(0..conds.len())];
                let r = rng.gen_range(0..6u8);
                let w = if rng.gen_bool(0.5) { "r" } else { "w" };
                brk_at.push(insns.len());
                insns
                    .extend(assemble(&format!("if {w}{r} {c} {} goto +0", pick_imm(rng))).unwrap());
            }
            _ => insns.extend(rand_alu(
                rng,
                &alu,
                &[0, 1, 2, 3, 4, 5],
                &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
            )),
        }
    }
    insns.extend(assemble("r9 += -1").unwrap());
    let back = insns.len();
    let jop = if rng.gen_bool(0.5) {
        "if r9 != 0 goto +0"
    } else {
        "if w9 s> 0 goto +0"
    };
    let mut j = assemble(jop).unwrap();
    j[0].off = (top as i64 - back as i64 - 1) as i16;
    insns.extend(j);
    let end = insns.len();
    for b in brk_at {
        insns[b].off = (end as i64 - b as i64 - 1) as i16;
    }
    insns.extend(fold_epilogue(&[1, 2, 3, 4, 5, 6, 7, 8, 9]));
    Program::from_insns(name, insns)
}

/// Loads from the input record, stores and atomics on the output record, stack traffic.
fn gen_mem(rng: &mut StdRng, name: &str, in_size: u32, out_size: u32) -> Program {
    let alu = alu_ops();
    let loads: Vec<Opcode> = Opcode::ALL
        .iter()
        .copied()
        .filter(|o| matches!(o.kind(), OpKind::Load { .. }))
        .collect();
    let stores: Vec<Opcode> = Opcode::ALL
        .iter()
        .copied()
        .filter(|o| matches!(o.kind(), OpKind::Store { .. }))
        .collect();
    let atomics: Vec<Opcode> = Opcode::ALL
        .iter()
        .copied()
        .filter(|o| matches!(o.kind(), OpKind::Atomic { .. }))
        .collect();
    // r6 = data, r7 = out, r8 = index; bounds checks as a verifier would want them.
    let head = format!(
        "r6 = *(u64 *)(r1 + 0)\nr2 = *(u64 *)(r1 + 8)\nr7 = *(u64 *)(r1 + 16)\nr3 = *(u64 *)(r1 + 24)\nr8 = *(u64 *)(r1 + 32)\nr9 = *(u64 *)(r1 + 48)\n\
         r4 = r6\nr4 += {in_size}\nif r4 > r2 goto bad\nr4 = r7\nr4 += {out_size}\nif r4 > r3 goto bad\n\
         *(u64 *)(r10 - 8) = 0\n*(u64 *)(r10 - 16) = 0\n*(u64 *)(r10 - 24) = 0\n*(u64 *)(r10 - 32) = 0\n\
         r0 = r9\nr0 ^= r8\nr1 = r8\nr1 *= 77\nr2 = r9\nr2 += r8\nr3 = r9\nr3 >>= 5\nr4 = r8\nr5 = r9\nr5 ^= 1234567\n\
         goto body\nbad:\nr0 = -1\nexit\nbody:\n"
    );
    let mut insns = assemble(&head).expect("mem head");
    let len = rng.gen_range(8..50);
    let regs = [0u8, 1, 2, 3, 4, 5];
    for _ in 0..len {
        let r = regs[rng.gen_range(0..6)];
        let s = regs[rng.gen_range(0..6)];
        match rng.gen_range(0..10) {
            0..=2 => {
                let op = loads[rng.gen_range(0..loads.len())];
                let OpKind::Load { size, .. } = op.kind() else {
                    unreachable!()
                };
                let b = size.bytes() as u32;
                let off = rng.gen_range(0..in_size / b) * b;
                insns.push(op.insn(r, 6, off as i16, 0));
            }
            3..=4 => {
                let op = stores[rng.gen_range(0..stores.len())];
                let OpKind::Store { size, src } = op.kind() else {
                    unreachable!()
                };
                let b = size.bytes() as u32;
                let off = rng.gen_range(0..out_size / b) * b;
                let (base, slot) = if rng.gen_bool(0.2) {
                    (10u8, -8 * rng.gen_range(1..=4i16))
                } else {
                    (7u8, off as i16)
                };
                let slot = if base == 10 {
                    slot + (rng.gen_range(0..8 / b as i16) * b as i16)
                } else {
                    slot
                };
                insns.push(match src {
                    Src::Imm => op.insn(base, 0, slot, pick_imm(rng)),
                    Src::Reg => op.insn(base, s, slot, 0),
                });
            }
            5..=6 => {
                let op = atomics[rng.gen_range(0..atomics.len())];
                let OpKind::Atomic { size, .. } = op.kind() else {
                    unreachable!()
                };
                let b = size.bytes() as u32;
                let off = rng.gen_range(0..out_size / b) * b;
                insns.push(op.insn(7, s, off as i16, 0));
            }
            7 => {
                let slot = -8 * rng.gen_range(1..=4i16);
                insns.extend(assemble(&format!("r{r} = *(u64 *)(r10 {slot})")).unwrap());
            }
            _ => insns.extend(rand_alu(rng, &alu, &regs, &[0, 1, 2, 3, 4, 5, 8, 9])),
        }
    }
    insns.extend(fold_epilogue(&[1, 2, 3, 4, 5, 8, 9]));
    Program::from_insns(name, insns)
}

/// A main function calling a subprogram (which may call another); callees use their own
/// frames and may write r6..r9 (restored for the caller).
fn gen_calls(rng: &mut StdRng, name: &str) -> Program {
    let alu = alu_ops();
    let call = op_of(|k| k == OpKind::CallLocal);
    let mut main = assemble(PROLOGUE).unwrap();
    main.extend(assemble("*(u64 *)(r10 - 8) = r6\nr1 = r7\nr2 = r8\nr3 = r9").unwrap());
    let call_at = main.len();
    main.push(call.insn(0, 1, 0, 0));
    main.extend(assemble("r1 = *(u64 *)(r10 - 8)\nr0 ^= r1").unwrap());
    main.extend(fold_epilogue(&[6, 7, 8, 9]));
    let depth = rng.gen_range(1..=2);
    let mut funcs: Vec<Vec<Insn>> = Vec::new();
    for d in 0..depth {
        let mut f = assemble("*(u64 *)(r10 - 8) = r1\n*(u64 *)(r10 - 16) = r2\nr0 = r3").unwrap();
        let body = rng.gen_range(3..25);
        let dsts: &[u8] = if rng.gen_bool(0.5) {
            &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
        } else {
            &[0, 1, 2, 3, 4, 5]
        };
        for _ in 0..body {
            if rng.gen_bool(0.15) {
                let r = rng.gen_range(0..6);
                f.extend(
                    assemble(&format!(
                        "r{r} = *(u64 *)(r10 - {})",
                        8 * rng.gen_range(1..=2)
                    ))
                    .unwrap(),
                );
            } else {
                f.extend(rand_alu(rng, &alu, dsts, &[0, 1, 2, 3, 4, 5]));
            }
        }
        if d + 1 < depth {
            f.extend(assemble("*(u64 *)(r10 - 24) = r0\nr1 = r0\nr2 = r4").unwrap());
            f.push(call.insn(0, 1, 0, -1)); // patched below
            f.extend(assemble("r1 = *(u64 *)(r10 - 24)\nr0 += r1").unwrap());
        }
        f.push(exit_insn());
        funcs.push(f);
    }
    // Place: main, f0, f1.
    let mut insns = main;
    let mut starts = Vec::new();
    for f in &funcs {
        starts.push(insns.len());
        insns.extend(f.iter().copied());
    }
    insns[call_at].imm = (starts[0] as i64 - call_at as i64 - 1) as i32;
    if depth == 2 {
        let pc = (starts[0]..starts[1])
            .find(|&p| {
                insns[p].imm == -1
                    && Opcode::decode(&insns[p]).map(|o| o.kind()) == Ok(OpKind::CallLocal)
            })
            .expect("nested call");
        insns[pc].imm = (starts[1] as i64 - pc as i64 - 1) as i32;
    }
    Program::from_insns(name, insns)
}

/// Helper calls on array / per-thread / hash maps, atomics on map values, global data.
fn gen_map(rng: &mut StdRng, name: &str, n: u32) -> Program {
    let kind = [MapKind::Array, MapKind::PerThreadArray, MapKind::Hash][rng.gen_range(0..3)];
    let keys_per_thread = 4u32;
    let (ks, vs, max) = match kind {
        MapKind::Array => (4, [8, 16, 24][rng.gen_range(0..3)], n * keys_per_thread + 1),
        MapKind::PerThreadArray => (4, [8, 16][rng.gen_range(0..2)], rng.gen_range(1..=6)),
        _ => (
            [4, 8, 12, 16][rng.gen_range(0..4)],
            [8, 16, 24][rng.gen_range(0..3)],
            n * keys_per_thread + rng.gen_range(0..8),
        ),
    };
    let mut maps = vec![mapdef("m", kind, ks, vs, max)];
    let with_global = rng.gen_bool(0.4);
    if with_global {
        let mut g = mapdef(".data", MapKind::Array, 4, 64, 1);
        g.init = Some((0..64).map(|_| rng.r#gen()).collect());
        maps.push(g);
    }
    // Defined, non-pointer values for r3..r5 (from the index and args, in r6..r8).
    const FRESH: &str = "r3 = r6\nr3 *= 2654435761\nr3 ^= r7\nr4 = r8\nr4 += r6\nr5 = r7\nr5 -= r6";
    // The shared word of an array: the last entry, one commutative op per program.
    let shared_ops = ["+=", "|=", "&=", "^="];
    let shared_op = shared_ops[rng.gen_range(0..4)];
    let mut s = String::from(PROLOGUE);
    s.push_str("r9 = 0\n");
    let nops = rng.gen_range(3..14);
    let mut label = 0;
    // Builds the key of slot j of this thread at r10-32 (16 bytes), r2 = its address.
    let key = |s: &mut String, rng: &mut StdRng, j: u32| {
        let k: u64 = match kind {
            MapKind::PerThreadArray => {
                if rng.gen_bool(0.1) {
                    (max + rng.gen_range(0..3)) as u64
                } else {
                    rng.gen_range(0..max) as u64
                }
            }
            _ => j as u64,
        };
        if kind == MapKind::PerThreadArray {
            let _ = writeln!(s, "r2 = {k}");
        } else if rng.gen_bool(0.05) && kind == MapKind::Array {
            let _ = writeln!(s, "r2 = {}", max + 7);
        } else {
            // own key: index * 4 + j
            let _ = writeln!(s, "r2 = r6\nr2 *= {keys_per_thread}\nr2 += {k}");
        }
        if ks >= 8 {
            let _ = writeln!(s, "*(u64 *)(r10 - 32) = r2");
        } else {
            let _ = writeln!(s, "*(u32 *)(r10 - 32) = r2");
        }
        if ks > 8 {
            let _ = writeln!(s, "r2 = r7\nr2 ^= {}\n*(u64 *)(r10 - 24) = r2", j);
        }
        let _ = writeln!(s, "r2 = r10\nr2 += -32");
    };
    for _ in 0..nops {
        let j = rng.gen_range(0..keys_per_thread);
        let op = rng.gen_range(0..12);
        match op {
            0..=3 => {
                // update with a value made of registers (r1..r5 are undefined after a call
                // and r0 may hold a map value's address: fresh values in r3..r5 first)
                let _ = writeln!(s, "{}", FRESH);
                for w in 0..(vs / 8) {
                    let r = [3, 4, 5, 6, 7, 8, 9][rng.gen_range(0..7)];
                    let _ = writeln!(s, "*(u64 *)(r10 - {}) = r{r}", 64 - 8 * w);
                }
                key(&mut s, rng, j);
                let flags = [0, 0, 1, 2][rng.gen_range(0..4)];
                let _ = writeln!(
                    s,
                    "r1 = map_idx[0] ll\nr3 = r10\nr3 += -64\nr4 = {flags}\ncall map_update_elem\nr9 *= 31\nr9 += r0"
                );
            }
            4..=8 => {
                key(&mut s, rng, j);
                label += 1;
                let _ = writeln!(
                    s,
                    "r1 = map_idx[0] ll\ncall map_lookup_elem\nr9 *= 7\nif r0 == 0 goto miss{label}\nr9 += 1\n{}",
                    FRESH
                );
                let words = vs / 8;
                for _ in 0..rng.gen_range(1..4) {
                    let w = 8 * rng.gen_range(0..words);
                    let r = [3, 4, 5][rng.gen_range(0..3)];
                    match rng.gen_range(0..9) {
                        0 | 1 => {
                            let _ = writeln!(s, "r1 = *(u64 *)(r0 + {w})\nr9 ^= r1");
                        }
                        2 => {
                            let _ = writeln!(
                                s,
                                "r1 = *(u32 *)(r0 + {})\nr9 += r1",
                                w + 4 * rng.gen_range(0..2)
                            );
                        }
                        3 => {
                            let _ = writeln!(s, "*(u64 *)(r0 + {w}) = r{r}");
                        }
                        4 => {
                            let _ = writeln!(s, "lock *(u64 *)(r0 + {w}) += r{r}");
                        }
                        5 => {
                            let _ = writeln!(
                                s,
                                "r{r} = atomic_fetch_add((u64 *)(r0 + {w}), r{r})\nr9 += r{r}"
                            );
                        }
                        6 => {
                            let _ = writeln!(s, "r{r} = xchg_64(r0 + {w}, r{r})\nr9 ^= r{r}");
                        }
                        7 => {
                            let _ = writeln!(
                                s,
                                "r1 = r0\nr0 = *(u64 *)(r1 + {w})\nr0 = cmpxchg_64(r1 + {w}, r0, r{r})\nr9 += r0\nr0 = r1"
                            );
                        }
                        _ => {
                            let _ = writeln!(
                                s,
                                "lock *(u32 *)(r0 + {}) ^= w{r}",
                                w + 4 * rng.gen_range(0..2)
                            );
                        }
                    }
                }
                let _ = writeln!(s, "miss{label}:");
            }
            9 => {
                key(&mut s, rng, j);
                let _ = writeln!(
                    s,
                    "r1 = map_idx[0] ll\ncall map_delete_elem\nr9 *= 5\nr9 += r0"
                );
            }
            10 if kind == MapKind::Array => {
                // the shared last entry, one commutative atomic
                label += 1;
                let _ = writeln!(
                    s,
                    "*(u32 *)(r10 - 32) = {}\nr2 = r10\nr2 += -32\nr1 = map_idx[0] ll\ncall map_lookup_elem\nif r0 == 0 goto miss{label}\nr3 = r6\nr3 *= 2654435761\nr3 ^= r7\nlock *(u64 *)(r0 + 0) {shared_op} r3\nmiss{label}:",
                    max - 1
                );
            }
            _ if with_global => {
                let off = 8 * rng.gen_range(0..8);
                let _ = writeln!(
                    s,
                    "r2 = map_idx_value[1][{off}] ll\nr1 = *(u64 *)(r2 + 0)\nr9 ^= r1\nr9 *= 3"
                );
            }
            _ => {
                let _ = writeln!(s, "r9 += r6");
            }
        }
    }
    s.push_str("r0 = r9\nexit\n");
    let mut p = Program::from_insns(
        name,
        assemble(&s).unwrap_or_else(|e| panic!("{name}: {e}\n{s}")),
    );
    p.maps = maps;
    p
}

/// The C test programs: (file, programs, runs in parallel too, r0 comparable).
const C_PROGRAMS: &[(&str, &[&str], bool, bool)] = &[
    ("add", &["add"], true, true),
    ("calls", &["calls", "calls2"], true, true),
    ("counter", &["counter"], false, true),
    ("filter", &["filter"], true, true),
    ("frame_slots", &["frame_slots"], false, true),
    ("globals", &["globals"], false, true),
    ("gpu_helpers", &["gpu_probe"], false, false),
    ("legacy_map", &["legacy"], false, true),
    ("loop", &["loop"], true, true),
    ("minimal", &["minimal"], true, true),
    (
        "multi",
        &[
            "on_entry", "on_exit", "on_foo", "xdp_pass", "pair_a", "pair_b",
        ],
        false,
        true,
    ),
    ("pairs", &["write_pair"], true, true),
    ("printk", &["printk"], true, true),
    ("reject_unchecked", &["unchecked_read"], true, true),
    ("ringbuf", &["ringbuf"], true, true),
    ("vec_add", &["vec_add"], true, true),
    ("void_call", &["void_call"], true, true),
];

fn c_cases(objdir: &Path, rng: &mut StdRng, skipped: &mut Vec<Value>) -> Vec<Case> {
    let mut out = Vec::new();
    for (file, progs, par, r0) in C_PROGRAMS {
        let path = objdir.join(format!("{file}.bpf.o"));
        let Ok(bytes) = std::fs::read(&path) else {
            skipped.push(json!({"program": file, "why": format!("{} missing", path.display())}));
            continue;
        };
        for prog in *progs {
            let p = match ebpf::elf::load(&bytes, &format!("{file}.bpf.o"), Some(prog)) {
                Ok(p) => p,
                Err(e) => {
                    skipped
                        .push(json!({"program": format!("{file}/{prog}"), "why": e.to_string()}));
                    continue;
                }
            };
            if let Err(e) = ebpf::verifier::verify(&p, &ebpf::verifier::VerifyOptions::default()) {
                skipped.push(json!({"program": format!("{file}/{prog}"), "why": format!("verifier rejects it (as intended): {e}")}));
                continue;
            }
            // Race-free programs run one thread per record; the others record by record.
            {
                let serial = !*par;
                let mut p = p.clone();
                p.name = format!("c_{file}_{prog}_{}", if serial { "ser" } else { "par" });
                out.push(Case {
                    name: p.name.clone(),
                    category: "c_program".into(),
                    prog: p,
                    n: if serial { 16 } else { 64 },
                    in_size: 64,
                    out_size: 64,
                    args: [rng.gen_range(0..1000), rng.r#gen(), rng.r#gen(), rng.r#gen()],
                    serial,
                    compare_r0: *r0,
                    note: if *r0 { String::new() } else { "r0 includes get_sm_id (the SM number on the GPU, the worker id in the interpreter): not compared".into() },
                });
            }
        }
    }
    out
}

fn gen_cases(
    seed: u64,
    count: usize,
    objdir: Option<&Path>,
    skipped: &mut Vec<Value>,
) -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cases = Vec::new();
    if let Some(d) = objdir {
        cases.extend(c_cases(d, &mut rng, skipped));
    }
    let body = body_ops();
    let ns = [1u32, 7, 32, 64, 100];
    for i in 0..count {
        let n = ns[rng.gen_range(0..ns.len())];
        let args: [u64; 4] = [rng.r#gen(), rng.r#gen(), rng.r#gen(), rng.r#gen()];
        // Categories in rotation: alu 35%, loop 15%, mem 20%, calls 10%, map 20%.
        let which = i % 20;
        let (cat, prog, in_size, out_size) = match which {
            0..=6 => {
                let force = body[(i / 20 * 7 + which) % body.len()];
                ("alu", gen_alu(&mut rng, &format!("alu{i}"), force), 0, 0)
            }
            7..=9 => ("loop", gen_loop(&mut rng, &format!("loop{i}")), 0, 0),
            10..=13 => {
                let is = [8u32, 16, 32, 64][rng.gen_range(0..4)];
                let os = [8u32, 16, 32, 64][rng.gen_range(0..4)];
                ("mem", gen_mem(&mut rng, &format!("mem{i}"), is, os), is, os)
            }
            14..=15 => ("calls", gen_calls(&mut rng, &format!("calls{i}")), 0, 0),
            _ => ("map", gen_map(&mut rng, &format!("map{i}"), n), 0, 0),
        };
        cases.push(Case {
            name: prog.name.clone(),
            category: cat.into(),
            prog,
            n,
            in_size,
            out_size,
            args,
            serial: false,
            compare_r0: true,
            note: String::new(),
        });
    }
    // GPU_DIFF_BISECT=name: the case cut before every pc no jump crosses, each returning a
    // fold of all registers and the stack (to find the first instruction that differs).
    if let Ok(name) = std::env::var("GPU_DIFF_BISECT") {
        let mut extra = Vec::new();
        for c in cases.iter().filter(|c| c.name == name) {
            let insns = &c.prog.insns;
            for pc in 1..insns.len() {
                let crosses = (0..pc).any(|i| {
                    let Ok(op) = Opcode::decode(&insns[i]) else {
                        return false;
                    };
                    let t = match op.kind() {
                        OpKind::Ja | OpKind::Jmp { .. } => i as i64 + 1 + insns[i].off as i64,
                        OpKind::JaLong => i as i64 + 1 + insns[i].imm as i64,
                        _ => return false,
                    };
                    t >= pc as i64
                }) || (pc > 0
                    && Opcode::decode(&insns[pc - 1]).is_ok_and(|o| o.is_wide()));
                if crosses {
                    continue;
                }
                // GPU_DIFF_BISECT_AT=pc,pc: one case per register and stack word at those pcs.
                let at: Vec<usize> = std::env::var("GPU_DIFF_BISECT_AT")
                    .ok()
                    .map(|v| v.split(',').filter_map(|x| x.parse().ok()).collect())
                    .unwrap_or_default();
                let mut tails = Vec::new();
                if at.contains(&pc) {
                    for r in 0..=9 {
                        tails.push((format!("r{r}"), format!("r0 = r{r}\nexit")));
                    }
                    for j in 1..=8 {
                        tails.push((
                            format!("s{j}"),
                            format!("r0 = *(u64 *)(r10 - {})\nexit", 8 * j),
                        ));
                    }
                } else if at.is_empty() {
                    let mut tail = String::new();
                    for r in 1..=9 {
                        let _ = writeln!(tail, "r0 *= 1000003\nr0 ^= r{r}");
                    }
                    for j in 1..=8 {
                        let _ = writeln!(
                            tail,
                            "r1 = *(u64 *)(r10 - {})\nr0 *= 1000003\nr0 ^= r1",
                            8 * j
                        );
                    }
                    tail.push_str("exit");
                    tails.push(("all".into(), tail));
                }
                for (what, tail) in tails {
                    let mut cut = insns[..pc].to_vec();
                    cut.extend(assemble(&tail).expect("tail"));
                    let mut p = Program::from_insns(&format!("cut_{name}_{pc}_{what}"), cut);
                    p.maps = c.prog.maps.clone();
                    extra.push(Case {
                        name: p.name.clone(),
                        category: "bisect".into(),
                        prog: p,
                        n: c.n,
                        in_size: c.in_size,
                        out_size: c.out_size,
                        args: c.args,
                        serial: c.serial,
                        compare_r0: true,
                        note: format!("{name} cut at pc {pc}"),
                    });
                }
            }
        }
        cases.extend(extra);
    }
    cases
}

/// A PTX `.entry` running `func` for one record `idx` (one thread), for serial cases.
fn serial_entry(entry: &str, func: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        ".visible .entry {entry}(.param .u64 in_base, .param .u64 in_size, .param .u64 out_base, .param .u64 out_size, .param .u64 n, .param .u64 a0, .param .u64 a1, .param .u64 a2, .param .u64 a3, .param .u64 results, .param .u64 idx)\n{{"
    );
    s.push_str("\t.local .align 16 .b8 sctx[80];\n\t.reg .b64 %d<24>;\n");
    for (k, p) in [
        "in_base", "in_size", "out_base", "out_size", "n", "a0", "a1", "a2", "a3", "results", "idx",
    ]
    .iter()
    .enumerate()
    {
        let _ = writeln!(s, "\tld.param.u64 %d{k}, [{p}];");
    }
    let _ = writeln!(
        s,
        "\tmad.lo.s64 %d12, %d10, %d1, %d0;\n\tadd.s64 %d13, %d12, %d1;\n\tmad.lo.s64 %d14, %d10, %d3, %d2;\n\tadd.s64 %d15, %d14, %d3;"
    );
    for (off, r) in [
        (JobCtx::DATA, 12),
        (JobCtx::DATA_END, 13),
        (JobCtx::OUT, 14),
        (JobCtx::OUT_END, 15),
        (JobCtx::INDEX, 10),
        (JobCtx::N, 4),
        (JobCtx::ARGS, 5),
        (JobCtx::ARGS + 8, 6),
        (JobCtx::ARGS + 16, 7),
        (JobCtx::ARGS + 24, 8),
    ] {
        let _ = writeln!(s, "\tst.local.u64 [sctx+{off}], %d{r};");
    }
    let _ = writeln!(
        s,
        "\tmad.lo.s64 %d16, %d10, 8, %d9;\n\tmov.b64 %d17, 0;\n\tst.u64 [%d16], %d17;\n\tcvta.local.u64 %d18, sctx;\n\t{{\n\t.param .b64 sp0;\n\t.param .b64 sr0;\n\tst.param.b64 [sp0], %d18;\n\tcall.uni (sr0), {func}, (sp0);\n\tld.param.b64 %d19, [sr0];\n\t}}\n\tst.u64 [%d16], %d19;\n\tret;\n}}"
    );
    s
}

/// Deterministic non-zero pattern for inputs and initial outputs.
fn fill(rng: &mut StdRng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.r#gen()).collect()
}

struct Built {
    ptx: String,
    run_line: String,
    input: Vec<u8>,
    want: Vec<u8>,
    meta: Value,
}

fn build_case(c: &Case, seed: u64) -> Result<Built, String> {
    let p = &c.prog;
    let n = c.n as usize;
    let mut bindings = Vec::new();
    let mut bufs = Vec::new();
    let mut live: Vec<Arc<dyn MapOps>> = Vec::new();
    for (i, d) in p.maps.iter().enumerate() {
        let t = map_threads(d, c.n);
        let len = sm::layout_size(d, t).map_err(|e| format!("{}: map {i}: {e}", c.name))?;
        if len > MAP_SPAN {
            return Err(format!(
                "{}: map {i} needs {len} bytes > {MAP_SPAN}",
                c.name
            ));
        }
        let mut b = MapBuf::new(len as usize);
        // SAFETY: a fresh 64-aligned buffer of `len` bytes, kept in `bufs` (its heap storage
        // does not move) for as long as the handles live, used only through them.
        let m = unsafe { sm::init(b.base(), len, d, t) }
            .map_err(|e| format!("{}: map {i}: {e}", c.name))?;
        if let Some(init) = &d.init {
            let mut v = init.clone();
            v.resize(d.value_size as usize, 0);
            m.update(&0u32.to_ne_bytes(), &v, 0, 0)
                .map_err(|e| format!("{}: init map {i}: {e}", c.name))?;
        }
        let mut bd = MapBinding::for_def(d, map_base() + i as u64 * MAP_SPAN, c.n);
        bd.threads = t;
        bindings.push(bd);
        live.push(Arc::new(ThreadFix(Arc::new(m))));
        bufs.push(b);
    }
    // Frame slots in registers, as the attach side compiles probes (BPFTIME_STACK_REGS=0:
    // every slot in local memory).
    let stack_regs = match std::env::var("BPFTIME_STACK_REGS").as_deref() {
        Ok("0") => None,
        _ => ebpf::verifier::verify(p, &ebpf::verifier::VerifyOptions::default())
            .ok()
            .map(|v| v.stack_registers()),
    };
    let opts = JitOptions {
        maps: bindings,
        lock_pid: 1,
        stack_regs,
        ..JitOptions::default()
    };
    let m = jit::compile(p, &opts).map_err(|e| format!("{}: jit: {e}", c.name))?;
    let mut ptx = m.text();
    let entry = if c.serial {
        let e = format!("ser_{}", jit::sanitize(&p.name));
        ptx.push('\n');
        ptx.push_str(&serial_entry(&e, m.prog_func()));
        e
    } else {
        m.entry_func().ok_or("no entry")?.to_string()
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let input = fill(&mut rng, n * c.in_size as usize);
    let out0 = fill(&mut rng, n * c.out_size as usize);
    let images0: Vec<Vec<u8>> = bufs.iter().map(|b| b.bytes().to_vec()).collect();

    // Reference run.
    let vm = Vm::new(p, live).map_err(|e| format!("{}: interp: {e}", c.name))?;
    let mut out = out0.clone();
    let mut r0s = Vec::with_capacity(n);
    for i in 0..n {
        let (is, os) = (c.in_size as usize, c.out_size as usize);
        let mut env = Env::new(if c.serial { 0 } else { i });
        env.block_dim = if c.serial { 1 } else { c.n as u64 };
        let r0 = vm
            .run_job(
                &input[i * is..(i + 1) * is],
                &mut out[i * os..(i + 1) * os],
                i as u64,
                n as u64,
                c.args,
                &mut env,
            )
            .map_err(|e| format!("{}: record {i}: interp: {e}", c.name))?;
        r0s.push(r0);
    }
    drop(vm);
    let mut want = Vec::new();
    for r in &r0s {
        want.extend_from_slice(&r.to_le_bytes());
    }
    want.extend_from_slice(&out);
    let mut blob = Vec::new();
    blob.extend_from_slice(&input);
    blob.extend_from_slice(&out0);
    let mut maps_txt = String::new();
    let mut maps_meta = Vec::new();
    for (i, (b, img0)) in bufs.iter().zip(&images0).enumerate() {
        want.extend_from_slice(b.bytes());
        let _ = write!(
            maps_txt,
            " {} {} {}",
            map_base() + i as u64 * MAP_SPAN,
            img0.len(),
            blob.len()
        );
        blob.extend_from_slice(img0);
        let d = &p.maps[i];
        maps_meta.push(json!({
            "kind": kind_name(d.kind), "key_size": d.key_size, "value_size": d.value_size,
            "max_entries": d.max_entries, "flags": d.flags, "threads": map_threads(d, c.n), "len": img0.len(),
        }));
    }
    // The interpreter's inputs: relocated slots, then the map descriptors.
    let code = bytecode::relocate(p, &opts.maps).map_err(|e| format!("{}: {e}", c.name))?;
    let interp_off = blob.len();
    for w in &code {
        blob.extend_from_slice(&w.to_le_bytes());
    }
    for d in opts.maps.iter().map(bytecode::map_desc) {
        blob.extend_from_slice(&d.base.to_le_bytes());
        for f in [
            d.kind,
            d.key_size,
            d.value_size,
            d.max_entries,
            d.threads,
            d.flags,
        ] {
            blob.extend_from_slice(&f.to_le_bytes());
        }
        for f in [d.tier_ns, d.tier_ps, d.tier_tat] {
            blob.extend_from_slice(&f.to_le_bytes());
        }
    }
    let _ = write!(maps_txt, " {interp_off} {} 0", code.len());
    // run line: entry mode n in_size out_size a0..a3 in_off out_off nmaps [addr len off]*
    //           interp_off n_insns stack_size
    let run_line = format!(
        "{entry} {} {} {} {} {} {} {} {} 0 {} {}{maps_txt}",
        if c.serial { "ser" } else { "par" },
        c.n,
        c.in_size,
        c.out_size,
        c.args[0],
        c.args[1],
        c.args[2],
        c.args[3],
        input.len(),
        p.maps.len()
    );
    let meta = json!({
        "name": c.name, "category": c.category, "n": c.n, "out_size": c.out_size,
        "serial": c.serial, "compare_r0": c.compare_r0, "note": c.note, "maps": maps_meta,
        "insns": p.insns.len(),
    });
    Ok(Built {
        ptx,
        run_line,
        input: blob,
        want,
        meta,
    })
}

/// Concatenates modules into one (first header kept; prelude symbols renamed apart).
fn merge(modules: &[String]) -> String {
    let mut out = String::new();
    for (k, m) in modules.iter().enumerate() {
        let body = if k == 0 {
            m.clone()
        } else {
            m.lines()
                .filter(|l| {
                    !(l.starts_with(".version")
                        || l.starts_with(".target")
                        || l.starts_with(".address_size"))
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        out.push_str(
            &body
                .replace("bpf_h", &format!("m{k}_bpf_h"))
                .replace("bpf_prandom_state", &format!("m{k}_bpf_prandom_state")),
        );
        out.push('\n');
    }
    out
}

fn gen_cmd(seed: u64, count: usize, dir: &Path, objdir: Option<PathBuf>) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let mut skipped = Vec::new();
    let t0 = std::time::Instant::now();
    let cases = gen_cases(seed, count, objdir.as_deref(), &mut skipped);
    // GPU_DIFF_DUMP=name,name: print those programs (debugging a mismatch).
    if let Ok(which) = std::env::var("GPU_DIFF_DUMP") {
        for c in cases
            .iter()
            .filter(|c| which.split(',').any(|w| w == c.name))
        {
            println!(
                "== {} (n = {}, maps {:?})\n{}",
                c.name,
                c.n,
                c.prog
                    .maps
                    .iter()
                    .map(|m| (m.kind, m.key_size, m.value_size, m.max_entries))
                    .collect::<Vec<_>>(),
                ebpf::asm::disasm(&c.prog.insns)
            );
        }
    }
    // Opcode coverage.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for c in &cases {
        let mut pc = 0;
        while pc < c.prog.insns.len() {
            if let Ok(op) = Opcode::decode(&c.prog.insns[pc]) {
                *seen.entry(format!("{op:?}")).or_default() += 1;
                pc += if op.is_wide() { 2 } else { 1 };
            } else {
                pc += 1;
            }
        }
    }
    let missing: Vec<String> = Opcode::ALL
        .iter()
        .map(|o| format!("{o:?}"))
        .filter(|o| !seen.contains_key(o))
        .collect();
    let chunks: Vec<&[Case]> = cases.chunks(CHUNK).collect();
    let nthreads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let errors = std::sync::Mutex::new(Vec::<String>::new());
    std::thread::scope(|s| {
        for _ in 0..nthreads {
            s.spawn(|| {
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if k >= chunks.len() {
                        break;
                    }
                    if let Err(e) = write_chunk(dir, k, chunks[k], seed) {
                        errors.lock().unwrap().push(e);
                    }
                }
            });
        }
    });
    let errors = errors.into_inner().unwrap();
    let mut by_cat: BTreeMap<String, usize> = BTreeMap::new();
    for c in &cases {
        *by_cat.entry(c.category.clone()).or_default() += 1;
    }
    let summary = json!({
        "seed": seed, "cases": cases.len(), "chunks": chunks.len(), "by_category": by_cat,
        "threads": cases.iter().map(|c| c.n as u64).sum::<u64>(),
        "opcodes_total": Opcode::ALL.len(), "opcodes_covered": seen.len(), "opcodes_missing": missing,
        "opcode_counts": seen, "skipped_programs": skipped, "gen_errors": errors, "gen_seconds": t0.elapsed().as_secs_f64(),
    });
    std::fs::write(
        dir.join("gen.json"),
        serde_json::to_string_pretty(&summary).unwrap(),
    )
    .map_err(|e| e.to_string())?;
    println!(
        "gen: {} cases in {} chunks, {} opcodes of {} covered (missing: {:?}), {} errors, {:.1}s",
        cases.len(),
        chunks.len(),
        seen.len(),
        Opcode::ALL.len(),
        summary["opcodes_missing"],
        summary["gen_errors"].as_array().map_or(0, |a| a.len()),
        t0.elapsed().as_secs_f64()
    );
    for e in summary["gen_errors"]
        .as_array()
        .into_iter()
        .flatten()
        .take(10)
    {
        println!("  gen error: {e}");
    }
    Ok(())
}

fn write_chunk(dir: &Path, k: usize, cases: &[Case], seed: u64) -> Result<(), String> {
    let mut modules = Vec::new();
    let mut run = String::new();
    let mut blob = Vec::new();
    let mut want = Vec::new();
    let mut metas = Vec::new();
    let mut errs = Vec::new();
    for (j, c) in cases.iter().enumerate() {
        match build_case(c, seed ^ ((k as u64) << 32) ^ j as u64) {
            Ok(b) => {
                modules.push(b.ptx);
                // Offsets in the run line are relative to the case's blob: rebase them.
                let base = blob.len();
                let mut f: Vec<String> = b.run_line.split(' ').map(str::to_string).collect();
                // fields: 0 entry 1 mode 2 n 3 in 4 out 5-8 args 9 in_off 10 out_off 11 nmaps
                for idx in [9usize, 10] {
                    f[idx] = (f[idx].parse::<usize>().unwrap() + base).to_string();
                }
                let nm: usize = f[11].parse().unwrap();
                for m in 0..nm {
                    let idx = 12 + 3 * m + 2;
                    f[idx] = (f[idx].parse::<usize>().unwrap() + base).to_string();
                }
                let idx = 12 + 3 * nm;
                f[idx] = (f[idx].parse::<usize>().unwrap() + base).to_string();
                let _ = writeln!(run, "case {}", f.join(" "));
                blob.extend_from_slice(&b.input);
                want.extend_from_slice(&b.want);
                metas.push(b.meta);
            }
            Err(e) => errs.push(e),
        }
    }
    let stem = dir.join(format!("chunk_{k:04}"));
    let w = |ext: &str, data: &[u8]| -> Result<(), String> {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(stem.with_extension(ext)).map_err(|e| e.to_string())?,
        );
        f.write_all(data).map_err(|e| e.to_string())
    };
    w("ptx", merge(&modules).as_bytes())?;
    w("run", run.as_bytes())?;
    w("in", &blob)?;
    w("want", &want)?;
    w("json", serde_json::to_string(&metas).unwrap().as_bytes())?;
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("\n"))
    }
}

// ---------------------------------------------------------------------------------------
// check
// ---------------------------------------------------------------------------------------

fn map_of(meta: &Value) -> MapDef {
    let mut d = mapdef(
        "m",
        kind_from(meta["kind"].as_str().unwrap_or("")),
        meta["key_size"].as_u64().unwrap_or(0) as u32,
        meta["value_size"].as_u64().unwrap_or(0) as u32,
        meta["max_entries"].as_u64().unwrap_or(0) as u32,
    );
    d.flags = meta["flags"].as_u64().unwrap_or(0) as u32;
    d
}

/// Scans a hash image: every stripe lock free, every slot settled (not busy, seq even).
fn hash_settled(def: &MapDef, img: &[u8]) -> Result<(), String> {
    let rd = |o: usize, n: usize| -> u64 {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&img[o..o + n]);
        u64::from_le_bytes(b)
    };
    let slots = (2 * def.max_entries as u64).next_power_of_two();
    let locks = slots.min(1024);
    for j in 0..locks as usize {
        if rd(64 + 4 * j, 4) != 0 {
            return Err(format!("stripe lock {j} held ({:#x})", rd(64 + 4 * j, 4)));
        }
    }
    let slots_off = (64 + 4 * locks).div_ceil(64) * 64;
    let slot_size =
        16 + (def.key_size as u64).div_ceil(8) * 8 + (def.value_size as u64).div_ceil(8) * 8;
    for s in 0..slots {
        let o = (slots_off + s * slot_size) as usize;
        let state = rd(o, 8);
        if state & 3 == 1 {
            return Err(format!("slot {s} busy ({state:#x})"));
        }
        if rd(o + 8, 8) & 1 == 1 {
            return Err(format!("slot {s} seq odd"));
        }
    }
    Ok(())
}

/// Compares one map's final images; `Err` says how they differ.
fn compare_map(meta: &Value, want: &[u8], got: &[u8]) -> Result<(), String> {
    let def = map_of(meta);
    let threads = meta["threads"].as_u64().unwrap_or(1) as u32;
    match def.kind {
        MapKind::Array | MapKind::PerThreadArray => {
            if want == got {
                return Ok(());
            }
            let first = want.iter().zip(got).position(|(a, b)| a != b).unwrap_or(0);
            Err(format!(
                "{} image differs from byte {first}",
                kind_name(def.kind)
            ))
        }
        MapKind::Hash => {
            hash_settled(&def, got).map_err(|e| format!("gpu hash: {e}"))?;
            hash_settled(&def, want).map_err(|e| format!("interp hash: {e}"))?;
            let (mut wb, mut gb) = (MapBuf::from_bytes(want), MapBuf::from_bytes(got));
            // SAFETY: private aligned copies of complete map layouts, used only here.
            let (wm, gm) = unsafe {
                (
                    sm::attach(wb.base(), want.len() as u64, &def, threads)
                        .map_err(|e| format!("attach interp image: {e}"))?,
                    sm::attach(gb.base(), got.len() as u64, &def, threads)
                        .map_err(|e| format!("attach gpu image: {e}"))?,
                )
            };
            let (mut we, mut ge) = (wm.entries(), gm.entries());
            we.sort();
            ge.sort();
            let count = |b: &[u8]| u64::from_le_bytes(b[48..56].try_into().unwrap());
            if we != ge {
                return Err(format!(
                    "hash entries differ: interp {} entries, gpu {}",
                    we.len(),
                    ge.len()
                ));
            }
            if count(want) != count(got) {
                return Err(format!(
                    "hash count word: interp {}, gpu {}",
                    count(want),
                    count(got)
                ));
            }
            Ok(())
        }
        MapKind::RingBuf => {
            let (mut wb, mut gb) = (MapBuf::from_bytes(want), MapBuf::from_bytes(got));
            // SAFETY: as above.
            let (wm, gm) = unsafe {
                (
                    sm::attach(wb.base(), want.len() as u64, &def, threads)
                        .map_err(|e| format!("attach interp image: {e}"))?,
                    sm::attach(gb.base(), got.len() as u64, &def, threads)
                        .map_err(|e| format!("attach gpu image: {e}"))?,
                )
            };
            let (mut wr, mut gr) = (wm.drain_ringbuf(), gm.drain_ringbuf());
            wr.sort();
            gr.sort();
            if wr != gr {
                return Err(format!(
                    "ring buffer records differ: interp {}, gpu {}",
                    wr.len(),
                    gr.len()
                ));
            }
            Ok(())
        }
    }
}

/// Compares one case's result (`None`: missing) with the interpreter's (`want`).
fn case_verdict(
    m: &Value,
    w: &[u8],
    got: Option<&[u8]>,
    lens: &[usize],
    r0_skipped: &mut BTreeSet<String>,
) -> Result<(), String> {
    let n = m["n"].as_u64().unwrap() as usize;
    let os = m["out_size"].as_u64().unwrap() as usize;
    let name = m["name"].as_str().unwrap().to_string();
    let Some(g) = got else {
        return Err("no GPU result (fault or missing dump)".into());
    };
    if m["compare_r0"].as_bool().unwrap_or(true) {
        for t in 0..n {
            let (a, b) = (&w[8 * t..8 * t + 8], &g[8 * t..8 * t + 8]);
            if a != b {
                let b = u64::from_le_bytes(b.try_into().unwrap());
                // The device interpreter's error marker (run_cases.cu).
                let note = if b >> 52 == 0xbad {
                    format!(
                        " (interpreter error {} at pc {})",
                        (b >> 40) & 0xfff,
                        b & 0xff_ffff_ffff
                    )
                } else {
                    String::new()
                };
                return Err(format!(
                    "r0 of thread {t}: interp {:#x}, gpu {b:#x}{note}",
                    u64::from_le_bytes(a.try_into().unwrap()),
                ));
            }
        }
    } else {
        r0_skipped.insert(name);
    }
    let (o0, o1) = (8 * n, 8 * n + n * os);
    if w[o0..o1] != g[o0..o1] {
        let first = w[o0..o1]
            .iter()
            .zip(&g[o0..o1])
            .position(|(a, b)| a != b)
            .unwrap();
        return Err(format!(
            "output differs at record {} byte {}",
            first / os,
            first % os
        ));
    }
    let mut mo = o1;
    for (i, (mm, len)) in m["maps"].as_array().unwrap().iter().zip(lens).enumerate() {
        compare_map(mm, &w[mo..mo + len], &g[mo..mo + len]).map_err(|e| format!("map {i}: {e}"))?;
        mo += len;
    }
    Ok(())
}

fn check_cmd(dir: &Path) -> Result<(), String> {
    let mut chunks: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && p.file_name()
                    .is_some_and(|f| f.to_string_lossy().starts_with("chunk_"))
        })
        .collect();
    chunks.sort();
    let mut total = 0u64;
    let mut passed = 0u64;
    let mut threads = 0u64;
    let mut by_cat: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut faults = Vec::new();
    let mut r0_skipped = BTreeSet::new();
    let (mut interp_total, mut interp_passed) = (0u64, 0u64);
    let mut interp_by_cat: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut interp_failures = Vec::new();
    let mut interp_chunks = 0usize;
    for jp in &chunks {
        let metas: Vec<Value> =
            serde_json::from_slice(&std::fs::read(jp).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        let want = std::fs::read(jp.with_extension("want")).map_err(|e| e.to_string())?;
        let got = std::fs::read(jp.with_extension("got")).unwrap_or_default();
        // Absent when the runner predates the interpreter pass.
        let igot = std::fs::read(jp.with_extension("igot")).ok();
        interp_chunks += igot.is_some() as usize;
        if let Ok(f) = std::fs::read_to_string(jp.with_extension("fault")) {
            faults.push(
                json!({"chunk": jp.file_name().unwrap().to_string_lossy(), "fault": f.trim()}),
            );
        }
        let mut at = 0usize;
        for m in &metas {
            let n = m["n"].as_u64().unwrap() as usize;
            let os = m["out_size"].as_u64().unwrap() as usize;
            let lens: Vec<usize> = m["maps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x["len"].as_u64().unwrap() as usize)
                .collect();
            let size = 8 * n + n * os + lens.iter().sum::<usize>();
            let cat = m["category"].as_str().unwrap().to_string();
            let name = m["name"].as_str().unwrap().to_string();
            total += 1;
            threads += n as u64;
            let e = by_cat.entry(cat.clone()).or_default();
            e.0 += 1;
            let w = &want[at..at + size];
            let verdict = case_verdict(m, w, got.get(at..at + size), &lens, &mut r0_skipped);
            match verdict {
                Ok(()) => {
                    passed += 1;
                    e.1 += 1;
                }
                Err(why) => failures.push(json!({"case": name, "category": cat, "chunk": jp.file_name().unwrap().to_string_lossy(), "why": why})),
            }
            if let Some(ig) = &igot {
                let ie = interp_by_cat.entry(cat.clone()).or_default();
                ie.0 += 1;
                interp_total += 1;
                match case_verdict(m, w, ig.get(at..at + size), &lens, &mut r0_skipped) {
                    Ok(()) => {
                        interp_passed += 1;
                        ie.1 += 1;
                    }
                    Err(why) => interp_failures.push(json!({"case": name, "category": cat, "chunk": jp.file_name().unwrap().to_string_lossy(), "why": why})),
                }
            }
            at += size;
        }
    }
    let by_cat_json: BTreeMap<String, Value> = by_cat
        .iter()
        .map(|(k, (t, p))| (k.clone(), json!({"cases": t, "passed": p, "failed": t - p})))
        .collect();
    let gen_info: Value = std::fs::read(dir.join("gen.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    let summary = json!({
        "cases": total, "threads": threads, "passed": passed, "failed": total - passed,
        "by_category": by_cat_json, "faults": faults, "failures": failures.iter().take(2000).collect::<Vec<_>>(),
        "r0_not_compared": r0_skipped, "gen": gen_info,
        "interp": if interp_chunks == 0 { Value::Null } else { json!({
            "chunks": interp_chunks, "cases": interp_total, "passed": interp_passed,
            "failed": interp_total - interp_passed,
            "by_category": interp_by_cat.iter().map(|(k, (t, p))| (k.clone(), json!({"cases": t, "passed": p, "failed": t - p}))).collect::<BTreeMap<_, _>>(),
            "failures": interp_failures.iter().take(2000).collect::<Vec<_>>(),
        }) },
    });
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&summary).unwrap(),
    )
    .map_err(|e| e.to_string())?;
    println!(
        "check: {total} cases ({threads} threads): {passed} passed, {} failed",
        total - passed
    );
    for (k, (t, p)) in &by_cat {
        println!("  {k:10} {p}/{t}");
    }
    for f in failures.iter().take(20) {
        println!("  FAIL {f}");
    }
    for f in &faults {
        println!("  FAULT {f}");
    }
    if interp_chunks == 0 {
        println!("check interp: not run (no .igot files)");
    } else {
        println!(
            "check interp: {interp_total} cases ({interp_chunks} of {} chunks): {interp_passed} passed, {} failed",
            chunks.len(),
            interp_total - interp_passed
        );
        for (k, (t, p)) in &interp_by_cat {
            println!("  {k:10} {p}/{t}");
        }
        for f in interp_failures.iter().take(20) {
            println!("  INTERP FAIL {f}");
        }
    }
    if interp_total != interp_passed || (interp_chunks > 0 && interp_chunks != chunks.len()) {
        return Err(format!(
            "device interpreter: {} cases failed, {interp_chunks} of {} chunks ran",
            interp_total - interp_passed,
            chunks.len()
        ));
    }
    if total == passed && total > 0 {
        Ok(())
    } else {
        Err(format!("{} cases failed", total - passed))
    }
}

// ---------------------------------------------------------------------------------------
// bench
// ---------------------------------------------------------------------------------------

/// Records of the benchmarks.
const BENCH_N: u64 = 100_000_000;
/// Buckets of the per-thread histogram; keys of the hash count.
const HIST_BUCKETS: u32 = 16;
const HASH_KEYS: u32 = 4096;

const VECADD: &str = "
r2 = *(u64 *)(r1 + 0)
r3 = *(u64 *)(r1 + 8)
r4 = r2
r4 += 8
if r4 > r3 goto bad
r5 = *(u64 *)(r1 + 16)
r6 = *(u64 *)(r1 + 24)
r7 = r5
r7 += 4
if r7 > r6 goto bad
r0 = *(u32 *)(r2 + 0)
r8 = *(u32 *)(r2 + 4)
w0 += w8
*(u32 *)(r5 + 0) = r0
r0 = 0
exit
bad:
r0 = 1
exit
";

const FILTER: &str = "
r2 = *(u64 *)(r1 + 0)
r3 = *(u64 *)(r1 + 8)
r4 = r2
r4 += 16
if r4 > r3 goto bad
r5 = *(u64 *)(r1 + 16)
r6 = *(u64 *)(r1 + 24)
r7 = r5
r7 += 4
if r7 > r6 goto bad
r8 = *(u64 *)(r1 + 48)
r0 = 0
r3 = *(u64 *)(r2 + 0)
if r3 <= r8 goto done
r3 = *(u8 *)(r2 + 8)
if r3 == 0 goto done
r0 = 1
done:
*(u32 *)(r5 + 0) = r0
exit
bad:
r0 = -1
exit
";

/// `bucket = value % 16; (*per_thread[bucket])++` in the thread's own value set.
const HIST: &str = "
r2 = *(u64 *)(r1 + 0)
r3 = *(u64 *)(r1 + 8)
r4 = r2
r4 += 4
if r4 > r3 goto bad
r2 = *(u32 *)(r2 + 0)
r2 &= 15
*(u32 *)(r10 - 4) = r2
r1 = map_idx[0] ll
r2 = r10
r2 += -4
call map_lookup_elem
if r0 == 0 goto bad
r1 = *(u64 *)(r0 + 0)
r1 += 1
*(u64 *)(r0 + 0) = r1
r0 = 0
exit
bad:
r0 = 1
exit
";

/// `key = value % 4096; counts[key] += 1` (atomic), inserting 1 when absent.
const HASHCOUNT: &str = "
r2 = *(u64 *)(r1 + 0)
r3 = *(u64 *)(r1 + 8)
r4 = r2
r4 += 4
if r4 > r3 goto bad
r2 = *(u32 *)(r2 + 0)
r2 &= 4095
*(u32 *)(r10 - 4) = r2
r1 = map_idx[0] ll
r2 = r10
r2 += -4
call map_lookup_elem
if r0 == 0 goto insert
r1 = 1
lock *(u64 *)(r0 + 0) += r1
r0 = 0
exit
insert:
r1 = 1
*(u64 *)(r10 - 16) = r1
r1 = map_idx[0] ll
r2 = r10
r2 += -4
r3 = r10
r3 += -16
r4 = 1
call map_update_elem
r0 = 2
exit
bad:
r0 = 1
exit
";

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn bench_cmd(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    // (a) compile time of a 4,096-slot program (straight-line ALU, stack, jumps).
    let mut rng = StdRng::seed_from_u64(4096);
    let body = body_ops();
    let mut p = gen_alu(&mut rng, "big", body[0]);
    while p.insns.len() < 3900 {
        let f = body[rng.gen_range(0..body.len())];
        let q = gen_alu(&mut rng, "big", f);
        // splice q's body (without its exit) in front of p (compiled, never run)
        let mut ins = q.insns[..q.insns.len() - 1].to_vec();
        ins.extend(p.insns.iter().copied());
        p = Program::from_insns("big", ins);
    }
    // Pad to exactly 4,096 slots.
    let pad = assemble("r0 += 1").expect("pad")[0];
    let mut ins = vec![pad; 4096 - p.insns.len()];
    ins.extend(p.insns.iter().copied());
    p = Program::from_insns("big", ins);
    let slots = p.insns.len();
    let opts = JitOptions::default();
    for _ in 0..20 {
        jit::compile(&p, &opts).map_err(|e| e.to_string())?.text();
    }
    let mut times = Vec::new();
    let mut ptx_len = 0;
    for _ in 0..500 {
        let t = std::time::Instant::now();
        let m = jit::compile(&p, &opts).map_err(|e| e.to_string())?;
        let text = m.text();
        times.push(t.elapsed().as_secs_f64() * 1e3);
        ptx_len = text.len();
    }
    let med = median(&mut times);
    // The two halves: lowering (IR) and printing.
    let (mut lower_t, mut print_t) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        let t = std::time::Instant::now();
        let m = jit::compile(&p, &opts).map_err(|e| e.to_string())?;
        lower_t.push(t.elapsed().as_secs_f64() * 1e3);
        let t = std::time::Instant::now();
        std::hint::black_box(m.text());
        print_t.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (lower_med, print_med) = (median(&mut lower_t), median(&mut print_t));
    println!("bench: lower {lower_med:.3} ms + print {print_med:.3} ms (medians)");
    let compile = json!({"slots": slots, "runs": times.len(), "median_ms": med, "lower_median_ms": lower_med, "print_median_ms": print_med, "min_ms": times[0], "max_ms": times[times.len()-1], "ptx_bytes": ptx_len});
    std::fs::write(dir.join("big.ptx"), jit::compile(&p, &opts).unwrap().text())
        .map_err(|e| e.to_string())?;
    println!(
        "bench: eBPF->PTX of {slots} slots: median {med:.3} ms (min {:.3}, max {:.3}), {ptx_len} bytes of PTX",
        times[0],
        times[times.len() - 1]
    );

    // (c) the four programs, with their maps at fixed device addresses.
    let hist = mapdef("hist", MapKind::PerThreadArray, 4, 8, HIST_BUCKETS);
    let hash = mapdef("counts", MapKind::Hash, 4, 8, HASH_KEYS);
    let hist_threads = BENCH_N as u32;
    // Device addresses of the benchmark maps (bench/gpu/jit_vs_cuda.cu maps them there): the
    // histogram at the base, the hash map after it.
    let bench_hist = map_base();
    let hist_words0 = hist_threads as u64 * HIST_BUCKETS as u64;
    let bench_hash = bench_hist
        + ((64 + 8 * hist_words0).div_ceil(64) * 64 + 8 * hist_words0).div_ceil(1 << 21)
            * (1 << 21);
    let progs: [(&str, &str, Vec<MapDef>); 4] = [
        ("vecadd", VECADD, vec![]),
        ("filter", FILTER, vec![]),
        ("hist", HIST, vec![hist.clone()]),
        ("hashcount", HASHCOUNT, vec![hash.clone()]),
    ];
    let mut mods = Vec::new();
    for (name, src, maps) in progs {
        let mut p = Program::from_insns(name, assemble(src).map_err(|e| format!("{name}: {e}"))?);
        p.maps = maps;
        let v = ebpf::verifier::verify(&p, &ebpf::verifier::VerifyOptions::default())
            .map_err(|e| format!("{name}: verifier: {e}"))?;
        let bindings = p
            .maps
            .iter()
            .map(|d| {
                let mut b = MapBinding::for_def(
                    d,
                    if d.kind == MapKind::Hash {
                        bench_hash
                    } else {
                        bench_hist
                    },
                    hist_threads,
                );
                b.scope = AtomicScope::Gpu;
                b
            })
            .collect();
        let o = JitOptions {
            maps: bindings,
            stack_size: Some(v.max_stack_depth as u32),
            lock_pid: 1,
            ..JitOptions::default()
        };
        let m = jit::compile(&p, &o).map_err(|e| format!("{name}: {e}"))?;
        std::fs::write(dir.join(format!("{name}.ptx")), m.text()).map_err(|e| e.to_string())?;
        mods.push(m.text());
    }
    // The hash map's initial image: every key present with count 0, so the final counts do
    // not depend on insert races; the CUDA side checks the image header's geometry.
    let len = sm::layout_size(&hash, 1).map_err(|e| e.to_string())?;
    let mut b = MapBuf::new(len as usize);
    // SAFETY: fresh aligned buffer, used only through this handle here.
    let m = unsafe { sm::init(b.base(), len, &hash, 1) }.map_err(|e| e.to_string())?;
    for k in 0..HASH_KEYS {
        m.update(&k.to_ne_bytes(), &0u64.to_ne_bytes(), 0, 0)
            .map_err(|e| e.to_string())?;
    }
    drop(m);
    std::fs::write(dir.join("hash.img"), b.bytes()).map_err(|e| e.to_string())?;
    // The PerThreadArray layout of shm-maps (seq words, then values), computed here: at
    // 100M value sets it is past shm-maps' 4 GiB cap for one map, which the JIT does not have.
    let hist_words = hist_threads as u64 * HIST_BUCKETS as u64;
    let hist_len = (64 + 8 * hist_words).div_ceil(64) * 64 + 8 * hist_words;
    let geo = json!({
        "n": BENCH_N, "hist_base": bench_hist, "hist_len": hist_len, "hist_buckets": HIST_BUCKETS,
        "hist_values_off": (64 + 8 * hist_threads as u64 * HIST_BUCKETS as u64).div_ceil(64) * 64,
        "hash_base": bench_hash, "hash_len": len, "hash_keys": HASH_KEYS,
    });
    std::fs::write(
        dir.join("compile.json"),
        serde_json::to_string_pretty(&json!({"compile": compile, "geometry": geo})).unwrap(),
    )
    .map_err(|e| e.to_string())?;
    // A plain-text parameter file for the CUDA side.
    std::fs::write(
        dir.join("params.txt"),
        format!(
            "{BENCH_N} {bench_hist} {hist_len} {} {bench_hash} {len} {HASH_KEYS}\n",
            geo["hist_values_off"]
        ),
    )
    .map_err(|e| e.to_string())?;
    Ok(())
}

/// Debugging aid: the interpreter's registers of record 0 of case `name` just before `pc`
/// (the program cut there; jumps must not cross the cut).
fn regs_cmd(seed: u64, count: usize, name: &str, pc: usize) -> Result<(), String> {
    let mut skipped = Vec::new();
    let cases = gen_cases(seed, count, None, &mut skipped);
    let c = cases
        .iter()
        .find(|c| c.name == name)
        .ok_or("no such case")?;
    for reg in 0..10u8 {
        let mut insns = c.prog.insns[..pc].to_vec();
        insns.extend(assemble(&format!("r0 = r{reg}\nexit")).unwrap());
        let p = Program::from_insns("cut", insns);
        let vm = Vm::new(&p, vec![]).map_err(|e| e.to_string())?;
        let mut env = Env::new(0);
        env.block_dim = c.n as u64;
        let v = vm
            .run_job(&[], &mut [], 0, c.n as u64, c.args, &mut env)
            .map_err(|e| e.to_string())?;
        println!("r{reg} = {v:#018x} ({})", v as i64);
    }
    for j in 1..=8 {
        let mut insns = c.prog.insns[..pc].to_vec();
        insns.extend(assemble(&format!("r0 = *(u64 *)(r10 - {})\nexit", 8 * j)).unwrap());
        let p = Program::from_insns("cut", insns);
        let vm = Vm::new(&p, vec![]).map_err(|e| e.to_string())?;
        let mut env = Env::new(0);
        env.block_dim = c.n as u64;
        let v = vm
            .run_job(&[], &mut [], 0, c.n as u64, c.args, &mut env)
            .map_err(|e| e.to_string())?;
        println!("[r10-{}] = {v:#018x}", 8 * j);
    }
    Ok(())
}
