//! Where a load's probe block may run later than the load: just before the block barrier
//! (`bar.sync`, `__syncthreads()`) that every path from the load reaches first.
//!
//! ```text
//! @%p4 bra L4;  ld.global.f32 %f60, [%rd6];  L4: st.shared [%r6], %f60;
//! @%p7 bra L6;  ld.global.f32 %f61, [%rd9];  L6: st.shared [%r7], %f61;
//! ── both blocks here, each run only by a thread that did its load ──▶  bar.sync 0;
//! ```
//!
//! A tiled kernel guards each load with a bounds test and stores the value to shared
//! memory before the next load. Plain, ptxas turns the guarded blocks into predicated loads
//! and issues them back to back. With a probe block after each load (a branch, and a call
//! that may write memory) it cannot, so the second load waits for the first's data
//! (`bench/results/cxl_gpu.md`: SGEMM 1.49× at zero delay). The same blocks before the
//! barrier leave the loads as they were; the barrier is where the tile's data is first
//! needed by other threads, so a delay paid there holds back the same work.
//!
//! A load qualifies when every path from it:
//! - reaches the same unguarded `bar.sync`/`barrier.sync` (the first barrier on each path);
//! - goes only forward (no loop back to the load before the barrier), through no `ret`,
//!   `exit`, `trap`, `call` or `brx.idx`, and no other barrier form;
//! - writes none of the registers the block reads at the barrier: the address's base and
//!   the loaded value (so the block computes the same ctx words there).
//!
//! The load itself must be unguarded and must not overwrite its own base (a pointer chase's
//! `ld %rd1, [%rd1]`): the memory pass sets a per-thread flag at the load and runs the block
//! at the barrier only where the flag is set.

use super::live::reads_writes;
use crate::ptx::parse::{Operand, PtxFunction, StmtKind};
use std::collections::{HashMap, HashSet};

/// Statements walked at most from one load before giving up.
const MAX_STEPS: usize = 4096;

/// Whether `opcode` is a CTA barrier that every thread waits at.
fn is_block_barrier(opcode: &str) -> bool {
    [
        "bar.sync",
        "barrier.sync",
        "bar.cta.sync",
        "barrier.cta.sync",
    ]
    .iter()
    .any(|b| opcode == *b || opcode.starts_with(&format!("{b}.")))
}

