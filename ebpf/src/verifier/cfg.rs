//! The structural pass, run before any abstract interpretation.
//!
//! | check                                   | example message                                  |
//! |-----------------------------------------|--------------------------------------------------|
//! | every slot decodes                      | `unknown opcode 0x00`                            |
//! | reserved fields are zero                | `reserved field src must be 0, found 3`          |
//! | registers r0..r10, r10 read-only        | `invalid register r12`, `frame pointer r10 is read-only` |
//! | `ld_imm64` has its second slot          | `ld_imm64 second slot must have code 0`          |
//! | only index forms of `ld_imm64`          | `ld_imm64 with src=1 (map by fd) is not supported` |
//! | map indices in range                    | `map index 3 out of range`                       |
//! | helpers exist, no kfuncs                | `unknown helper 4`                               |
//! | no division or modulo by the immediate 0 | `div by zero: division by the immediate 0`       |
//! | jumps land on instructions              | `jump out of range`, `jump into the middle of ld_imm64` |
//! | no fall-through off the end / into the next function, no jump across functions |  |
//!
//! It also finds the functions (slot 0 and every `call pc+N` target), the prune points
//! (jump targets, the slot after a conditional jump, call return sites, function entries)
//! and register liveness per slot (for state comparison).

use super::{ErrorKind, Fail};
use crate::helpers;
use crate::isa::{AluOp, AtomicOp, Discr, Insn, Ld64Kind, OpKind, Opcode, Src};
use crate::program::Program;

/// Result of the structural pass.
pub struct Cfg {
    /// Decoded opcode per slot (`None` for the second slot of `ld_imm64`).
    pub ops: Vec<Option<Opcode>>,
    /// Function entry pcs, sorted; the main function first.
    pub funcs: Vec<usize>,
    /// Function index per slot.
    pub func_of: Vec<usize>,
    /// Whether states are checkpointed at this pc.
    pub prune: Vec<bool>,
    /// Registers live on entry to each pc (bit `r`): read on some path before being
    /// written. Dead registers are ignored when comparing states.
    pub live: Vec<u16>,
}

fn fail(pc: usize, msg: impl Into<String>) -> Fail {
    Fail {
        pc,
        kind: ErrorKind::Structure,
        msg: msg.into(),
    }
}

fn reserved(pc: usize, field: &str, value: i64) -> Result<(), Fail> {
    if value != 0 {
        return Err(fail(
            pc,
            format!("reserved field {field} must be 0, found {value}"),
        ));
    }
    Ok(())
}

