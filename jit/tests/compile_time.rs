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
    // Medians: the 2-core machine is shared, means follow the neighbours' load.
    let runs = if cfg!(debug_assertions) { 5 } else { 300 };
    let median = |f: &mut dyn FnMut() -> usize| {
        let mut t: Vec<std::time::Duration> = (0..runs)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect();
        t.sort();
        t[t.len() / 2]
    };
    let per = median(&mut || jit::compile(&p, &opts).unwrap().text().len());
    let lower = median(&mut || jit::compile(&p, &opts).unwrap().module().functions.len());
    let m = jit::compile(&p, &opts).unwrap();
    let print = median(&mut || m.text().len());
    eprintln!("compile only (no printing): {lower:?}");
    eprintln!("printing only: {print:?}");
    eprintln!(
        "compile + print of 4096 insns: {per:?} median of {runs} ({} bytes of PTX)",
        m.text().len()
    );
    if !cfg!(debug_assertions) {
        // The 2-core build machine is shared: the bound leaves room for noise.
        assert!(per.as_millis() <= 3, "compile took {per:?}, target 1 ms");
    }
}
