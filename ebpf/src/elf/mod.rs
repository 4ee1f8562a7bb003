//! Loading programs from ELF objects and raw bytecode (API skeleton; the implementation
//! lands with the loader work).

use crate::program::{MapDef, ProgKind, Program};

/// A load failure.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ElfError {
    /// Placeholder.
    #[error("{file}: {msg}")]
    Invalid {
        /// File name.
        file: String,
        /// What is wrong.
        msg: String,
    },
}

/// One program found in an object.
#[derive(Clone, Debug, serde::Serialize)]
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
#[derive(Clone, Debug, serde::Serialize)]
pub struct SectionInfo {
    /// Section name.
    pub name: String,
    /// What the loader made of it (`program`, `maps`, `data`, `license`, `btf`, `reloc`, ...).
    pub role: String,
    /// Size in bytes.
    pub size: u64,
}

/// A parsed object file.
#[derive(Clone, Debug)]
pub struct Object {
    /// File name.
    pub file: String,
    /// Programs, in section order.
    pub programs: Vec<ProgramInfo>,
    /// Maps: BTF, legacy and global data.
    pub maps: Vec<MapDef>,
    /// License string.
    pub license: Option<String>,
    /// Every section.
    pub sections: Vec<SectionInfo>,
}

impl Object {
    /// Parses an ELF object.
    pub fn parse(bytes: &[u8], file: &str) -> Result<Object, ElfError> {
        let _ = (bytes, file);
        todo!("elf")
    }

    /// Links one program (by function or section name; `None` picks the only one).
    pub fn program(&self, name: Option<&str>) -> Result<Program, ElfError> {
        let _ = name;
        todo!("elf")
    }
}

/// Loads raw bytecode: a binary file, or hex text.
pub fn load_raw(bytes: &[u8], file: &str) -> Result<Program, ElfError> {
    let _ = (bytes, file);
    todo!("raw")
}
