//! Register liveness over a parsed PTX function: which of its `.reg` registers hold a value
//! some later instruction may read, after a given statement.
//!
//! ```text
//! statements ──▶ blocks (a label starts one; bra / brx / ret / exit / trap end one)
//!            ──▶ per instruction: uses (operands, guard), defs (the destination)
//!            ──▶ backward fixpoint over the blocks ──▶ live after each asked statement
//! ```
//!
//! What counts as a definition: the first operand when it is a register, a `{…}` vector of
//! them or `d|p`, except for instructions whose first register operand is read (`bra`,
//! `brx.idx`, `bar`/`barrier` without `.red`, `nanosleep`, `pmevent`); `call`'s return list.
//! A guarded instruction defines nothing for certain (its old value survives a false
//! guard), so it kills nothing. `brx.idx` may reach every label.
//!
//! Used by the memory pass ([`super::mem`]) to tell a probe block which of the kernel's
//! registers it may store before its cold part and load after it. Nothing depends on the
//! answer for correctness: a register missing from it stays in place as before, and one
//! that is not live only costs its store and load on the cold path. A wrong answer costs
//! speed, never a value.

use crate::ptx::parse::{Operand, PtxFunction, StmtKind};
use std::collections::HashMap;

/// A set of register ids.
#[derive(Clone, PartialEq, Eq)]
struct Set(Vec<u64>);

