//! The reference interpreter (API skeleton; the implementation lands with the interpreter
//! work).

use crate::maps::MapOps;
use crate::program::{InsnLoc, Program};
use std::sync::Arc;

/// A run-time failure, at an instruction.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{loc}: {insn}: {msg}")]
pub struct ExecError {
    /// Where.
    pub loc: InsnLoc,
    /// The instruction, disassembled.
    pub insn: String,
    /// What went wrong.
    pub msg: String,
}

/// A program prepared for execution, with its maps bound.
pub struct Vm {
    _prog: Program,
    _maps: Vec<Arc<dyn MapOps>>,
}

impl Vm {
    /// Prepares `prog` with live `maps` (indexed like `prog.maps`).
    pub fn new(prog: &Program, maps: Vec<Arc<dyn MapOps>>) -> Result<Vm, ExecError> {
        Ok(Vm {
            _prog: prog.clone(),
            _maps: maps,
        })
    }
}