/// The statement index of the barrier where the load at statement `at` of `f` may run its
/// block instead ([`self`]), given the registers the block reads there: the address's
/// `base` and the loaded values; `None` when it does not qualify.
pub fn barrier_after(
    f: &PtxFunction<'_>,
    at: usize,
    base: Option<&str>,
    values: &[String],
) -> Option<usize> {
    let st = &f.statements;
    let load = st.get(at)?;
    if load.kind != StmtKind::Instruction || load.guard.is_some() {
        return None;
    }
    if base.is_some_and(|b| reads_writes(load).1.iter().any(|w| w == b)) {
        return None;
    }
    let keep: Vec<&str> = base
        .into_iter()
        .chain(values.iter().map(String::as_str))
        .collect();
    let labels: HashMap<&str, usize> = st
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind == StmtKind::Label)
        .map(|(i, s)| (s.opcode.as_str(), i))
        .collect();
    let mut target: Option<usize> = None;
    let mut seen: HashSet<usize> = HashSet::new();
    let mut stack = vec![at + 1];
    while let Some(mut i) = stack.pop() {
        loop {
            if !seen.insert(i) {
                // Joined a path already walked.
                break;
            }
            if seen.len() > MAX_STEPS {
                return None;
            }
            // Falling off the body's end is an exit.
            let s = st.get(i)?;
            if s.kind != StmtKind::Instruction {
                i += 1;
                continue;
            }
            let base = s.base_opcode();
            if matches!(base, "bar" | "barrier") && !s.opcode.starts_with("bar.warp") {
                if s.guard.is_some() || !is_block_barrier(&s.opcode) {
                    return None;
                }
                if target.is_some_and(|t| t != i) {
                    return None;
                }
                target = Some(i);
                break;
            }
            match base {
                "ret" | "exit" | "trap" | "brx" | "call" => return None,
                "bra" => {
                    let to = s.operands.iter().find_map(|o| match o {
                        Operand::Symbol(t) => labels.get(t.as_str()).copied(),
                        _ => None,
                    })?;
                    if to <= i {
                        return None;
                    }
                    if s.guard.is_some() {
                        stack.push(to);
                        i += 1;
                    } else {
                        i = to;
                    }
                    continue;
                }
                _ => {}
            }
            if reads_writes(s).1.iter().any(|w| keep.contains(&w.as_str())) {
                return None;
            }
            i += 1;
        }
    }
    target
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptx::parse;

    const HEAD: &str = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 a)\n{\n.reg .pred %p<4>;\n.reg .f32 %f<9>;\n.reg .b32 %r<9>;\n.reg .b64 %rd<9>;\n.shared .align 4 .b8 sm[64];\n";

    /// The barrier's line for the load containing `load` (base first in `keep`), or `None`.
    fn point(body: &str, load: &str, keep: &[&str]) -> Option<u32> {
        let src = format!("{HEAD}{body}}}\n");
        let file = parse::parse(&src).expect("parses");
        let f = file.kernels().next().expect("a kernel");
        let at = f
            .statements
            .iter()
            .position(|s| src[s.span.clone()].contains(load))
            .expect("the load");
        let values: Vec<String> = keep[1..].iter().map(|s| s.to_string()).collect();
        barrier_after(f, at, Some(keep[0]), &values).map(|b| f.statements[b].line)
    }

    /// The SGEMM shape: two guarded loads, each stored to shared memory, then the barrier;
    /// both go to the barrier (line 22), whichever way the guards go.
    const TILE: &str = "ld.param.u64 %rd1, [a];\n\
$L_top:\n\
@%p1 bra $L_a;\n\
add.s64 %rd2, %rd1, 4;\n\
ld.global.f32 %f1, [%rd2];\n\
$L_a:\n\
st.shared.f32 [sm], %f1;\n\
@%p2 bra $L_b;\n\
add.s64 %rd3, %rd1, 8;\n\
ld.global.f32 %f2, [%rd3];\n\
$L_b:\n\
st.shared.f32 [sm+4], %f2;\n\
bar.sync 0;\n\
ld.shared.f32 %f3, [sm];\n\
add.f32 %f4, %f4, %f3;\n\
bar.sync 0;\n\
add.s64 %rd1, %rd1, 64;\n\
@%p3 bra $L_top;\n\
ret;\n";

    #[test]
    fn guarded_tile_loads_go_to_the_barrier_every_path_reaches() {
        assert_eq!(point(TILE, "[%rd2]", &["%rd2", "%f1"]), Some(23));
        assert_eq!(point(TILE, "[%rd3]", &["%rd3", "%f2"]), Some(23));
    }

    #[test]
    fn a_register_the_block_reads_written_on_the_way_keeps_the_block_at_the_load() {
        // The second guarded block writes %rd3: a block reading it at the barrier stays.
        assert_eq!(point(TILE, "[%rd2]", &["%rd2", "%f1", "%rd3"]), None);
        // The loop's write of %rd1 is past the barrier.
        assert_eq!(point(TILE, "[%rd2]", &["%rd2", "%f1", "%rd1"]), Some(23));
    }

    #[test]
    fn loops_exits_calls_other_barriers_and_chases_keep_the_block_at_the_load() {
        // A loop back to the load before any barrier.
        let looped = "ld.param.u64 %rd1, [a];\n$L:\nld.global.f32 %f1, [%rd1];\n@%p1 bra $L;\nbar.sync 0;\nret;\n";
        assert_eq!(point(looped, "[%rd1]", &["%rd1", "%f1"]), None);
        // A path that returns before the barrier.
        let exits =
            "ld.param.u64 %rd1, [a];\nld.global.f32 %f1, [%rd1];\n@%p1 ret;\nbar.sync 0;\nret;\n";
        assert_eq!(point(exits, "[%rd1]", &["%rd1", "%f1"]), None);
        // Two barriers, one on each path.
        let two = "ld.param.u64 %rd1, [a];\nld.global.f32 %f1, [%rd1];\n@%p1 bra $L_x;\nbar.sync 0;\nret;\n$L_x:\nbar.sync 1;\nret;\n";
        assert_eq!(point(two, "[%rd1]", &["%rd1", "%f1"]), None);
        // A guarded barrier, and an arrive.
        let guarded =
            "ld.param.u64 %rd1, [a];\nld.global.f32 %f1, [%rd1];\n@%p1 bar.sync 0;\nret;\n";
        assert_eq!(point(guarded, "[%rd1]", &["%rd1", "%f1"]), None);
        let arrive = "ld.param.u64 %rd1, [a];\nld.global.f32 %f1, [%rd1];\nbar.arrive 0, 64;\nbar.sync 0;\nret;\n";
        assert_eq!(point(arrive, "[%rd1]", &["%rd1", "%f1"]), None);
        // A warp barrier is not a block barrier: walked past.
        let warp = "ld.param.u64 %rd1, [a];\nld.global.f32 %f1, [%rd1];\nbar.warp.sync -1;\nbarrier.sync.aligned 0;\nret;\n";
        assert_eq!(point(warp, "[%rd1]", &["%rd1", "%f1"]), Some(14));
        // A pointer chase overwrites its own base.
        let chase = "ld.param.u64 %rd1, [a];\nld.global.u64 %rd1, [%rd1];\nbar.sync 0;\nret;\n";
        assert_eq!(point(chase, "[%rd1]", &["%rd1"]), None);
        // A guarded load, and no barrier at all.
        let pred = "ld.param.u64 %rd1, [a];\n@%p1 ld.global.f32 %f1, [%rd1];\nbar.sync 0;\nret;\n";
        assert_eq!(point(pred, "[%rd1]", &["%rd1", "%f1"]), None);
        let none = "ld.param.u64 %rd1, [a];\nld.global.f32 %f1, [%rd1];\nret;\n";
        assert_eq!(point(none, "[%rd1]", &["%rd1", "%f1"]), None);
    }
}