impl Set {
    fn new(n: usize) -> Set {
        Set(vec![0; n.div_ceil(64)])
    }
    fn insert(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn remove(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
    fn contains(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
    /// `self |= other`; whether anything changed.
    fn union(&mut self, other: &Set) -> bool {
        let mut changed = false;
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            let n = *a | *b;
            changed |= n != *a;
            *a = n;
        }
        changed
    }
}

/// One instruction's registers, as ids.
struct Effect {
    uses: Vec<usize>,
    /// Killed: defined unconditionally.
    kills: Vec<usize>,
}

/// The registers of `f` live after each statement of `at` (indices into
/// `f.statements`), by name, sorted; `is_reg` says which names are the function's own
/// registers (declared by `.reg`; special registers such as `%tid.x` are not).
pub fn live_after(
    f: &PtxFunction<'_>,
    at: &[usize],
    is_reg: impl Fn(&str) -> bool,
) -> Vec<Vec<String>> {
    let st = &f.statements;
    // Register ids.
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut names: Vec<String> = Vec::new();
    let mut id = |name: &str, ids: &mut HashMap<String, usize>| -> Option<usize> {
        if !is_reg(name) {
            return None;
        }
        Some(*ids.entry(name.to_string()).or_insert_with(|| {
            names.push(name.to_string());
            names.len() - 1
        }))
    };
    let mut effects: Vec<Option<Effect>> = Vec::with_capacity(st.len());
    for s in st {
        if s.kind != StmtKind::Instruction {
            effects.push(None);
            continue;
        }
        let base = s.base_opcode();
        let first_read = matches!(base, "bra" | "brx" | "nanosleep" | "pmevent" | "trap")
            || (matches!(base, "bar" | "barrier") && !s.opcode.contains(".red"));
        let mut uses = Vec::new();
        let mut defs = Vec::new();
        if let Some(g) = &s.guard
            && let Some(i) = id(&g.pred, &mut ids)
        {
            uses.push(i);
        }
        for (k, o) in s.operands.iter().enumerate() {
            let def_slot = k == 0 && !first_read && base != "call";
            let ret_list = k == 0 && base == "call" && matches!(o, Operand::List(_));
            let mut regs = Vec::new();
            operand_regs(o, &mut regs);
            let is_def = match o {
                Operand::Reg(_) | Operand::Vector(_) => def_slot,
                Operand::Other(t) => def_slot && t.contains('|'),
                Operand::List(_) => ret_list,
                _ => false,
            };
            for r in regs {
                if let Some(i) = id(&r, &mut ids) {
                    if is_def { defs.push(i) } else { uses.push(i) }
                }
            }
        }
        let kills = if s.guard.is_some() { Vec::new() } else { defs };
        effects.push(Some(Effect { uses, kills }));
    }
    let n = names.len();
    // Blocks: [start, end) of statement indices.
    let labels: HashMap<&str, usize> = st
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind == StmtKind::Label)
        .map(|(i, s)| (s.opcode.as_str(), i))
        .collect();
    let mut starts = vec![false; st.len() + 1];
    starts[0] = true;
    for (i, s) in st.iter().enumerate() {
        if s.kind == StmtKind::Label {
            starts[i] = true;
        }
        if s.kind == StmtKind::Instruction
            && matches!(s.base_opcode(), "bra" | "brx" | "ret" | "exit" | "trap")
        {
            starts[i + 1] = true;
        }
    }
    let bounds: Vec<usize> = (0..=st.len()).filter(|&i| starts[i]).collect();
    let blocks: Vec<(usize, usize)> = bounds
        .windows(2)
        .map(|w| (w[0], w[1]))
        .chain((bounds.last() != Some(&st.len())).then(|| (*bounds.last().unwrap_or(&0), st.len())))
        .filter(|(a, b)| a < b)
        .collect();
    let block_of = |i: usize| blocks.partition_point(|b| b.1 <= i);
    let all_labels: Vec<usize> = labels.values().map(|&i| block_of(i)).collect();
    let succs: Vec<Vec<usize>> = blocks
        .iter()
        .enumerate()
        .map(|(b, &(_, end))| {
            let mut out = Vec::new();
            let last = &st[end - 1];
            let op = if last.kind == StmtKind::Instruction {
                last.base_opcode()
            } else {
                ""
            };
            let guarded = last.guard.is_some();
            let falls = match op {
                "bra" | "ret" | "exit" | "trap" | "brx" => guarded,
                _ => true,
            };
            if falls && b + 1 < blocks.len() {
                out.push(b + 1);
            }
            if op == "bra" {
                for o in &last.operands {
                    if let Operand::Symbol(t) = o
                        && let Some(&i) = labels.get(t.as_str())
                    {
                        out.push(block_of(i));
                    }
                }
            } else if op == "brx" {
                out.extend(&all_labels);
            }
            out
        })
        .collect();
    // Backward transfer through a block's statements from its live-out.
    let transfer = |live: &mut Set, from: usize, to: usize| {
        for e in effects[from..to].iter().rev().flatten() {
            for &k in &e.kills {
                live.remove(k);
            }
            for &u in &e.uses {
                live.insert(u);
            }
        }
    };
    let mut live_in: Vec<Set> = vec![Set::new(n); blocks.len()];
    let mut changed = true;
    while changed {
        changed = false;
        for b in (0..blocks.len()).rev() {
            let mut live = Set::new(n);
            for &s in &succs[b] {
                live.union(&live_in[s]);
            }
            transfer(&mut live, blocks[b].0, blocks[b].1);
            changed |= live_in[b].union(&live);
        }
    }
    at.iter()
        .map(|&i| {
            if i >= st.len() {
                return Vec::new();
            }
            let b = block_of(i);
            let mut live = Set::new(n);
            for &s in &succs[b] {
                live.union(&live_in[s]);
            }
            transfer(&mut live, i + 1, blocks[b].1);
            let mut out: Vec<String> = (0..n)
                .filter(|&k| live.contains(k))
                .map(|k| names[k].clone())
                .collect();
            out.sort();
            out
        })
        .collect()
}

/// The register names an operand mentions (`%p1|%p2` and `sym+8` forms included).
fn operand_regs(o: &Operand, out: &mut Vec<String>) {
    match o {
        Operand::Reg(r) | Operand::NotReg(r) => out.push(r.clone()),
        Operand::Address { base: Some(b), .. } => out.push(b.clone()),
        Operand::Vector(v) | Operand::List(v) => v.iter().for_each(|x| operand_regs(x, out)),
        Operand::Other(t) => {
            for w in
                t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '%' || c == '_' || c == '$'))
            {
                if w.starts_with('%') {
                    out.push(w.to_string());
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptx::parse;

    fn live(src: &str, after: &[&str]) -> Vec<Vec<String>> {
        let file = parse::parse(src).expect("parses");
        let f = file.kernels().next().expect("a kernel");
        let at: Vec<usize> = after
            .iter()
            .map(|t| {
                f.statements
                    .iter()
                    .position(|s| src[s.span.clone()].contains(t))
                    .unwrap_or_else(|| panic!("no statement {t}"))
            })
            .collect();
        live_after(f, &at, |n| {
            n.starts_with("%r") || n.starts_with("%p") || n.starts_with("%f")
        })
    }

    const HEAD: &str = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 a)\n{\n.reg .pred %p<4>;\n.reg .f32 %f<9>;\n.reg .b32 %r<9>;\n.reg .b64 %rd<9>;\n";

    #[test]
    fn straight_line_uses_keep_a_register_live_until_its_last_read() {
        let src = format!(
            "{HEAD}ld.param.u64 %rd1, [a];\nld.global.f32 %f1, [%rd1];\nld.global.f32 %f2, [%rd1+4];\nadd.f32 %f3, %f1, %f2;\nst.global.f32 [%rd1], %f3;\nret;\n}}\n"
        );
        let l = live(
            &src,
            &["%f1, [%rd1]", "%f2, [%rd1+4]", "add.f32", "st.global"],
        );
        assert_eq!(l[0], ["%f1", "%rd1"]);
        assert_eq!(l[1], ["%f1", "%f2", "%rd1"]);
        assert_eq!(l[2], ["%f3", "%rd1"]);
        assert!(l[3].is_empty(), "{:?}", l[3]);
    }

    #[test]
    fn a_loop_keeps_its_carried_registers_live_and_a_guard_kills_nothing() {
        let src = format!(
            "{HEAD}ld.param.u64 %rd1, [a];\nmov.u32 %r1, 0;\nmov.f32 %f1, 0f00000000;\n$L_loop:\nld.global.f32 %f2, [%rd1];\nadd.f32 %f1, %f1, %f2;\nadd.s32 %r1, %r1, 1;\nsetp.lt.s32 %p1, %r1, 8;\n@%p1 bra $L_loop;\n@%p1 mov.f32 %f1, %f2;\nst.global.f32 [%rd1], %f1;\nret;\n}}\n"
        );
        let l = live(&src, &["%f2, [%rd1]", "setp.lt"]);
        // After the load: the sum, the counter, the pointer, and the loaded value.
        assert_eq!(l[0], ["%f1", "%f2", "%r1", "%rd1"]);
        // After the compare: the guarded move reads %f2 and may leave %f1 as it was.
        assert_eq!(l[1], ["%f1", "%f2", "%p1", "%r1", "%rd1"]);
    }

    #[test]
    fn vector_and_pair_destinations_are_definitions() {
        let src = format!(
            "{HEAD}ld.param.u64 %rd1, [a];\nld.global.v2.f32 {{%f1, %f2}}, [%rd1];\nsetp.lt.f32 %p1|%p2, %f1, %f2;\n@%p2 st.global.f32 [%rd1], %f1;\nret;\n}}\n"
        );
        let l = live(&src, &["ld.param", "ld.global.v2", "setp.lt"]);
        assert_eq!(l[0], ["%rd1"], "the vector load defines %f1 and %f2");
        assert_eq!(l[1], ["%f1", "%f2", "%rd1"]);
        assert_eq!(
            l[2],
            ["%f1", "%p2", "%rd1"],
            "%p1 is defined and never read"
        );
    }
}
