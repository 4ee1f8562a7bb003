//! Passes over the PTX IR between lowering and printing.
//!
//! | pass            | effect                                                    |
//! |-----------------|-----------------------------------------------------------|
//! | `unused_labels` | drops label definitions no branch refers to               |
//!
//! ptxas does the real optimisation (register allocation, constant folding); the passes
//! only keep the text small and readable.

use crate::ptx::{Module, Operand, Stmt};
use std::collections::HashSet;

/// Runs every pass on `m`.
pub fn run(m: &mut Module) {
    for f in &mut m.functions {
        let used: HashSet<u32> = f
            .body
            .iter()
            .filter_map(|s| match s {
                Stmt::Inst(i) => Some(i.args.iter().filter_map(|a| match a {
                    Operand::Label(l) => Some(l.0),
                    _ => None,
                })),
                _ => None,
            })
            .flatten()
            .collect();
        f.body
            .retain(|s| !matches!(s, Stmt::Label(l) if !used.contains(&l.0)));
    }
}
