//! The verifier: abstract interpretation over the control-flow graph, in the spirit of the
//! Linux verifier.
//!
//! ```text
//! Program ─▶ cfg::analyze ─▶ exec::Explorer (DFS over paths, branch stack, pruning) ─▶ Verified
//!            structure,       per insn: types (state.rs), scalars (scalar.rs),
//!            functions,       memory checks, helper protos (helpers.rs), trail (log.rs)
//!            prune points
//! ```
//!
//! | module      | owns                                                        |
//! |-------------|-------------------------------------------------------------|
//! | `cfg`       | decoding, reserved fields, jump targets, functions          |
//! | `scalar`    | ranges + tnum, ALU transfer functions, branch refinement   |
//! | `state`     | register/pointer types, stack slots, frames, subsumption    |
//! | `exec`      | exploration, per-instruction checks, pruning, loops         |
//! | `helpers`   | helper argument checks and return types                     |
//! | `precise`   | precision tracking (which scalars pruning must compare)     |
//! | `log`       | the `--log` trail                                           |
//!
//! Rules of the Linux verifier kept as they are there: r0 must be set at the main program's
//! exit only (a subprogram may return without it; r0 is then unreadable in its caller); a
//! stack load or store must be aligned to its size; dividing by the immediate 0 is a
//! load-time error (a register divisor may be 0: `x / 0 = 0`, `x % 0 = x`). `callx r<d>`
//! (which Linux does not load) is accepted where `r<d>` holds a known helper id, and checked
//! as a call of that helper.
//!
//! Known imprecision (safe, but may reject valid programs):
//! - precision tracking is path-based but coarse: any conditional jump met while walking
//!   back marks its operands precise, and a variable-offset stack load of a traced value
//!   falls back to "everything precise" for the path;
//! - stack bytes written with partial (< 8 byte) stores lose their values (only "initialized"
//!   or "zero" is kept); 8-byte spills keep full register state;
//! - JMP32 conditions refine bounds only when both operands are known to fit in 31/32 bits;
//! - `sdiv`/`smod`/`arsh` on 32-bit and non-constant shift counts give unknown results;
//! - data/out pointers with a variable part must stay non-negative; the range proven before
//!   adding the variable part is kept (`base_range`), later checks on the variable pointer
//!   give `range`.

mod cfg;
mod exec;
mod helpers;
mod log;
mod precise;
pub mod scalar;
pub mod state;

use crate::program::{InsnLoc, Program};

/// What r1 points to when the program starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtxKind {
    /// A read-only `struct bpftime_job_ctx` (offload programs, the default).
    Job,
    /// `len` bytes of readable and writable memory; r2 holds `len`.
    Mem {
        /// Length of the memory block.
        len: usize,
    },
    /// A probe's ctx (`kprobe/`, `kretprobe/`, `uprobe/`): `size` readable and writable bytes
    /// of scalars (no pointer fields), with nothing in r2. The words the program reads are
    /// reported in [`Verified::ctx_words_read`], so an attach site fills only those.
    Probe {
        /// Size of the ctx in bytes.
        size: usize,
    },
}

/// Verifier settings.
#[derive(Clone, Debug)]
pub struct VerifyOptions {
    /// What r1 points to at entry.
    pub ctx: CtxKind,
    /// Record the state trail (`--log`).
    pub log: bool,
    /// Budget of processed instructions.
    pub max_insns: usize,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            ctx: CtxKind::Job,
            log: false,
            max_insns: 1_000_000,
        }
    }
}

/// Facts about an accepted program.
#[derive(Clone, Debug, Default)]
pub struct Verified {
    /// Instructions processed during exploration.
    pub insns_processed: usize,
    /// Stack bytes used, per function: `(entry pc, bytes)`; the entry function first.
    pub stack_depths: Vec<(usize, usize)>,
    /// Deepest combined stack use along any call chain, in bytes.
    pub max_stack_depth: usize,
    /// The state trail when logging was asked for.
    pub log: String,
    /// With [`CtxKind::Probe`]: bit `k` is set when some path reads ctx bytes `8k..8k+8`
    /// (every bit when the ctx pointer reaches a helper, or for words past 63).
    pub ctx_words_read: u64,
    /// With [`CtxKind::Probe`]: every load instruction (by pc) that read through the ctx
    /// pointer, with the ctx offset it read at (`Some`) when that offset is the same
    /// constant on every path and the instruction never loads through another pointer;
    /// `None` otherwise. A JIT can read such a load's bytes from registers holding the ctx
    /// words instead of from memory.
    pub ctx_loads: std::collections::BTreeMap<usize, Option<i64>>,
    /// Every plain load and store (by pc) through a pointer into a frame: `Some((offset from
    /// r10, bytes))` when it is the entry function's frame at the same constant offset on
    /// every path, `None` otherwise.
    pub stack_slots: std::collections::BTreeMap<usize, Option<(i64, u8)>>,
    /// Bit `i` (byte `i - 512` from r10 of the entry's frame): something other than a plain
    /// load or store at a constant offset may touch that byte: a helper through a pointer,
    /// an atomic, an access at a varying offset or at two offsets.
    pub stack_shared: [u64; crate::isa::STACK_SIZE / 64],
    /// Bit `m` is set when every access of the program to map `m`'s values is a 64-bit
    /// atomic add without fetch (a counter the program never reads), and the map reaches no
    /// helper but `map_lookup_elem`: such a map may be split into per-SM stripes that the
    /// host sums. Maps past the 64th are never set.
    pub maps_add_only: u64,
    /// Bit `m` is set when the program may write map `m`'s values: a store through a value
    /// pointer, any atomic on one, `map_update_elem`/`map_delete_elem` or a ring-buffer
    /// helper on the map, or a helper writing into a value. Clear: the program only reads
    /// the map, so another party (the host) owns its contents. Maps past the 64th are
    /// always set.
    pub maps_written: u64,
    /// Bit `m` is set when the program changes map `m` with a read-modify-write: an atomic
    /// instruction on a value, or a helper that updates, deletes or reserves in the map
    /// (those take the map's locks). Such updates are atomic only where every writer's
    /// atomics are: not between two GPUs on host memory without PCIe atomics. Maps past the
    /// 64th are always set.
    pub maps_atomic: u64,
}

