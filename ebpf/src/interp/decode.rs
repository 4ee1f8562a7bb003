//! One-time decoding of a program into the interpreter's compact slot form.
//!
//! Each instruction slot becomes a [`Slot`]: an internal [`Op`] (operation, width and operand
//! source folded into one byte), registers, a memory offset or absolute jump target, and a
//! pre-extended 64-bit immediate (the full value for `ld_imm64`, map handles and global-data
//! addresses included). Slot indices equal instruction pcs; the second half of a `ld_imm64`
//! and one sentinel past the end decode to [`Op::Fault`].

use super::{ExecError, MAP_HANDLE_BASE, make_error};
use crate::helpers;
use crate::isa::{AluOp, AtomicOp, EndOp, JmpCond, Ld64Kind, OpKind, Opcode, Size, Src, Width};
use crate::maps::MapOps;
use crate::program::{MapKind, Program};
use std::sync::Arc;

/// Internal operations. `I`/`R` suffix: immediate or register operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[allow(missing_docs)]
pub(crate) enum Op {
    Add64I,
    Add64R,
    Sub64I,
    Sub64R,
    Mul64I,
    Mul64R,
    Div64I,
    Div64R,
    Sdiv64I,
    Sdiv64R,
    Or64I,
    Or64R,
    And64I,
    And64R,
    Lsh64I,
    Lsh64R,
    Rsh64I,
    Rsh64R,
    Neg64,
    Mod64I,
    Mod64R,
    Smod64I,
    Smod64R,
    Xor64I,
    Xor64R,
    Mov64I,
    Mov64R,
    Movsx8to64,
    Movsx16to64,
    Movsx32to64,
    Arsh64I,
    Arsh64R,
    Add32I,
    Add32R,
    Sub32I,
    Sub32R,
    Mul32I,
    Mul32R,
    Div32I,
    Div32R,
    Sdiv32I,
    Sdiv32R,
    Or32I,
    Or32R,
    And32I,
    And32R,
    Lsh32I,
    Lsh32R,
    Rsh32I,
    Rsh32R,
    Neg32,
    Mod32I,
    Mod32R,
    Smod32I,
    Smod32R,
    Xor32I,
    Xor32R,
    Mov32I,
    Mov32R,
    Movsx8to32,
    Movsx16to32,
    Arsh32I,
    Arsh32R,
    Trunc16,
    Trunc32,
    Swap16,
    Swap32,
    Swap64,
    Nop,
    LdImm64,
    Ldx8,
    Ldx16,
    Ldx32,
    Ldx64,
    Ldxs8,
    Ldxs16,
    Ldxs32,
    St8,
    St16,
    St32,
    St64,
    Stx8,
    Stx16,
    Stx32,
    Stx64,
    Atomic32,
    Atomic64,
    Ja,
    Jeq64I,
    Jeq64R,
    Jgt64I,
    Jgt64R,
    Jge64I,
    Jge64R,
    Jset64I,
    Jset64R,
    Jne64I,
    Jne64R,
    Jsgt64I,
    Jsgt64R,
    Jsge64I,
    Jsge64R,
    Jlt64I,
    Jlt64R,
    Jle64I,
    Jle64R,
    Jslt64I,
    Jslt64R,
    Jsle64I,
    Jsle64R,
    Jeq32I,
    Jeq32R,
    Jgt32I,
    Jgt32R,
    Jge32I,
    Jge32R,
    Jset32I,
    Jset32R,
    Jne32I,
    Jne32R,
    Jsgt32I,
    Jsgt32R,
    Jsge32I,
    Jsge32R,
    Jlt32I,
    Jlt32R,
    Jle32I,
    Jle32R,
    Jslt32I,
    Jslt32R,
    Jsle32I,
    Jsle32R,
    Call,
    /// `callx`: the helper id is the value of `dst`.
    Callx,
    CallLocal,
    Exit,
    /// Never executable: the second half of `ld_imm64`, or the end of the program.
    Fault,
}

