//! Random straight-line programs always give PTX that ptxas accepts. The cases of one run
//! are batched into one module (one ptxas call).

mod common;

use ebpf::isa::{Insn, OpKind, Opcode, Src};
use ebpf::program::Program;
use jit::JitOptions;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Straight-line ALU, byte-order and stack memory instructions on r0..r9.
fn arb_insn() -> impl Strategy<Value = Insn> {
    let ops: Vec<Opcode> = Opcode::ALL
        .iter()
        .copied()
        .filter(|op| {
            matches!(
                op.kind(),
                OpKind::Alu { .. }
                    | OpKind::End { .. }
                    | OpKind::Load { .. }
                    | OpKind::Store { .. }
                    | OpKind::Atomic { .. }
            )
        })
        .collect();
    (
        prop::sample::select(ops),
        0u8..10,
        0u8..10,
        any::<i32>(),
        0i16..64,
    )
        .prop_map(|(op, dst, src, imm, slot)| match op.kind() {
            // Memory: r10-relative, 8-aligned stack slots.
            OpKind::Load { .. } => op.insn(dst, 10, -8 * (slot % 8 + 1), imm),
            OpKind::Store { src: Src::Imm, .. } => op.insn(10, 0, -8 * (slot % 8 + 1), imm),
            OpKind::Store { .. } | OpKind::Atomic { .. } => {
                op.insn(10, src, -8 * (slot % 8 + 1), imm)
            }
            _ => op.insn(dst, src, 0, imm),
        })
}

#[test]
fn random_straight_line_programs_assemble() {
    let mut runner = TestRunner::new(Config {
        cases: 64,
        ..Config::default()
    });
    let modules = std::cell::RefCell::new(Vec::new());
    runner
        .run(&prop::collection::vec(arb_insn(), 1..40), |mut insns| {
            insns.push(Opcode::Exit.insn(0, 0, 0, 0));
            let name = format!("rand{}", modules.borrow().len());
            let p = Program::from_insns(&name, insns);
            let m = jit::compile(&p, &JitOptions::default())
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            modules.borrow_mut().push(m.text());
            Ok(())
        })
        .unwrap();
    let modules = modules.into_inner();
    assert!(modules.len() >= 64);
    common::assemble(&common::merge(&modules), "proptest_batch");
}