fn check_fields(pc: usize, insn: &Insn, op: Opcode) -> Result<(), Fail> {
    let info = op.info();
    let off_free = matches!(info.discr, Discr::Any);
    match op.kind() {
        OpKind::Alu { op: aop, src, .. } => {
            if off_free {
                reserved(pc, "off", insn.off as i64)?;
            }
            match src {
                Src::Imm => reserved(pc, "src", insn.src as i64)?,
                Src::Reg => reserved(pc, "imm", insn.imm as i64)?,
            }
            if aop == crate::isa::AluOp::Neg {
                reserved(pc, "imm", insn.imm as i64)?;
            }
            // As in Linux (`check_alu_op`): a constant divisor of 0 is a load-time error; a
            // register divisor keeps the run-time rule (x / 0 = 0, x % 0 = x).
            if src == Src::Imm
                && insn.imm == 0
                && matches!(aop, AluOp::Div | AluOp::Sdiv | AluOp::Mod | AluOp::Smod)
            {
                let what = if matches!(aop, AluOp::Div | AluOp::Sdiv) {
                    "division"
                } else {
                    "modulo"
                };
                return Err(fail(pc, format!("div by zero: {what} by the immediate 0")));
            }
        }
        OpKind::End { .. } => {
            reserved(pc, "src", insn.src as i64)?;
            reserved(pc, "off", insn.off as i64)?;
        }
        OpKind::Ld64(_) => reserved(pc, "off", insn.off as i64)?,
        OpKind::Load { .. } => reserved(pc, "imm", insn.imm as i64)?,
        OpKind::Store { src, .. } => match src {
            Src::Imm => reserved(pc, "src", insn.src as i64)?,
            Src::Reg => reserved(pc, "imm", insn.imm as i64)?,
        },
        OpKind::Atomic { .. } => {}
        OpKind::Ja => {
            reserved(pc, "dst", insn.dst as i64)?;
            reserved(pc, "src", insn.src as i64)?;
            reserved(pc, "imm", insn.imm as i64)?;
        }
        OpKind::JaLong => {
            reserved(pc, "dst", insn.dst as i64)?;
            reserved(pc, "src", insn.src as i64)?;
            reserved(pc, "off", insn.off as i64)?;
        }
        OpKind::Jmp { src, .. } => match src {
            Src::Imm => reserved(pc, "src", insn.src as i64)?,
            Src::Reg => reserved(pc, "imm", insn.imm as i64)?,
        },
        OpKind::Call | OpKind::CallLocal | OpKind::CallKfunc => {
            reserved(pc, "dst", insn.dst as i64)?;
            reserved(pc, "off", insn.off as i64)?;
        }
        OpKind::Callx => {
            reserved(pc, "src", insn.src as i64)?;
            reserved(pc, "off", insn.off as i64)?;
            reserved(pc, "imm", insn.imm as i64)?;
        }
        OpKind::Exit => {
            reserved(pc, "dst", insn.dst as i64)?;
            reserved(pc, "src", insn.src as i64)?;
            reserved(pc, "off", insn.off as i64)?;
            reserved(pc, "imm", insn.imm as i64)?;
        }
    }
    Ok(())
}

/// Which register an instruction writes, if any (besides r0 of calls).
fn written_reg(insn: &Insn, op: Opcode) -> Option<u8> {
    match op.kind() {
        OpKind::Alu { .. } | OpKind::End { .. } | OpKind::Ld64(_) | OpKind::Load { .. } => {
            Some(insn.dst)
        }
        OpKind::Atomic { fetch: true, .. } => Some(insn.src),
        _ => None,
    }
}

fn can_fall_through(insn: &Insn, op: Opcode) -> bool {
    match op.kind() {
        OpKind::Exit | OpKind::Ja | OpKind::JaLong => false,
        OpKind::Call => !helpers::proto(insn.imm).is_some_and(|p| p.terminates),
        _ => true,
    }
}