/// Atomic sub-operation codes stored in [`Slot::aux`].
pub(crate) mod aop {
    pub const ADD: u8 = 0;
    pub const OR: u8 = 1;
    pub const AND: u8 = 2;
    pub const XOR: u8 = 3;
    pub const XCHG: u8 = 4;
    pub const CMPXCHG: u8 = 5;
    pub const FETCH: u8 = 0x80;
}

/// One predecoded instruction slot (16 bytes).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(crate) struct Slot {
    pub op: Op,
    pub dst: u8,
    pub src: u8,
    /// Atomic sub-operation ([`aop`]); 0 otherwise.
    pub aux: u8,
    /// Memory offset, or absolute target pc of a jump or local call.
    pub off: i32,
    /// Sign-extended immediate; the full value of `ld_imm64`; the helper id of `call`
    /// (`callx` reads it from `dst`).
    pub imm: u64,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 16);

fn alu_op(op: AluOp, width: Width, src: Src) -> Op {
    use Op::*;
    let r = src == Src::Reg;
    macro_rules! pick {
        ($i:ident, $r:ident) => {
            if r { $r } else { $i }
        };
    }
    match (width, op) {
        (Width::W64, AluOp::Add) => pick!(Add64I, Add64R),
        (Width::W64, AluOp::Sub) => pick!(Sub64I, Sub64R),
        (Width::W64, AluOp::Mul) => pick!(Mul64I, Mul64R),
        (Width::W64, AluOp::Div) => pick!(Div64I, Div64R),
        (Width::W64, AluOp::Sdiv) => pick!(Sdiv64I, Sdiv64R),
        (Width::W64, AluOp::Or) => pick!(Or64I, Or64R),
        (Width::W64, AluOp::And) => pick!(And64I, And64R),
        (Width::W64, AluOp::Lsh) => pick!(Lsh64I, Lsh64R),
        (Width::W64, AluOp::Rsh) => pick!(Rsh64I, Rsh64R),
        (Width::W64, AluOp::Neg) => Neg64,
        (Width::W64, AluOp::Mod) => pick!(Mod64I, Mod64R),
        (Width::W64, AluOp::Smod) => pick!(Smod64I, Smod64R),
        (Width::W64, AluOp::Xor) => pick!(Xor64I, Xor64R),
        (Width::W64, AluOp::Mov) => pick!(Mov64I, Mov64R),
        (Width::W64, AluOp::Movsx8) => Movsx8to64,
        (Width::W64, AluOp::Movsx16) => Movsx16to64,
        (Width::W64, AluOp::Movsx32) => Movsx32to64,
        (Width::W64, AluOp::Arsh) => pick!(Arsh64I, Arsh64R),
        (Width::W32, AluOp::Add) => pick!(Add32I, Add32R),
        (Width::W32, AluOp::Sub) => pick!(Sub32I, Sub32R),
        (Width::W32, AluOp::Mul) => pick!(Mul32I, Mul32R),
        (Width::W32, AluOp::Div) => pick!(Div32I, Div32R),
        (Width::W32, AluOp::Sdiv) => pick!(Sdiv32I, Sdiv32R),
        (Width::W32, AluOp::Or) => pick!(Or32I, Or32R),
        (Width::W32, AluOp::And) => pick!(And32I, And32R),
        (Width::W32, AluOp::Lsh) => pick!(Lsh32I, Lsh32R),
        (Width::W32, AluOp::Rsh) => pick!(Rsh32I, Rsh32R),
        (Width::W32, AluOp::Neg) => Neg32,
        (Width::W32, AluOp::Mod) => pick!(Mod32I, Mod32R),
        (Width::W32, AluOp::Smod) => pick!(Smod32I, Smod32R),
        (Width::W32, AluOp::Xor) => pick!(Xor32I, Xor32R),
        (Width::W32, AluOp::Mov) => pick!(Mov32I, Mov32R),
        (Width::W32, AluOp::Movsx8) => Movsx8to32,
        (Width::W32, AluOp::Movsx16) => Movsx16to32,
        // Not in the table (the RFC has no 32-bit movsx from 32 bits); plain move.
        (Width::W32, AluOp::Movsx32) => Mov32R,
        (Width::W32, AluOp::Arsh) => pick!(Arsh32I, Arsh32R),
    }
}

