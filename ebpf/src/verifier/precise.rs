//! Precision tracking: which scalars must be compared by value when pruning.
//!
//! A scalar only needs its range to match an explored state when its value decides safety:
//! a pointer offset, a helper size, or the outcome of a branch that had only one feasible
//! side. When such a use happens, the registers and stack slots its value came from are
//! found by walking the path's instruction history backwards (`back_insn`), and marked
//! precise in every checkpoint on the way. Pruning compares imprecise scalars by type only.
//!
//! ```text
//! checkpoint A ──hist──▶ checkpoint B ──hist──▶ current insn (demands R2)
//!      ▲ mark                ▲ mark                 │
//!      └──────── backtrack: r2 = r3 ⇒ track r3 ─────┘
//! ```
//!
//! When pruned against a completed checkpoint, its precise set is demanded at the current
//! position too, so the current path's ancestors learn what the explored future relied on.
//! Anything this walk cannot follow (variable-offset stack loads into a tracked register)
//! falls back to "everything precise" for the ancestors.

use super::exec::MAX_FRAMES;
use crate::isa::{AluOp, AtomicOp, OpKind, Src};
use crate::program::Program;

/// One processed instruction, as needed for backtracking.
#[derive(Clone, Copy, Debug)]
pub struct Hist {
    /// The instruction.
    pub pc: u32,
    /// Frame index it ran in.
    pub frame: u8,
    /// Constant-offset stack access: (frame, first slot, last slot, whole aligned slot).
    pub stack: Option<(u8, u8, u8, bool)>,
    /// Whether it accessed the stack at a variable offset.
    pub var_stack: bool,
}

/// Registers and stack slots whose values are being traced, per frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Track {
    /// Register bits per frame.
    pub regs: [u16; MAX_FRAMES],
    /// Stack slot bits per frame (slot `i` covers `fp-8(i+1)..fp-8i`).
    pub slots: [u64; MAX_FRAMES],
}

impl Track {
    /// Nothing traced.
    pub fn is_empty(&self) -> bool {
        self.regs.iter().all(|r| *r == 0) && self.slots.iter().all(|s| *s == 0)
    }

    /// Whether every traced item is also in `other`.
    pub fn subset_of(&self, other: &Track) -> bool {
        (0..MAX_FRAMES)
            .all(|i| self.regs[i] & !other.regs[i] == 0 && self.slots[i] & !other.slots[i] == 0)
    }

    /// Adds everything in `other`.
    pub fn merge(&mut self, other: &Track) {
        for i in 0..MAX_FRAMES {
            self.regs[i] |= other.regs[i];
            self.slots[i] |= other.slots[i];
        }
    }
}

fn slot_bits(lo: u8, hi: u8) -> u64 {
    let mut m = 0u64;
    for s in lo..=hi {
        if s < 64 {
            m |= 1 << s;
        }
    }
    m
}

/// Steps the traced set backwards over one instruction. `false`: cannot follow (the caller
/// falls back to marking everything precise).
pub fn back_insn(prog: &Program, op: OpKind, h: &Hist, t: &mut Track) -> bool {
    let insn = prog.insns[h.pc as usize];
    let f = h.frame as usize;
    let d = 1u16 << insn.dst;
    let s = 1u16 << insn.src;
    match op {
        OpKind::Alu { op, src, .. } => {
            if t.regs[f] & d != 0 {
                if matches!(
                    op,
                    AluOp::Mov | AluOp::Movsx8 | AluOp::Movsx16 | AluOp::Movsx32
                ) {
                    t.regs[f] &= !d;
                }
                if src == Src::Reg {
                    t.regs[f] |= s;
                }
            }
        }
        OpKind::End { .. } | OpKind::Ja | OpKind::JaLong | OpKind::CallKfunc => {}
        OpKind::Ld64(_) => t.regs[f] &= !d,
        OpKind::Load { .. } => {
            if t.regs[f] & d != 0 {
                t.regs[f] &= !d;
                if let Some((sf, lo, hi, _)) = h.stack {
                    t.slots[sf as usize] |= slot_bits(lo, hi);
                } else if h.var_stack {
                    return false;
                }
            }
        }
        OpKind::Store { src, .. } => {
            if let Some((sf, lo, hi, whole)) = h.stack {
                let bits = slot_bits(lo, hi);
                if t.slots[sf as usize] & bits != 0 {
                    if whole {
                        t.slots[sf as usize] &= !bits;
                    }
                    if src == Src::Reg {
                        t.regs[f] |= s;
                    }
                }
            } else if h.var_stack && src == Src::Reg && t.slots.iter().any(|x| *x != 0) {
                t.regs[f] |= s;
            }
        }
        OpKind::Atomic { op, fetch, .. } => {
            let fetch_reg = if op == AtomicOp::Cmpxchg { 1u16 } else { s };
            let fetched = fetch && t.regs[f] & fetch_reg != 0;
            if fetched {
                t.regs[f] &= !fetch_reg;
            }
            match h.stack {
                Some((sf, lo, hi, _)) => {
                    let bits = slot_bits(lo, hi);
                    if fetched {
                        t.slots[sf as usize] |= bits;
                    }
                    if t.slots[sf as usize] & bits != 0 {
                        t.regs[f] |= s;
                        if op == AtomicOp::Cmpxchg {
                            t.regs[f] |= 1;
                        }
                    }
                }
                None if h.var_stack && fetched => return false,
                None => {}
            }
        }
        OpKind::Jmp { src, .. } => {
            // The branch may have refined traced values (and their linked copies): the
            // operands it compared decide them too.
            if !t.is_empty() {
                t.regs[f] |= d;
                if src == Src::Reg {
                    t.regs[f] |= s;
                }
            }
        }
        // (`callx` demands its register precise itself, before the call.)
        OpKind::Call | OpKind::Callx => t.regs[f] &= !0b11_1111,
        OpKind::CallLocal => {
            // Backwards from the callee's first instruction to the call: callee r1..r5
            // are the caller's arguments; nothing else of the callee existed yet.
            if f + 1 < MAX_FRAMES {
                t.regs[f] |= t.regs[f + 1] & 0b11_1110;
                t.regs[f + 1] = 0;
                t.slots[f + 1] = 0;
            }
        }
        OpKind::Exit => {
            // Backwards from the caller's return site into the callee's exit: the caller's
            // r0 is the callee's r0; its r1..r5 were clobbered.
            if f > 0 {
                t.regs[f] = t.regs[f - 1] & 1;
                t.slots[f] = 0;
                t.regs[f - 1] &= !0b11_1111;
            }
        }
    }
    true
}