/// Runs the structural pass.
pub fn analyze(prog: &Program) -> Result<Cfg, Fail> {
    let insns = &prog.insns;
    let n = insns.len();
    if n == 0 {
        return Err(fail(0, "empty program: expected at least an exit"));
    }
    let mut ops: Vec<Option<Opcode>> = vec![None; n];
    let mut middle = vec![false; n];
    let mut pc = 0;
    while pc < n {
        let insn = &insns[pc];
        let op = Opcode::decode(insn).map_err(|e| fail(pc, e.to_string()))?;
        for (name, r) in [("dst", insn.dst), ("src", insn.src)] {
            if r > 10 {
                return Err(fail(
                    pc,
                    format!("invalid register r{r} in {name} (expected r0..r10)"),
                ));
            }
        }
        check_fields(pc, insn, op)?;
        if written_reg(insn, op) == Some(10) {
            return Err(fail(pc, "frame pointer r10 is read-only"));
        }
        ops[pc] = Some(op);
        if let OpKind::Ld64(kind) = op.kind() {
            let Some(next) = insns.get(pc + 1) else {
                return Err(fail(
                    pc,
                    "ld_imm64 in the last slot: missing its second slot",
                ));
            };
            if next.code != 0 || next.dst != 0 || next.src != 0 || next.off != 0 {
                return Err(fail(
                    pc,
                    format!(
                        "ld_imm64 second slot must have code, dst, src and off 0, found code {:#04x}",
                        next.code
                    ),
                ));
            }
            match kind {
                Ld64Kind::Imm | Ld64Kind::CodeAddr => {}
                Ld64Kind::MapIdx | Ld64Kind::MapIdxValue => {
                    let idx = insn.imm as u32 as usize;
                    if idx >= prog.maps.len() {
                        return Err(fail(
                            pc,
                            format!(
                                "map index {idx} out of range (program has {} maps)",
                                prog.maps.len()
                            ),
                        ));
                    }
                }
                Ld64Kind::MapFd => {
                    return Err(fail(
                        pc,
                        "ld_imm64 with src=1 (map by fd) is not supported: relocate maps into index form (src=5) first",
                    ));
                }
                Ld64Kind::MapValue => {
                    return Err(fail(
                        pc,
                        "ld_imm64 with src=2 (map value by fd) is not supported: relocate into index form (src=6) first",
                    ));
                }
                Ld64Kind::VarAddr => {
                    return Err(fail(
                        pc,
                        "ld_imm64 with src=3 (BTF variable address) is not supported",
                    ));
                }
            }
            middle[pc + 1] = true;
            pc += 2;
        } else {
            match op.kind() {
                OpKind::Call if helpers::proto(insn.imm).is_none() => {
                    return Err(fail(pc, format!("unknown helper {}", insn.imm)));
                }
                OpKind::CallKfunc => {
                    return Err(fail(
                        pc,
                        format!("kfunc calls are not supported (btf id {})", insn.imm),
                    ));
                }
                _ => {}
            }
            pc += 1;
        }
    }

    // Jump targets and functions.
    let target_of = |pc: usize, rel: i64| -> Result<usize, Fail> {
        let t = pc as i64 + rel + 1;
        if t < 0 || t >= n as i64 {
            return Err(fail(
                pc,
                format!("jump out of range: target {t}, program has {n} slots"),
            ));
        }
        if middle[t as usize] {
            return Err(fail(
                pc,
                format!("jump into the middle of ld_imm64 at {}", t - 1),
            ));
        }
        Ok(t as usize)
    };
    let mut funcs = vec![0usize];
    let mut prune = vec![false; n];
    let mut jumps = Vec::new();
    for pc in 0..n {
        let Some(op) = ops[pc] else { continue };
        let insn = &insns[pc];
        match op.kind() {
            OpKind::Ja => {
                let t = target_of(pc, insn.off as i64)?;
                prune[t] = true;
                jumps.push((pc, t));
            }
            OpKind::JaLong => {
                let t = target_of(pc, insn.imm as i64)?;
                prune[t] = true;
                jumps.push((pc, t));
            }
            OpKind::Jmp { .. } => {
                let t = target_of(pc, insn.off as i64)?;
                prune[t] = true;
                jumps.push((pc, t));
                if pc + 1 < n {
                    prune[pc + 1] = true;
                }
            }
            OpKind::CallLocal => {
                let t = target_of(pc, insn.imm as i64)?;
                funcs.push(t);
                prune[t] = true;
                if pc + 1 < n {
                    prune[pc + 1] = true;
                }
            }
            OpKind::Ld64(Ld64Kind::CodeAddr) => {
                let t = target_of(pc, insn.imm as i64)?;
                funcs.push(t);
            }
            _ => {}
        }
        if can_fall_through(insn, op) {
            let next = if op.is_wide() { pc + 2 } else { pc + 1 };
            if next >= n {
                return Err(fail(
                    pc,
                    "falls off the end of the program: expected exit or jump",
                ));
            }
        }
    }
    funcs.sort_unstable();
    funcs.dedup();
    let mut func_of = vec![0usize; n];
    for (i, &start) in funcs.iter().enumerate() {
        let end = funcs.get(i + 1).copied().unwrap_or(n);
        for f in &mut func_of[start..end] {
            *f = i;
        }
    }
    for &(pc, t) in &jumps {
        if func_of[pc] != func_of[t] {
            return Err(fail(
                pc,
                format!(
                    "jump from function at {} to {t} crosses into function at {}",
                    funcs[func_of[pc]], funcs[func_of[t]]
                ),
            ));
        }
    }
    for &start in funcs.iter().skip(1) {
        // The slot before a function entry must not fall into it.
        let mut p = start - 1;
        if middle[p] {
            p -= 1;
        }
        if let Some(op) = ops[p]
            && can_fall_through(&insns[p], op)
        {
            return Err(fail(p, format!("falls through into function at {start}")));
        }
        prune[start] = true;
    }
    let live = liveness(insns, &ops);
    Ok(Cfg {
        ops,
        funcs,
        func_of,
        prune,
        live,
    })
}