fn jmp_op(cond: JmpCond, width: Width, src: Src) -> Op {
    use Op::*;
    let r = src == Src::Reg;
    let w64 = width == Width::W64;
    macro_rules! pick {
        ($i64:ident, $r64:ident, $i32:ident, $r32:ident) => {
            match (w64, r) {
                (true, false) => $i64,
                (true, true) => $r64,
                (false, false) => $i32,
                (false, true) => $r32,
            }
        };
    }
    match cond {
        JmpCond::Eq => pick!(Jeq64I, Jeq64R, Jeq32I, Jeq32R),
        JmpCond::Gt => pick!(Jgt64I, Jgt64R, Jgt32I, Jgt32R),
        JmpCond::Ge => pick!(Jge64I, Jge64R, Jge32I, Jge32R),
        JmpCond::Set => pick!(Jset64I, Jset64R, Jset32I, Jset32R),
        JmpCond::Ne => pick!(Jne64I, Jne64R, Jne32I, Jne32R),
        JmpCond::Sgt => pick!(Jsgt64I, Jsgt64R, Jsgt32I, Jsgt32R),
        JmpCond::Sge => pick!(Jsge64I, Jsge64R, Jsge32I, Jsge32R),
        JmpCond::Lt => pick!(Jlt64I, Jlt64R, Jlt32I, Jlt32R),
        JmpCond::Le => pick!(Jle64I, Jle64R, Jle32I, Jle32R),
        JmpCond::Slt => pick!(Jslt64I, Jslt64R, Jslt32I, Jslt32R),
        JmpCond::Sle => pick!(Jsle64I, Jsle64R, Jsle32I, Jsle32R),
    }
}

