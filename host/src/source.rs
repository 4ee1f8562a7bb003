//! Reading program inputs: ELF objects, raw bytecode files, hex text from a file or stdin.

use ebpf::Program;
use std::io::Read;
use std::path::Path;

/// Why a program could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Io {
        /// The path given.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a loadable program.
    #[error(transparent)]
    Load(#[from] ebpf::elf::ElfError),
}

/// Reads `path` (`-` for stdin) into bytes, returning the name to use in messages.
pub fn read(path: &str) -> Result<(String, Vec<u8>), SourceError> {
    if path == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|source| SourceError::Io {
                path: "<stdin>".into(),
                source,
            })?;
        return Ok(("<stdin>".into(), buf));
    }
    let bytes = std::fs::read(path).map_err(|source| SourceError::Io {
        path: path.into(),
        source,
    })?;
    let name = Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string());
    Ok((name, bytes))
}

/// Reads and loads one program: ELF (chosen by `prog`, function or section name) or raw
/// bytecode (binary or hex text).
pub fn load_program(path: &str, prog: Option<&str>) -> Result<Program, SourceError> {
    let (name, bytes) = read(path)?;
    Ok(ebpf::elf::load(&bytes, &name, prog)?)
}