/// Registers an instruction reads and writes, as bit masks.
fn use_def(insn: &Insn, op: Opcode) -> (u16, u16) {
    let d = 1u16 << insn.dst;
    let s = 1u16 << insn.src;
    let args = 0b11_1110u16;
    match op.kind() {
        OpKind::Alu { op, src, .. } => {
            let reads_dst = !matches!(
                op,
                AluOp::Mov | AluOp::Movsx8 | AluOp::Movsx16 | AluOp::Movsx32
            );
            let mut u = if reads_dst { d } else { 0 };
            if src == Src::Reg {
                u |= s;
            }
            (u, d)
        }
        OpKind::End { .. } => (d, d),
        OpKind::Ld64(_) => (0, d),
        OpKind::Load { .. } => (s, d),
        OpKind::Store { src, .. } => (if src == Src::Reg { d | s } else { d }, 0),
        OpKind::Atomic { op, fetch, .. } => {
            if op == AtomicOp::Cmpxchg {
                (d | s | 1, 1)
            } else if fetch {
                (d | s, s)
            } else {
                (d | s, 0)
            }
        }
        OpKind::Ja | OpKind::JaLong => (0, 0),
        OpKind::Jmp { src, .. } => (if src == Src::Reg { d | s } else { d }, 0),
        OpKind::Call => {
            let mut u = 0;
            if let Some(p) = helpers::proto(insn.imm) {
                for (i, a) in p.args.iter().enumerate() {
                    if *a != helpers::ArgType::None {
                        u |= 1 << (i + 1);
                    }
                }
            }
            (u, args | 1)
        }
        // Which helper `callx` calls is only known to the exploration: any argument may be
        // read (more live registers only make state comparison stricter).
        OpKind::Callx => (args | d, args | 1),
        OpKind::CallLocal | OpKind::CallKfunc => (args, args | 1),
        OpKind::Exit => (1, 0),
    }
}

/// Backward liveness over all slots (each function on its own; a call reads r1..r5).
fn liveness(insns: &[Insn], ops: &[Option<Opcode>]) -> Vec<u16> {
    let n = insns.len();
    let mut live = vec![0u16; n];
    let fp = 1u16 << 10;
    let mut changed = true;
    while changed {
        changed = false;
        for pc in (0..n).rev() {
            let Some(op) = ops[pc] else { continue };
            let insn = &insns[pc];
            let next = if op.is_wide() { pc + 2 } else { pc + 1 };
            let get = |t: usize| live.get(t).copied().unwrap_or(0);
            let target = |rel: i64| (pc as i64 + rel + 1) as usize;
            let out = match op.kind() {
                OpKind::Exit => 0,
                OpKind::Ja => get(target(insn.off as i64)),
                OpKind::JaLong => get(target(insn.imm as i64)),
                OpKind::Jmp { .. } => get(next) | get(target(insn.off as i64)),
                OpKind::Call if helpers::proto(insn.imm).is_some_and(|p| p.terminates) => 0,
                _ => get(next),
            };
            let (u, d) = use_def(insn, op);
            let inn = u | (out & !d) | fp;
            if inn != live[pc] {
                live[pc] = inn;
                changed = true;
            }
        }
    }
    live
}
