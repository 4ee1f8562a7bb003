//! The eBPF core of bpftime-super.
//!
//! ```text
//! ELF object / raw bytecode ──[elf]──▶ Program ──[verifier]──▶ Verified ──[interp]──▶ r0
//!                                          │                       └──▶ jit (PTX), later
//!                                          └── isa: opcode table, asm/disasm
//! ```
//!
//! - [`isa`]: instruction encoding and the one opcode table;
//! - [`asm`]: assembler and disassembler driven by that table;
//! - [`helpers`]: helper ids and prototypes;
//! - [`program`]: programs, maps as declared, the job ctx;
//! - [`elf`]: the ELF and raw-bytecode loaders;
//! - [`verifier`]: abstract interpretation proving safety and termination;
//! - [`maps`]: the map interface the interpreter calls, and in-process maps;
//! - [`interp`]: the memory-safe reference interpreter.
//!
//! Nothing here touches shared memory or CUDA: live maps come in as arguments.
#![deny(missing_docs)]

pub mod asm;
pub mod elf;
#[doc(hidden)]
pub mod fuzz;
pub mod helpers;
pub mod interp;
pub mod isa;
pub mod maps;
pub mod program;
pub mod verifier;

pub use program::{
    InsnLoc, JobCtx, MapDef, MapKind, MapOrigin, MemCtx, ProbeCtx, ProgKind, Program, PtRegs,
};
