//! Differential test: the native JIT against the interpreter on generated programs that
//! the verifier accepts. Compared: r0 or the error (addresses blanked), the memory block,
//! the map contents and the instruction count (`Env::last_insns`).
//!
//! The CI run is short (`CASES` programs). The long run:
//!
//! ```text
//! BPFTIME_JIT_DIFF_CASES=100000 cargo test --release -p jit --test cpu_diff -- --nocapture
//! ```
//!
//! `BPFTIME_JIT_DIFF_SEED` picks the seed (default fixed); a failure prints the program.

use ebpf::asm::{assemble, disasm};
use ebpf::interp::{Env, ExecError, Vm};
use ebpf::isa::{Insn, Ld64Kind, OpKind, Opcode, Size, Src};
use ebpf::maps::{MapOps, create_local};
use ebpf::program::{MapDef, MapKind, MapOrigin, Program};
use ebpf::verifier::{CtxKind, VerifyOptions, verify};
use jit::cpu::CpuJitOptions;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// Programs of the CI run.
const CASES: usize = 200;
const MEM: usize = 64;

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

fn ops_of(f: impl Fn(OpKind) -> bool) -> Vec<Opcode> {
    Opcode::ALL
        .iter()
        .copied()
        .filter(|o| f(o.kind()))
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

/// `mk(op, ..)` with the fields the form reserves set to 0.
fn mk(op: Opcode, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    let (mut dst, mut src, mut off, mut imm) = (dst, src, off, imm);
    match op.kind() {
        OpKind::Alu { op: a, src: s, .. } => {
            off = 0;
            match s {
                Src::Imm => src = 0,
                Src::Reg => imm = 0,
            }
            if a == ebpf::isa::AluOp::Neg {
                src = 0;
                imm = 0;
            }
        }
        OpKind::End { .. } => {
            src = 0;
            off = 0;
        }
        OpKind::Ld64(_) => {
            src = 0;
            off = 0;
        }
        OpKind::Load { .. } => imm = 0,
        OpKind::Store { src: s, .. } => match s {
            Src::Imm => src = 0,
            Src::Reg => imm = 0,
        },
        OpKind::Atomic { .. } => {}
        OpKind::Ja => {
            dst = 0;
            src = 0;
            imm = 0;
        }
        OpKind::JaLong => {
            dst = 0;
            src = 0;
            off = 0;
        }
        OpKind::Jmp { src: s, .. } => match s {
            Src::Imm => src = 0,
            Src::Reg => imm = 0,
        },
        _ => {}
    }
    op.insn(dst, src, off, imm)
}

struct Gen {
    alu: Vec<Opcode>,
    loads: Vec<Opcode>,
    stores: Vec<Opcode>,
    atomics: Vec<Opcode>,
    jmps: Vec<Opcode>,
}

/// r9 holds the memory block; r0..r8 are scalars; stack bytes -64..-1 are initialized.
const PROLOGUE: &str = "r9 = r1\n\
    r0 = *(u64 *)(r9 + 0)\nr1 = *(u64 *)(r9 + 8)\nr2 = *(u64 *)(r9 + 16)\nr3 = *(u32 *)(r9 + 24)\n\
    r4 = *(u16 *)(r9 + 28)\nr5 = *(u8 *)(r9 + 30)\nr6 = *(u64 *)(r9 + 32)\nr7 = *(u64 *)(r9 + 40)\nr8 = *(u64 *)(r9 + 48)\n\
    *(u64 *)(r10 - 8) = r0\n*(u64 *)(r10 - 16) = r1\n*(u64 *)(r10 - 24) = r2\n*(u64 *)(r10 - 32) = r3\n\
    *(u64 *)(r10 - 40) = r4\n*(u64 *)(r10 - 48) = r5\n*(u64 *)(r10 - 56) = r6\n*(u64 *)(r10 - 64) = r7\n";

const MAP_ITEM: &str = "*(u32 *)(r10 - 72) = KEY\nr1 = map_idx[0] ll\nr2 = r10\nr2 += -72\ncall map_lookup_elem\n\
    r3 = 0\nif r0 == 0 goto +3\nr3 = *(u64 *)(r0 + 0)\nr3 += 7\n*(u64 *)(r0 + 0) = r3\n\
    r0 = r3\nr1 = r3\nr2 = r3\nr2 ^= 5\nr4 = r3\nr4 *= 3\nr5 = r3\nr5 >>= 1\n";

impl Gen {
    fn new() -> Gen {
        Gen {
            alu: alu_ops(),
            loads: ops_of(|k| matches!(k, OpKind::Load { .. })),
            stores: ops_of(|k| matches!(k, OpKind::Store { .. })),
            atomics: ops_of(|k| matches!(k, OpKind::Atomic { .. })),
            jmps: ops_of(|k| matches!(k, OpKind::Jmp { .. } | OpKind::Ja | OpKind::JaLong)),
        }
    }

    /// One item (a few instructions); `dsts` are the registers it may write. Jumps are
    /// returned with their offset to be fixed to an item start.
    fn item(&self, rng: &mut StdRng, dsts: &[u8], map: bool) -> (Vec<Insn>, Option<usize>) {
        let dst = dsts[rng.gen_range(0..dsts.len())];
        let src = rng.gen_range(0..9u8);
        let imm = pick_imm(rng);
        let pick = |v: &Vec<Opcode>, rng: &mut StdRng| v[rng.gen_range(0..v.len())];
        match rng.gen_range(0..20) {
            0..=9 => {
                let op = pick(&self.alu, rng);
                let v = match op.kind() {
                    OpKind::Ld64(_) => {
                        vec![mk(op, dst, 0, 0, imm), Insn::new(0, 0, 0, 0, pick_imm(rng))]
                    }
                    _ => vec![mk(op, dst, src, 0, imm)],
                };
                (v, None)
            }
            10 | 11 => {
                // load from the stack or the block
                let op = pick(&self.loads, rng);
                let OpKind::Load { size, .. } = op.kind() else {
                    unreachable!()
                };
                let n = size.bytes() as i16;
                if rng.gen_bool(0.5) {
                    let off = -n * rng.gen_range(1..=64 / n);
                    (vec![mk(op, dst, 10, off, 0)], None)
                } else {
                    let off = n * rng.gen_range(0..MEM as i16 / n);
                    (vec![mk(op, dst, 9, off, 0)], None)
                }
            }
            12 | 13 => {
                let op = pick(&self.stores, rng);
                let OpKind::Store { size, src: s } = op.kind() else {
                    unreachable!()
                };
                let n = size.bytes() as i16;
                let (base, off) = if rng.gen_bool(0.5) {
                    (10, -n * rng.gen_range(1..=64 / n))
                } else {
                    (9, n * rng.gen_range(0..MEM as i16 / n))
                };
                let i = match s {
                    Src::Imm => mk(op, base, 0, off, imm),
                    Src::Reg => mk(op, base, src, off, 0),
                };
                (vec![i], None)
            }
            14 => {
                let op = pick(&self.atomics, rng);
                let OpKind::Atomic { size, .. } = op.kind() else {
                    unreachable!()
                };
                let n = if size == Size::W { 4 } else { 8 };
                let (base, off) = if rng.gen_bool(0.5) {
                    (10, -n * rng.gen_range(1..=64 / n))
                } else {
                    (9, n * rng.gen_range(0..MEM as i16 / n))
                };
                // fetch forms write src: keep it a scalar register we may write
                (vec![mk(op, base, dst, off, 0)], None)
            }
            15..=17 => {
                let op = pick(&self.jmps, rng);
                (
                    vec![mk(op, rng.gen_range(0..9), src, 0, imm)],
                    Some(rng.gen_range(1..=4)),
                )
            }
            _ if map => {
                let key = rng.gen_range(0..6);
                (
                    assemble(&MAP_ITEM.replace("KEY", &key.to_string())).unwrap(),
                    None,
                )
            }
            _ => (vec![Opcode::Exit.insn(0, 0, 0, 0)], None),
        }
    }

    fn program(&self, rng: &mut StdRng, name: &str) -> Program {
        let map = rng.gen_bool(0.3);
        let mut items: Vec<Vec<Insn>> = Vec::new();
        let mut jumps = Vec::new();
        let len = rng.gen_range(5..60);
        let all: Vec<u8> = (0..9).collect();
        for _ in 0..len {
            let (v, j) = self.item(rng, &all, map);
            if let Some(ahead) = j {
                jumps.push((items.len(), ahead));
            }
            items.push(v);
        }
        // A bounded loop on r8 over a few items that do not write r8.
        let mut body = Vec::new();
        if rng.gen_bool(0.4) {
            let trips = rng.gen_range(1..8);
            body.extend(assemble(&format!("r8 = {trips}")).unwrap());
            let top = body.len();
            for _ in 0..rng.gen_range(1..6) {
                let (v, j) = self.item(rng, &[0, 1, 2, 3, 4, 5, 6, 7], false);
                if j.is_none() && v[0].code != Opcode::Exit.insn(0, 0, 0, 0).code {
                    body.extend(v);
                }
            }
            body.extend(assemble("r8 += -1").unwrap());
            let back = body.len();
            let mut j = assemble("if r8 != 0 goto +0").unwrap();
            j[0].off = (top as i64 - back as i64 - 1) as i16;
            body.extend(j);
        }
        // Optional local call into a function of r1..r5 at the end.
        let call = rng.gen_bool(0.3);
        let mut insns = assemble(PROLOGUE).unwrap();
        let starts = {
            let mut at = insns.len();
            let mut s = Vec::new();
            for it in &items {
                s.push(at);
                at += it.len();
            }
            s.push(at);
            s
        };
        for &(i, ahead) in &jumps {
            let target = starts[(i + ahead).min(items.len())];
            let off = target as i64 - starts[i] as i64 - 1;
            let ins = &mut items[i][0];
            if Opcode::decode(ins).map(|o| o.kind()) == Ok(OpKind::JaLong) {
                ins.imm = off as i32;
            } else {
                ins.off = off as i16;
            }
        }
        for it in items {
            insns.extend(it);
        }
        insns.extend(body);
        let mut tail = String::new();
        for r in 1..9 {
            tail.push_str(&format!("r0 *= 1000003\nr0 ^= r{r}\n"));
        }
        if call {
            tail.push_str("r1 = r0\nr2 = r6\nr3 = r7\nr4 = 3\nr5 = r0\ncall f\nexit\nf:\nr0 = r1\nr0 *= r4\nr0 ^= r2\nr0 -= r3\n*(u64 *)(r10 - 8) = r0\nr5 = *(u64 *)(r10 - 8)\nr0 += r5\nexit\n");
        } else {
            tail.push_str("exit\n");
        }
        insns.extend(assemble(&tail).unwrap());
        let mut p = Program::from_insns(name, insns);
        if map {
            p.maps.push(MapDef {
                name: "m".into(),
                kind: MapKind::Array,
                key_size: 4,
                value_size: 8,
                max_entries: 4,
                flags: 0,
                origin: MapOrigin::Manual,
                init: None,
            });
        }
        p
    }
}

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

struct Outcome {
    r0: Result<u64, String>,
    mem: Vec<u8>,
    maps: Vec<Vec<(Vec<u8>, Vec<u8>)>>,
    insns: u64,
}

fn run(p: &Program, mem0: &[u8], jit: Option<&CpuJitOptions>) -> Outcome {
    let maps: Vec<Arc<dyn MapOps>> = p.maps.iter().map(|d| create_local(d, 1).unwrap()).collect();
    let vm = Vm::new(p, maps.clone()).expect("decodes");
    let mut mem = mem0.to_vec();
    let mut env = Env::new(0);
    let r0 = if let Some(opts) = jit {
        let c = jit::cpu::compile(&vm, opts)
            .unwrap_or_else(|e| panic!("compile failed: {e}\n{}", disasm(&p.insns)));
        c.run_mem(&vm, &mut mem, &mut env)
    } else {
        vm.run_mem(&mut mem, &mut env)
    };
    Outcome {
        r0: r0.map_err(|e| norm(&e)),
        mem,
        maps: maps.iter().map(|m| m.entries()).collect(),
        insns: env.last_insns,
    }
}

#[test]
fn jit_equals_interpreter_on_generated_programs() {
    let cases: usize = std::env::var("BPFTIME_JIT_DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    let seed: u64 = std::env::var("BPFTIME_JIT_DIFF_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed);
    let mut rng = StdRng::seed_from_u64(seed);
    let g = Gen::new();
    let opts = VerifyOptions {
        ctx: CtxKind::Mem { len: MEM },
        ..VerifyOptions::default()
    };
    let (mut compared, mut rejected, mut faults) = (0usize, 0usize, 0usize);
    let t = std::time::Instant::now();
    while compared < cases {
        let p = g.program(&mut rng, &format!("d{compared}"));
        if let Err(e) = verify(&p, &opts) {
            if rejected < 5 {
                eprintln!("cpu_diff: rejected: {e}");
            }
            rejected += 1;
            assert!(
                rejected < 20 * cases + 1000,
                "the generator makes too many rejected programs"
            );
            continue;
        }
        let mem0: Vec<u8> = (0..MEM).map(|_| rng.r#gen()).collect();
        let a = run(&p, &mem0, None);
        // Both JIT modes: every access checked, and trusting the verifier.
        for opts in [CpuJitOptions::default(), CpuJitOptions::verified()] {
            let b = run(&p, &mem0, Some(&opts));
            let show = || format!("{opts:?}\n{}", disasm(&p.insns));
            assert_eq!(a.r0, b.r0, "r0 differs\n{}", show());
            assert_eq!(a.mem, b.mem, "memory differs\n{}", show());
            assert_eq!(a.maps, b.maps, "maps differ\n{}", show());
            assert_eq!(a.insns, b.insns, "instruction counts differ\n{}", show());
        }
        faults += a.r0.is_err() as usize;
        compared += 1;
    }
    eprintln!(
        "cpu_diff: {compared} programs compared ({faults} ending in a run-time error), {rejected} rejected by the verifier, seed {seed}, {:.1} s",
        t.elapsed().as_secs_f64()
    );
}
