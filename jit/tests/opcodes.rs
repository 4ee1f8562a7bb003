//! Every opcode of `Opcode::ALL` in a small program goes through the JIT, and the PTX
//! assembles with ptxas.

mod common;

use ebpf::isa::{Insn, OpKind, Opcode};
use ebpf::program::{MapDef, MapKind, MapOrigin, Program};
use jit::{JitOptions, MapBinding};

/// A program exercising `op`: r1..r9 set, a stack slot as the memory operand, then exit.
fn program_for(op: Opcode) -> Option<Program> {
    let mut insns = Vec::new();
    // r1 = r10 - 16 (an aligned stack pointer), r2..r9 = small values, r0 = 7.
    insns.push(Opcode::Mov64Reg.insn(1, 10, 0, 0));
    insns.push(Opcode::Add64Imm.insn(1, 0, 0, -16));
    for r in 2..=9u8 {
        insns.push(Opcode::Mov64Imm.insn(r, 0, 0, r as i32 * 3));
    }
    insns.push(Opcode::Mov64Imm.insn(0, 0, 0, 7));
    let mut maps = Vec::new();
    match op.kind() {
        OpKind::Ld64(k) => {
            use ebpf::isa::Ld64Kind::*;
            match k {
                Imm => insns.push(op.insn(3, 0, 0, 0x1234_5678)),
                MapIdx | MapIdxValue => {
                    maps.push(MapDef {
                        name: "m".into(),
                        kind: MapKind::Array,
                        key_size: 4,
                        value_size: 8,
                        max_entries: 4,
                        flags: 0,
                        origin: MapOrigin::Manual,
                        init: None,
                    });
                    insns.push(op.insn(3, 0, 0, 0));
                }
                MapFd | MapValue | VarAddr | CodeAddr => return None,
            }
            insns.push(Insn::new(0, 0, 0, 0, 1));
        }
        OpKind::Load { .. } | OpKind::Store { .. } | OpKind::Atomic { .. } => {
            insns.push(op.insn(1, 2, 0, 0));
            // Memory ops: dst/src swapped for loads (dst = *(src + off)).
            if matches!(op.kind(), OpKind::Load { .. }) {
                let l = insns.len() - 1;
                insns[l] = op.insn(2, 1, 0, 0);
            }
        }
        OpKind::Ja | OpKind::Jmp { .. } => {
            insns.push(op.insn(2, 3, 1, 5));
            insns.push(Opcode::Mov64Imm.insn(0, 0, 0, 1));
        }
        OpKind::JaLong => {
            let mut i = op.insn(0, 0, 0, 0);
            i.imm = 1;
            insns.push(i);
            insns.push(Opcode::Mov64Imm.insn(0, 0, 0, 1));
        }
        OpKind::Call => {
            let mut i = op.insn(0, 0, 0, 0);
            i.imm = ebpf::helpers::KTIME_GET_NS;
            insns.push(i);
        }
        OpKind::Callx => {
            // The id in r4, set on the same stretch: the static call.
            insns.push(Opcode::Mov64Imm.insn(4, 0, 0, ebpf::helpers::KTIME_GET_NS));
            insns.push(op.insn(4, 0, 0, 0));
        }
        OpKind::CallLocal => {
            let mut i = op.insn(0, 0, 0, 0);
            i.imm = 1;
            insns.push(i);
            insns.push(Opcode::Exit.insn(0, 0, 0, 0));
            insns.push(Opcode::Mov64Imm.insn(0, 0, 0, 9));
        }
        OpKind::CallKfunc => return None,
        OpKind::Alu { .. } | OpKind::End { .. } | OpKind::Exit => {
            insns.push(op.insn(2, 3, 0, 5));
        }
    }
    insns.push(Opcode::Exit.insn(0, 0, 0, 0));
    let mut p = Program::from_insns(&format!("{op:?}"), insns);
    p.maps = maps;
    Some(p)
}

fn opts_for(p: &Program) -> JitOptions {
    JitOptions {
        maps: p
            .maps
            .iter()
            .enumerate()
            .map(|(i, d)| MapBinding::for_def(d, 0x7000_0000_0000 + 0x10_0000 * i as u64, 1))
            .collect(),
        ..JitOptions::default()
    }
}

#[test]
fn every_opcode_compiles_and_assembles() {
    let mut count = 0;
    let mut all = Vec::new();
    for &op in Opcode::ALL {
        let Some(p) = program_for(op) else {
            // The unsupported forms must be clean errors, never panics.
            let mut insns = vec![op.insn(1, 0, 0, 0)];
            if op.is_wide() {
                insns.push(Insn::new(0, 0, 0, 0, 0));
            }
            insns.push(Opcode::Exit.insn(0, 0, 0, 0));
            let p = Program::from_insns("bad", insns);
            let e = jit::compile(&p, &JitOptions::default()).unwrap_err();
            assert!(
                matches!(e, jit::CompileError::Unsupported { .. }),
                "{op:?}: {e}"
            );
            continue;
        };
        let m = jit::compile(&p, &opts_for(&p)).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        let text = m.text();
        assert!(text.contains(".entry bpf_entry_"), "{op:?}");
        assert!(text.contains(&format!(
            ".visible .func (.param .b64 ret0) bpf_prog_{op:?}"
        )));
        all.push(text);
        // Again with byte-split memory accesses.
        let mut pu = p.clone();
        pu.name = format!("{op:?}_u");
        let ou = JitOptions {
            unaligned: true,
            ..opts_for(&p)
        };
        all.push(jit::compile(&pu, &ou).unwrap().text());
        count += 1;
    }
    // CallKfunc and the four fd/BTF forms of ld_imm64 are the unsupported ones.
    assert_eq!(count, Opcode::ALL.len() - 5, "{count} opcodes compiled");
    common::assemble(&common::merge(&all), "all_opcodes");
}
