//! The verifier: abstract interpretation over the control-flow graph (API skeleton; the
//! implementation lands with the verifier work).

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
}

/// Verifies `prog`.
pub fn verify(prog: &Program, opts: &VerifyOptions) -> Result<Verified, VerifyError> {
    let _ = (prog, opts);
    todo!("verifier")
}