/// Decodes `prog` against its live maps.
pub(crate) fn decode(prog: &Program, maps: &[Arc<dyn MapOps>]) -> Result<Vec<Slot>, ExecError> {
    let insns = &prog.insns;
    let n = insns.len();
    let err = |pc: usize, msg: String| make_error(prog, pc, msg);
    if n == 0 {
        return Err(err(0, "empty program".into()));
    }
    if n > i32::MAX as usize / 2 {
        return Err(err(0, format!("program of {n} slots is too large")));
    }
    if maps.len() != prog.maps.len() {
        return Err(err(
            0,
            format!(
                "program declares {} maps but {} live maps were bound",
                prog.maps.len(),
                maps.len()
            ),
        ));
    }
    let fault = Slot {
        op: Op::Fault,
        dst: 0,
        src: 0,
        aux: 0,
        off: 0,
        imm: 0,
    };
    let mut code = vec![fault; n + 1];
    // Slots that are the second half of a ld_imm64: not valid jump targets.
    let mut second_half = vec![false; n + 1];
    let mut jumps: Vec<(usize, i64)> = Vec::new();
    let mut pc = 0;
    while pc < n {
        let insn = insns[pc];
        let op = Opcode::decode(&insn).map_err(|e| err(pc, e.to_string()))?;
        if insn.dst > 10 || insn.src > 10 {
            return Err(err(
                pc,
                format!(
                    "register out of range: dst r{}, src r{} (expected r0..r10)",
                    insn.dst, insn.src
                ),
            ));
        }
        let kind = op.kind();
        let writes_dst = matches!(
            kind,
            OpKind::Alu { .. } | OpKind::End { .. } | OpKind::Ld64(_) | OpKind::Load { .. }
        );
        if writes_dst && insn.dst == 10 {
            return Err(err(pc, "r10 (frame pointer) is read-only".into()));
        }
        let mut s = Slot {
            op: Op::Fault,
            dst: insn.dst,
            src: insn.src,
            aux: 0,
            off: insn.off as i32,
            imm: insn.imm as i64 as u64,
        };
        let mut width = 1;
        s.op = match kind {
            OpKind::Alu { op, width, src } => alu_op(op, width, src),
            OpKind::End { op, bits } => match (op, bits) {
                (EndOp::Le, 16) => Op::Trunc16,
                (EndOp::Le, 32) => Op::Trunc32,
                (EndOp::Le, _) => Op::Nop,
                (EndOp::Be | EndOp::Bswap, 16) => Op::Swap16,
                (EndOp::Be | EndOp::Bswap, 32) => Op::Swap32,
                (EndOp::Be | EndOp::Bswap, _) => Op::Swap64,
            },
            OpKind::Ld64(k) => {
                width = 2;
                let Some(next) = insns.get(pc + 1) else {
                    return Err(err(pc, "ld_imm64 is missing its second slot".into()));
                };
                if next.code != 0 || next.dst != 0 || next.src != 0 || next.off != 0 {
                    return Err(err(
                        pc,
                        format!(
                            "second slot of ld_imm64 must be zero except imm, found code {:#04x} dst {} src {} off {}",
                            next.code, next.dst, next.src, next.off
                        ),
                    ));
                }
                second_half[pc + 1] = true;
                let lo = insn.imm as u32 as u64;
                let hi = next.imm as u32 as u64;
                s.imm = match k {
                    Ld64Kind::Imm => lo | (hi << 32),
                    Ld64Kind::MapIdx => {
                        let i = insn.imm as u32 as usize;
                        if i >= maps.len() {
                            return Err(err(
                                pc,
                                format!("map index {i} out of range ({} maps)", maps.len()),
                            ));
                        }
                        MAP_HANDLE_BASE + i as u64
                    }
                    Ld64Kind::MapIdxValue => {
                        let i = insn.imm as u32 as usize;
                        let Some(m) = maps.get(i) else {
                            return Err(err(
                                pc,
                                format!("map index {i} out of range ({} maps)", maps.len()),
                            ));
                        };
                        if !matches!(m.def().kind, MapKind::Array) {
                            return Err(err(
                                pc,
                                format!(
                                    "map_idx_value needs an array map, map {i} `{}` is {:?}",
                                    m.def().name,
                                    m.def().kind
                                ),
                            ));
                        }
                        let Some(p) = m.lookup(&0u32.to_le_bytes(), 0) else {
                            return Err(err(pc, format!("map {i} has no entry 0")));
                        };
                        (p.as_ptr() as u64).wrapping_add(next.imm as i64 as u64)
                    }
                    other => {
                        return Err(err(
                            pc,
                            format!(
                                "ld_imm64 form {other:?} is not supported by the interpreter (expected the map index forms, src 5 or 6)"
                            ),
                        ));
                    }
                };
                Op::LdImm64
            }
            OpKind::Load { size, sign_extend } => match (size, sign_extend) {
                (Size::B, false) => Op::Ldx8,
                (Size::H, false) => Op::Ldx16,
                (Size::W, false) => Op::Ldx32,
                (Size::Dw, _) => Op::Ldx64,
                (Size::B, true) => Op::Ldxs8,
                (Size::H, true) => Op::Ldxs16,
                (Size::W, true) => Op::Ldxs32,
            },
            OpKind::Store { size, src } => match (size, src) {
                (Size::B, Src::Imm) => Op::St8,
                (Size::H, Src::Imm) => Op::St16,
                (Size::W, Src::Imm) => Op::St32,
                (Size::Dw, Src::Imm) => Op::St64,
                (Size::B, Src::Reg) => Op::Stx8,
                (Size::H, Src::Reg) => Op::Stx16,
                (Size::W, Src::Reg) => Op::Stx32,
                (Size::Dw, Src::Reg) => Op::Stx64,
            },
            OpKind::Atomic { op, size, fetch } => {
                if fetch && insn.src == 10 && op != AtomicOp::Cmpxchg {
                    return Err(err(pc, "r10 (frame pointer) is read-only".into()));
                }
                s.aux = match op {
                    AtomicOp::Add => aop::ADD,
                    AtomicOp::Or => aop::OR,
                    AtomicOp::And => aop::AND,
                    AtomicOp::Xor => aop::XOR,
                    AtomicOp::Xchg => aop::XCHG,
                    AtomicOp::Cmpxchg => aop::CMPXCHG,
                } | if fetch { aop::FETCH } else { 0 };
                match size {
                    Size::W => Op::Atomic32,
                    _ => Op::Atomic64,
                }
            }
            OpKind::Ja => {
                jumps.push((pc, pc as i64 + 1 + insn.off as i64));
                Op::Ja
            }
            OpKind::JaLong => {
                jumps.push((pc, pc as i64 + 1 + insn.imm as i64));
                Op::Ja
            }
            OpKind::Jmp { cond, width, src } => {
                jumps.push((pc, pc as i64 + 1 + insn.off as i64));
                jmp_op(cond, width, src)
            }
            OpKind::Call => {
                if helpers::proto(insn.imm).is_none() {
                    return Err(err(pc, helpers::unknown_helper_message(insn.imm as i64)));
                }
                s.imm = insn.imm as u32 as u64;
                Op::Call
            }
            // The id is checked when the call runs (`helpers::callx_id`).
            OpKind::Callx => Op::Callx,
            OpKind::CallLocal => {
                jumps.push((pc, pc as i64 + 1 + insn.imm as i64));
                Op::CallLocal
            }
            OpKind::CallKfunc => {
                return Err(err(pc, "kfunc calls are not supported".into()));
            }
            OpKind::Exit => Op::Exit,
        };
        code[pc] = s;
        pc += width;
    }
    for (pc, target) in jumps {
        if target < 0 || target >= n as i64 {
            return Err(err(
                pc,
                format!("jump target {target} outside the program (0..{n})"),
            ));
        }
        if second_half[target as usize] {
            return Err(err(
                pc,
                format!("jump target {target} is the second slot of a ld_imm64"),
            ));
        }
        code[pc].off = target as i32;
    }
    Ok(code)
}

