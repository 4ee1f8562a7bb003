//! Host ELF executables and shared libraries built by nvcc: their fat binaries sit in
//! `.nv_fatbin` (whole-program compilation) and `__nv_relfatbin` (relocatable device code,
//! `-rdc`), one or more containers per section.
//!
//! The `.nvFatBinSegment` section holds the wrapper structs that point into these
//! sections; the containers are found without them, by reading the sections whole.

use super::ImageError;
use super::fatbin::{FatbinEntry, parse_containers};
use object::{Object as _, ObjectSection as _};

/// The sections that hold fat binary containers.
pub const FATBIN_SECTIONS: [&str; 2] = [".nv_fatbin", "__nv_relfatbin"];

/// The fat binaries of a host ELF: one `Vec` of entries per container, sections in
/// [`FATBIN_SECTIONS`] order. Entry offsets and error offsets are file offsets. An ELF
/// without such sections has none.
pub fn host_elf_fatbins(bytes: &[u8]) -> Result<Vec<Vec<FatbinEntry>>, ImageError> {
    let oerr = |source| ImageError::Elf {
        what: "host elf",
        off: 0,
        source,
    };
    let file = object::File::parse(bytes).map_err(oerr)?;
    let mut out = Vec::new();
    for name in FATBIN_SECTIONS {
        for section in file.sections().filter(|s| s.name() == Ok(name)) {
            let Some((off, _)) = section.file_range() else {
                continue; // SHT_NOBITS: nothing in the file
            };
            let data = section.data().map_err(oerr)?;
            let base = usize::try_from(off).unwrap_or(usize::MAX);
            tracing::debug!(
                section = name,
                offset = off,
                len = data.len(),
                "host elf fatbin section"
            );
            if data.iter().all(|&b| b == 0) {
                continue;
            }
            out.extend(parse_containers(data, base)?);
        }
    }
    Ok(out)
}