impl Verified {
    /// The loads and stores (by pc) whose frame bytes a JIT may keep in a register instead
    /// of memory, with their offset from r10. A slot qualifies when the program is one
    /// function, every access to any of its bytes is a plain load or store of exactly that
    /// offset and width ([`Verified::stack_slots`]), and nothing else reaches its bytes
    /// ([`Verified::stack_shared`]). Reading such a slot then always reads what the last
    /// store on the path wrote, so a register per slot holds the same values.
    pub fn stack_registers(&self) -> std::collections::BTreeMap<usize, i64> {
        let mut out = std::collections::BTreeMap::new();
        if self.stack_depths.len() > 1 {
            return out;
        }
        let size = crate::isa::STACK_SIZE as i64;
        // Byte → the one (offset, width) that touches it, or a conflict.
        let mut owner: Vec<Option<Result<(i64, u8), ()>>> = vec![None; size as usize];
        for s in self.stack_slots.values() {
            let Some((lo, n)) = *s else { continue };
            for b in lo..lo + n as i64 {
                let Some(o) = owner.get_mut((b + size) as usize) else {
                    continue;
                };
                *o = match *o {
                    None => Some(Ok((lo, n))),
                    Some(Ok(x)) if x == (lo, n) => Some(Ok(x)),
                    _ => Some(Err(())),
                };
            }
        }
        let shared = |b: i64| {
            let i = (b + size) as usize;
            self.stack_shared[i / 64] >> (i % 64) & 1 == 1
        };
        for (&pc, s) in &self.stack_slots {
            let Some((lo, n)) = *s else { continue };
            let own = (lo..lo + n as i64).all(|b| {
                b >= -size && b < 0 && !shared(b) && owner[(b + size) as usize] == Some(Ok((lo, n)))
            });
            if own {
                out.insert(pc, lo);
            }
        }
        out
    }
}

/// The class of a verification failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Malformed program: decoding, reserved fields, jumps, unsupported forms.
    Structure,
    /// A register or stack byte read before it was written.
    Uninit,
    /// An out-of-bounds, misaligned, or forbidden memory access.
    Access,
    /// A forbidden operation on a pointer (arithmetic, comparison, leak, return).
    Pointer,
    /// A helper argument of the wrong type or size.
    Helper,
    /// A reference (ring buffer reservation) leaked or released twice.
    Reference,
    /// A loop that cannot terminate.
    Loop,
    /// The exploration budget ran out.
    TooComplex,
    /// Call depth or combined stack size exceeded.
    Stack,
}

/// A rejected program: where, which instruction, and why.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{loc}: {insn}: {msg}")]
pub struct VerifyError {
    /// `file:section: insn N`.
    pub loc: InsnLoc,
    /// The instruction, disassembled.
    pub insn: String,
    /// What was expected and what was found.
    pub msg: String,
    /// The state trail that led there (filled when logging was asked for).
    pub log: String,
    /// The class of the failure.
    pub kind: ErrorKind,
}

impl VerifyError {
    /// The pc of the offending instruction.
    pub fn pc(&self) -> usize {
        self.loc.pc
    }
}

/// An internal failure before it gets its location and log.
#[derive(Debug)]
pub(crate) struct Fail {
    pub pc: usize,
    pub kind: ErrorKind,
    pub msg: String,
}

/// Verifies `prog`.
// The error type is the skeleton's public API (others match on its fields); it is built once
// per rejected program, so its size does not matter.
#[allow(clippy::result_large_err)]
pub fn verify(prog: &Program, opts: &VerifyOptions) -> Result<Verified, VerifyError> {
    let mut trail = log::Trail::new(opts.log);
    let result =
        cfg::analyze(prog).and_then(|cfg| exec::Explorer::new(prog, opts, cfg, &mut trail).run());
    match result {
        Ok(mut v) => {
            v.log = trail.finish(&format!(
                "processed {} insns, max stack depth {} bytes",
                v.insns_processed, v.max_stack_depth
            ));
            tracing::debug!(prog = %prog.name, insns = v.insns_processed, "verified");
            Ok(v)
        }
        Err(f) => {
            let e = VerifyError {
                loc: prog.loc(f.pc),
                insn: crate::asm::disasm_insn(&prog.insns, f.pc),
                msg: f.msg,
                log: trail.tail(),
                kind: f.kind,
            };
            tracing::debug!(error = %e, "verification failed");
            Err(e)
        }
    }
}
