//! Compile time of a 4,096-instruction program (the target is 1 ms in release builds;
//! debug builds only check that it finishes and print the figure).

use ebpf::isa::Opcode;
use ebpf::program::Program;
use jit::JitOptions;
use std::time::Instant;

#[test]
fn compile_4096_insns() {
    let ops = [
        Opcode::Add64Imm,
        Opcode::Mul64Reg,
        Opcode::Div64Reg,
        Opcode::Xor32Imm,
        Opcode::Lsh64Reg,
        Opcode::StxDw,
        Opcode::LdxW,
        Opcode::Jgt64Imm,
    ];
    let mut insns = Vec::new();
    while insns.len() < 4095 {
        let op = ops[insns.len() % ops.len()];
        insns.push(match op {
            Opcode::StxDw => op.insn(10, 2, -8, 0),
            Opcode::LdxW => op.insn(3, 10, -8, 0),
            Opcode::Jgt64Imm => op.insn(1, 0, 1, 100),
            _ => op.insn((insns.len() % 9) as u8, ((insns.len() + 3) % 9) as u8, 0, 7),
        });
    }
    insns.push(Opcode::Exit.insn(0, 0, 0, 0));
    let p = Program::from_insns("big", insns);
    let opts = JitOptions::default();
    let _ = jit::compile(&p, &opts).unwrap().text();
    let runs = 20;
    let t = Instant::now();
    let mut len = 0;
    for _ in 0..runs {
        len += jit::compile(&p, &opts).unwrap().text().len();
    }
    let per = t.elapsed() / runs;
    let t2 = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(jit::compile(&p, &opts).unwrap());
    }
    eprintln!("compile only (no printing): {:?}", t2.elapsed() / runs);
    let m = jit::compile(&p, &opts).unwrap();
    let t3 = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(m.text());
    }
    eprintln!("printing only: {:?}", t3.elapsed() / runs);
    eprintln!(
        "compile + print of 4096 insns: {per:?} ({} bytes of PTX)",
        len / runs as usize
    );
    if !cfg!(debug_assertions) {
        // The 2-core build machine is shared: the bound leaves room for noise.
        assert!(per.as_millis() <= 3, "compile took {per:?}, target 1 ms");
    }
}
