//! Passes: over the PTX IR between lowering and printing ([`run`]), and over foreign PTX
//! text ([`probe`]).
//!
//! | pass            | input                          | effect                                   |
//! |-----------------|--------------------------------|------------------------------------------|
//! | `unused_labels` | [`crate::ptx::Module`] (IR)    | drops label definitions no branch refers to |
//! | [`probe`]       | app PTX text + [`crate::ptx::parse::PtxFile`] | splices probe blocks at kernel entry and before each `ret`/`exit` |
//! | [`mem`]         | app PTX text + [`crate::ptx::parse::PtxFile`] | wraps each load, store, atomic and `cp.async` in a probe block |
//! | [`live`]        | [`crate::ptx::parse::PtxFunction`] | (an analysis) the registers live after a statement, for [`mem`]'s blocks |
//!
//! ptxas does the real optimisation (register allocation, constant folding); the IR passes
//! only keep the text small and readable.

#[doc(hidden)]
pub mod fuzz;
pub mod live;
pub mod mem;
pub mod probe;

use crate::ptx::{Module, Operand, Stmt};

/// Runs every pass on `m`.
pub fn run(m: &mut Module) {
    let mut used: Vec<bool> = Vec::new();
    for f in &mut m.functions {
        // Labels only come from `place` and label operands only from `bra` (both tracked):
        // skip the scan when every placed label is a branch target.
        if f.all_placed_labels_used() {
            continue;
        }
        used.clear();
        for s in &f.body {
            if let Stmt::Inst(i) = s {
                for a in i.args.iter() {
                    if let Operand::Label(l) = a {
                        let k = l.0 as usize;
                        if k >= used.len() {
                            used.resize(k + 1, false);
                        }
                        used[k] = true;
                    }
                }
            }
        }
        if f.body.iter().any(
            |s| matches!(s, Stmt::Label(l) if !used.get(l.0 as usize).copied().unwrap_or(false)),
        ) {
            f.body
                .retain(|s| !matches!(s, Stmt::Label(l) if !used.get(l.0 as usize).copied().unwrap_or(false)));
        }
    }
}
