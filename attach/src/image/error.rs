//! [`ImageError`]: every way an image can be malformed, with the byte offset where it
//! went wrong and what was expected there.
//!
//! Offsets are absolute: from the start of the bytes handed to the public entry point
//! (for a host ELF, file offsets).

/// A malformed or unsupported GPU image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A header or table does not fit in the bytes that are left.
    #[error("{what} at byte offset {off} needs {need} bytes, but only {have} are left")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Where it starts.
        off: usize,
        /// How many bytes it needs.
        need: usize,
        /// How many bytes were left from `off`.
        have: usize,
    },
    /// A magic number is wrong.
    #[error("{what} at byte offset {off}: found magic {found:#010x}, expected {expected:#010x}")]
    BadMagic {
        /// What was being read.
        what: &'static str,
        /// Where the magic is.
        off: usize,
        /// The magic found.
        found: u32,
        /// The magic expected.
        expected: u32,
    },
    /// A header field has a value this parser does not accept.
    #[error("{what} at byte offset {off}: found {found}, expected {expected}")]
    BadField {
        /// Which field.
        what: &'static str,
        /// Where the field is.
        off: usize,
        /// The value found.
        found: u64,
        /// What was expected, in words.
        expected: &'static str,
    },
    /// A region announced by a header runs past the end of what contains it.
    #[error(
        "{what} at byte offset {off} ({size} bytes) runs past byte offset {end}, the end of its {container}"
    )]
    PastEnd {
        /// The region.
        what: &'static str,
        /// Where it starts.
        off: usize,
        /// Its announced size.
        size: u64,
        /// Where its container ends.
        end: usize,
        /// The container (`fatbin container`, `image`, ...).
        container: &'static str,
    },
    /// An LZ4-compressed fatbin entry does not decompress.
    #[error("lz4 payload of the fatbin entry at byte offset {off} does not decompress: {source}")]
    Lz4 {
        /// The entry header's offset.
        off: usize,
        /// What the decoder reported.
        #[source]
        source: lz4_flex::block::DecompressError,
    },
    /// A ZSTD-compressed fatbin entry does not decompress.
    #[error("zstd payload of the fatbin entry at byte offset {off} does not decompress: {msg}")]
    Zstd {
        /// The entry header's offset.
        off: usize,
        /// What the decoder reported.
        msg: String,
    },
    /// A compressed entry decompressed to another size than its header announces.
    #[error(
        "fatbin entry at byte offset {off} decompressed to {found} bytes, its header says {expected}"
    )]
    SizeMismatch {
        /// The entry header's offset.
        off: usize,
        /// The size obtained.
        found: usize,
        /// The size in the header.
        expected: u64,
    },
    /// An entry is marked compressed, but with no method this parser knows.
    #[error(
        "fatbin entry at byte offset {off} has flags {flags:#x}: compressed, but neither 0x2000 (lz4) nor 0x8000 (zstd) is set"
    )]
    UnknownCompression {
        /// The entry header's offset.
        off: usize,
        /// The entry's flags.
        flags: u64,
    },
    /// An ELF (cubin or host) that the `object` crate rejects.
    #[error("{what} at byte offset {off}: malformed elf: {source}")]
    Elf {
        /// What was being read (`cubin`, `host elf`, ...).
        what: &'static str,
        /// Where the ELF starts.
        off: usize,
        /// What `object` reported.
        #[source]
        source: object::read::Error,
    },
    /// An ELF given as a cubin is not one.
    #[error(
        "elf at byte offset {off}: {found}, expected a little-endian ELF64 with e_machine 190 (EM_CUDA)"
    )]
    NotCubin {
        /// Where the ELF starts.
        off: usize,
        /// What was found instead, in words.
        found: String,
    },
    /// PTX text that is not UTF-8.
    #[error("ptx at byte offset {off} is not utf-8 text: {source}")]
    PtxNotUtf8 {
        /// Where the PTX starts.
        off: usize,
        /// Where decoding failed.
        #[source]
        source: std::str::Utf8Error,
    },
    /// The bytes are none of the image kinds.
    #[error(
        "unrecognized image: first bytes {found:02x?}, expected ptx text, fatbin magic 0xba55ed50, fatbin wrapper magic 0x466243b1 or an elf"
    )]
    Unrecognized {
        /// Up to the first 8 bytes.
        found: Vec<u8>,
    },
    /// A fatbin wrapper was given as bytes: it holds pointers, which only
    /// [`image_bytes`](super::image_bytes) may follow.
    #[error(
        "a fatbin wrapper (magic 0x466243b1) holds pointers: read it with image_bytes, expected the fatbin it points to"
    )]
    Wrapper,
}
