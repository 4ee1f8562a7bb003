//! Loading programs from ELF objects (`clang -target bpf`) and raw bytecode.
//!
//! ```text
//! bytes ──[load]──┬─ "\x7fELF" ──▶ Object::parse ──▶ Object::program(name) ──▶ Program
//!                 │                 (object.rs: sections, symbols, relocations;
//!                 │                  maps.rs + btf.rs: map definitions)
//!                 │                                   (reloc.rs: bpf-to-bpf linking,
//!                 │                                    map references → src 5 / 6)
//!                 └─ otherwise ───▶ load_raw (raw.rs: binary slots or hex text) ──▶ Program
//! ```
//!
//! | module       | owns                                                                 |
//! |--------------|----------------------------------------------------------------------|
//! | [`object`]   | ELF validation, the section/symbol/relocation tables, program choice |
//! | [`maps`]     | map definitions: BTF (`.maps`), legacy (`maps`), global data         |
//! | [`btf`]      | the small `.BTF` reader the BTF maps need                            |
//! | `reloc`      | resolving relocations and linking callees after the program          |
//! | `raw`        | raw bytecode, binary or hex text                                     |
//!
//! Every entry point returns [`ElfError`] on bad input and never panics.

pub mod btf;
pub mod maps;
pub mod object;
mod raw;
mod reloc;

use crate::program::InsnLoc;

pub use object::Object;
pub use raw::load_raw;

use crate::program::{ProgKind, Program};

/// A load failure: what was found, and what was expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    /// Neither an ELF object (no `\x7fELF` magic) where one was required.
    #[error("{file}: not an elf object: {found}")]
    NotElf {
        /// File name.
        file: String,
        /// What the first bytes were.
        found: String,
    },
    /// An ELF object of a class, byte order or type this loader does not read.
    #[error("{file}: unsupported elf: {msg}")]
    Unsupported {
        /// File name.
        file: String,
        /// What is wrong.
        msg: String,
    },
    /// An ELF object for another machine.
    #[error("{file}: e_machine is {found} ({name}), expected 247 (EM_BPF)")]
    WrongMachine {
        /// File name.
        file: String,
        /// The `e_machine` found.
        found: u16,
        /// Its usual name.
        name: String,
    },
    /// The ELF structure itself is broken (truncated, offsets out of range, ...).
    #[error("{file}: malformed elf: {msg}")]
    Malformed {
        /// File name.
        file: String,
        /// What is wrong.
        msg: String,
    },
    /// A symbol the loader needs is inconsistent with its section.
    #[error("{file}: symbol `{name}`: {msg}")]
    BadSymbol {
        /// File name.
        file: String,
        /// Symbol name.
        name: String,
        /// What is wrong.
        msg: String,
    },
    /// No program was named and there is not exactly one of a known kind.
    #[error("{file}: {}", no_program_msg(candidates))]
    NoProgram {
        /// File name.
        file: String,
        /// Every program, as `name (section)`.
        candidates: Vec<String>,
    },
    /// No program or section has the requested name.
    #[error(
        "{file}: no program or section named `{name}`; programs: {}",
        list(candidates)
    )]
    UnknownProgram {
        /// File name.
        file: String,
        /// The name asked for.
        name: String,
        /// Every program, as `name (section)`.
        candidates: Vec<String>,
    },
    /// The requested name is a section holding several programs.
    #[error(
        "{file}: section `{name}` holds several programs, name one of: {}",
        list(candidates)
    )]
    Ambiguous {
        /// File name.
        file: String,
        /// The section name asked for.
        name: String,
        /// The programs of that section.
        candidates: Vec<String>,
    },
    /// A relocation or a call that cannot be applied.
    #[error("{loc}: {insn}: {msg}")]
    BadRelocation {
        /// `file:section: insn N` of the instruction.
        loc: InsnLoc,
        /// The instruction, disassembled.
        insn: String,
        /// What was expected and what was found.
        msg: String,
    },
    /// A map definition that cannot be used.
    #[error("map `{name}`: {msg}")]
    BadMap {
        /// Map (symbol or section) name.
        name: String,
        /// What was expected and what was found.
        msg: String,
    },
    /// A malformed `.BTF` section.
    #[error("btf: {msg}")]
    Btf {
        /// What is wrong.
        msg: String,
    },
    /// Raw bytecode that is not whole instructions or not valid hex.
    #[error("{file}: {msg}")]
    BadBytecode {
        /// File name.
        file: String,
        /// What was expected and what was found (with a line number for hex text).
        msg: String,
    },
}

fn list(c: &[String]) -> String {
    if c.is_empty() {
        "none".to_string()
    } else {
        c.join(", ")
    }
}

fn no_program_msg(c: &[String]) -> String {
    if c.is_empty() {
        "no programs (functions in executable sections other than .text)".to_string()
    } else {
        format!(
            "no program named and not exactly one of a known kind (offload, kprobe, kretprobe, uprobe); name one of: {}",
            c.join(", ")
        )
    }
}

/// One program found in an object.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProgramInfo {
    /// Function name.
    pub name: String,
    /// Section name.
    pub section: String,
    /// Kind from the section prefix.
    pub kind: ProgKind,
    /// Its own instruction count (callees not included).
    pub insn_count: usize,
}

/// One ELF section.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SectionInfo {
    /// Section name.
    pub name: String,
    /// What the loader made of it: `program`, `text` (subprograms), `maps` (BTF or legacy
    /// map definitions), `data` (global data), `license`, `btf`, `reloc`, `symtab`,
    /// `strtab`, `debug` or `other`.
    pub role: String,
    /// Size in bytes.
    pub size: u64,
}

/// Whether `bytes` look like an ELF object (the `\x7fELF` magic).
pub fn is_elf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

/// Loads one program from an ELF object or raw bytecode, detected by the ELF magic.
///
/// For ELF, `prog` chooses the program by function or section name (`None`: the only one
/// of a known kind). For raw bytecode, `prog` (if given) becomes the program's name.
pub fn load(bytes: &[u8], file: &str, prog: Option<&str>) -> Result<Program, ElfError> {
    if is_elf(bytes) {
        Object::parse(bytes, file)?.program(prog)
    } else {
        let mut p = load_raw(bytes, file)?;
        if let Some(name) = prog {
            p.name = name.to_string();
        }
        Ok(p)
    }
}