/// For every slot, the number of instructions from it to the end of its straight-line run
/// (the next jump, call, exit or fault, inclusive; `ld_imm64` counts once). The interpreter
/// charges the instruction budget a whole run at a time, when control enters it.
pub(crate) fn run_lengths(code: &[Slot]) -> Vec<u32> {
    let n = code.len();
    let mut len = vec![1u32; n];
    for pc in (0..n).rev() {
        let ends = matches!(
            code[pc].op,
            Op::Ja
                | Op::CallLocal
                | Op::Exit
                | Op::Fault
                | Op::Jeq64I
                | Op::Jeq64R
                | Op::Jgt64I
                | Op::Jgt64R
                | Op::Jge64I
                | Op::Jge64R
                | Op::Jset64I
                | Op::Jset64R
                | Op::Jne64I
                | Op::Jne64R
                | Op::Jsgt64I
                | Op::Jsgt64R
                | Op::Jsge64I
                | Op::Jsge64R
                | Op::Jlt64I
                | Op::Jlt64R
                | Op::Jle64I
                | Op::Jle64R
                | Op::Jslt64I
                | Op::Jslt64R
                | Op::Jsle64I
                | Op::Jsle64R
                | Op::Jeq32I
                | Op::Jeq32R
                | Op::Jgt32I
                | Op::Jgt32R
                | Op::Jge32I
                | Op::Jge32R
                | Op::Jset32I
                | Op::Jset32R
                | Op::Jne32I
                | Op::Jne32R
                | Op::Jsgt32I
                | Op::Jsgt32R
                | Op::Jsge32I
                | Op::Jsge32R
                | Op::Jlt32I
                | Op::Jlt32R
                | Op::Jle32I
                | Op::Jle32R
                | Op::Jslt32I
                | Op::Jslt32R
                | Op::Jsle32I
                | Op::Jsle32R
        );
        if !ends {
            let next = if code[pc].op == Op::LdImm64 {
                pc + 2
            } else {
                pc + 1
            };
            len[pc] = len.get(next).map_or(1, |l| l.saturating_add(1));
        }
    }
    len
}
