//! Fat binary containers (`0xBA55ED50`), their entries, and the wrapper struct
//! (`0x466243B1`) through which nvcc's host stubs point at them.
//!
//! ```text
//! container  = header (headerSize bytes, 16 today) | entry* (fatSize bytes in all)
//! header     = magic u32 = 0xBA55ED50 | version u16 = 1 | headerSize u16 | fatSize u64
//! entry      = entry header (its own headerSize, 64 or more) | payload (size bytes, 8-aligned)
//! ```
//!
//! Entry header (little-endian; offsets from the entry's first byte):
//!
//! | off | type | field                | meaning                                                    |
//! |-----|------|----------------------|------------------------------------------------------------|
//! | 0   | u16  | kind                 | 1 PTX, 2 ELF (cubin), 4 old-style cubin, 8 NVVM IR / LTO-IR |
//! | 2   | u16  | entry version        | 0x0101                                                     |
//! | 4   | u32  | header size          | 64, more when options/identifier strings follow            |
//! | 8   | u64  | payload size         | bytes after the header up to the next entry (padded to 8)  |
//! | 16  | u32  | compressed size      | exact size of the compressed stream; 0 when uncompressed   |
//! | 20  | u32  | options offset       | from the entry start to `(u32 off, u32 len)` of the ptxas options, 0 if none |
//! | 24  | u16  | minor                | code version (PTX ISA, or ELF format `[1,7]`)              |
//! | 26  | u16  | major                |                                                            |
//! | 28  | u32  | arch                 | sm number (`sm_80` → 80)                                   |
//! | 32  | u32  | identifier offset    | from the entry start, 0 if none                            |
//! | 36  | u32  | identifier length    |                                                            |
//! | 40  | u64  | flags                | see the `FLAG_*` constants                                 |
//! | 48  | u64  | reserved             |                                                            |
//! | 56  | u64  | decompressed size    | exact size of the payload once decompressed                |
//!
//! A compressed payload starts right after the entry header and is `compressed size` bytes
//! of one raw LZ4 *block* (flag 0x2000: `-Xfatbin -compress-all` up to CUDA 12.x) or one
//! ZSTD *frame* (flag 0x8000: CUDA 12.8+ `-compress-mode=size`; CUDA 13.0 compresses PTX
//! entries this way by default, and cubins too under `-compress-all`, as the corpus in
//! `tests/corpus` shows), followed by zero padding up to `payload size`; it must decompress
//! to exactly `decompressed size` bytes. An uncompressed payload is `payload size`
//! bytes, padding included; PTX payloads here lose their trailing NULs and cubin payloads
//! are cut to the extent their own ELF headers give, so both come out byte-exact.
//!
//! Several containers may follow each other (zero padding between them is skipped), as in
//! a host ELF's `.nv_fatbin` section. The formats are NVIDIA's and undocumented; this layout
//! was checked against public reverse-engineering notes (cuda-fatbin-decompression, the
//! `fatbinary` crate, ZLUDA's fatbin reader) and nvcc output.

use super::ImageError;
use super::cubin;
use std::io::Read as _;

/// `FATBIN_MAGIC`: the first word of a fat binary container.
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// `FATBINC_MAGIC`: the first word of the wrapper struct nvcc's host stubs register.
pub const WRAPPER_MAGIC: u32 = 0x4662_43B1;
/// `FATBIN_VERSION`: the only container version there is.
const FATBIN_VERSION: u16 = 1;
/// Size of the container header (`fatBinaryHeader`).
const CONTAINER_HEADER_LEN: usize = 16;
/// Size of the fixed part of an entry header.
const ENTRY_HEADER_LEN: usize = 64;
/// Size of the wrapper struct on a 64-bit host: two `int`s and two pointers.
pub const WRAPPER_LEN: usize = 24;

/// `FATBIN_KIND_PTX`.
const KIND_PTX: u16 = 1;
/// `FATBIN_KIND_ELF`.
const KIND_ELF: u16 = 2;

/// Entry flag: 64-bit code.
pub const FLAG_64BIT: u64 = 0x1;
/// Entry flag: built with debug information (`-G`).
pub const FLAG_DEBUG: u64 = 0x2;
/// Entry flag: produced by CUDA.
pub const FLAG_CUDA: u64 = 0x4;
/// Entry flag: produced by OpenCL.
pub const FLAG_OPENCL: u64 = 0x8;
/// Entry flag: host is Linux.
pub const FLAG_LINUX: u64 = 0x10;
/// Entry flag: host is macOS.
pub const FLAG_MAC: u64 = 0x20;
/// Entry flag: host is Windows.
pub const FLAG_WINDOWS: u64 = 0x40;
/// Entry flags: optimization level.
pub const FLAG_OPT_MASK: u64 = 0xf00;
/// Entry flag: compressed, method not given by this bit alone (older toolkits).
pub const FLAG_COMPRESSED: u64 = 0x1000;
/// Entry flag: payload is one LZ4 block.
pub const FLAG_COMPRESSED_LZ4: u64 = 0x2000;
/// Entry flag: payload is one ZSTD frame.
pub const FLAG_COMPRESSED_ZSTD: u64 = 0x8000;

/// LZ4 cannot expand a block by more than this factor (a 1-byte token and a 1-byte
/// length extension per 255 output bytes), so a larger announced size is a lie.
const LZ4_MAX_RATIO: u64 = 255;

/// What an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// PTX text (`FATBIN_KIND_PTX`, 1).
    Ptx,
    /// An ELF cubin with SASS (`FATBIN_KIND_ELF`, 2).
    Cubin,
    /// Anything else, kind as found: 4 is the pre-ELF cubin format no toolkit still
    /// writes, 8 is NVVM IR (LTO-IR, `-dlto`).
    Other(u16),
}

impl EntryKind {
    /// The kind of a raw `kind` field.
    pub fn from_raw(kind: u16) -> EntryKind {
        match kind {
            KIND_PTX => EntryKind::Ptx,
            KIND_ELF => EntryKind::Cubin,
            k => EntryKind::Other(k),
        }
    }

    /// The raw `kind` field.
    pub fn raw(self) -> u16 {
        match self {
            EntryKind::Ptx => KIND_PTX,
            EntryKind::Cubin => KIND_ELF,
            EntryKind::Other(k) => k,
        }
    }
}

/// One entry of a fat binary container, payload decompressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FatbinEntry {
    /// What the payload is.
    pub kind: EntryKind,
    /// The target architecture (`sm_80` and `compute_80` are both 80).
    pub sm: u32,
    /// The code version `(major, minor)`: the PTX ISA version for PTX, the cubin format
    /// version (`[1,7]` and so on) for ELF.
    pub version: (u16, u16),
    /// Whether the payload was stored compressed.
    pub compressed: bool,
    /// The raw flags (`FLAG_*`).
    pub flags: u64,
    /// The identifier string (usually the source file name), if the entry has a
    /// non-empty one.
    pub identifier: Option<String>,
    /// The ptxas options string, if the entry has a non-empty one (nvcc 13 gives PTX
    /// entries an empty one).
    pub options: Option<String>,
    /// The payload, decompressed: PTX text without trailing NULs, or a cubin.
    pub payload: Vec<u8>,
    /// Byte offset of the entry header in the bytes given to the parser.
    pub offset: usize,
}

/// The wrapper struct (`__fatBinC_Wrapper_t`) as nvcc emits it for a 64-bit host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FatbinWrapper {
    /// 1: `data` is the fat binary; 2: relocatable device code, `filename_or_fatbins`
    /// lists prelinked fat binaries.
    pub version: u32,
    /// Address of the fat binary container.
    pub data: u64,
    /// Version 1: an offline file name or null; version 2: a null-terminated array of
    /// prelinked fat binaries.
    pub filename_or_fatbins: u64,
}

/// A little-endian reader over `bytes`, reporting offsets shifted by `base`.
#[derive(Clone, Copy)]
pub(crate) struct Le<'a> {
    pub bytes: &'a [u8],
    pub base: usize,
}

impl<'a> Le<'a> {
    /// The `N` bytes at `off`, or [`ImageError::Truncated`] naming `what`.
    pub fn array<const N: usize>(
        self,
        off: usize,
        what: &'static str,
    ) -> Result<[u8; N], ImageError> {
        self.bytes
            .get(off..)
            .and_then(|rest| rest.get(..N))
            .and_then(|s| <[u8; N]>::try_from(s).ok())
            .ok_or(ImageError::Truncated {
                what,
                off: self.base + off,
                need: N,
                have: self.bytes.len().saturating_sub(off),
            })
    }

    pub fn u16(self, off: usize, what: &'static str) -> Result<u16, ImageError> {
        self.array(off, what).map(u16::from_le_bytes)
    }

    pub fn u32(self, off: usize, what: &'static str) -> Result<u32, ImageError> {
        self.array(off, what).map(u32::from_le_bytes)
    }

    pub fn u64(self, off: usize, what: &'static str) -> Result<u64, ImageError> {
        self.array(off, what).map(u64::from_le_bytes)
    }
}

/// Reads the wrapper struct from its 24 bytes.
pub fn parse_wrapper(bytes: &[u8]) -> Result<FatbinWrapper, ImageError> {
    let r = Le { bytes, base: 0 };
    let magic = r.u32(0, "fatbin wrapper")?;
    if magic != WRAPPER_MAGIC {
        return Err(ImageError::BadMagic {
            what: "fatbin wrapper",
            off: 0,
            found: magic,
            expected: WRAPPER_MAGIC,
        });
    }
    let version = r.u32(4, "fatbin wrapper version")?;
    if !(1..=2).contains(&version) {
        return Err(ImageError::BadField {
            what: "fatbin wrapper version",
            off: 4,
            found: version.into(),
            expected: "1 or 2",
        });
    }
    Ok(FatbinWrapper {
        version,
        data: r.u64(8, "fatbin wrapper data pointer")?,
        filename_or_fatbins: r.u64(16, "fatbin wrapper filename_or_fatbins pointer")?,
    })
}

/// Length of the container at the start of `bytes` (its header and entries), from its
/// 16-byte header alone: `bytes` may stop right after the header.
pub fn container_len(bytes: &[u8]) -> Result<usize, ImageError> {
    let (header_size, fat_size) = container_fields(Le { bytes, base: 0 }, 0)?;
    usize::try_from(fat_size)
        .ok()
        .and_then(|s| s.checked_add(header_size))
        .ok_or(ImageError::BadField {
            what: "fatbin container size",
            off: 8,
            found: fat_size,
            expected: "a size that fits in memory",
        })
}

/// Checks the container header at `off`; returns its header size and `fatSize`.
fn container_fields(r: Le<'_>, off: usize) -> Result<(usize, u64), ImageError> {
    let magic = r.u32(off, "fatbin container header")?;
    if magic != FATBIN_MAGIC {
        return Err(ImageError::BadMagic {
            what: "fatbin container",
            off: r.base + off,
            found: magic,
            expected: FATBIN_MAGIC,
        });
    }
    let hdr = r.array::<CONTAINER_HEADER_LEN>(off, "fatbin container header")?;
    let version = u16::from_le_bytes([hdr[4], hdr[5]]);
    if version != FATBIN_VERSION {
        return Err(ImageError::BadField {
            what: "fatbin container version",
            off: r.base + off + 4,
            found: version.into(),
            expected: "1",
        });
    }
    let header_size = usize::from(u16::from_le_bytes([hdr[6], hdr[7]]));
    if header_size < CONTAINER_HEADER_LEN {
        return Err(ImageError::BadField {
            what: "fatbin container header size",
            off: r.base + off + 6,
            found: header_size as u64,
            expected: "at least 16",
        });
    }
    let mut fat_size = [0; 8];
    fat_size.copy_from_slice(&hdr[8..16]);
    Ok((header_size, u64::from_le_bytes(fat_size)))
}

/// Checks the container header at `off`; returns where its entries start and end.
fn container_header(r: Le<'_>, off: usize) -> Result<(usize, usize), ImageError> {
    let (header_size, fat_size) = container_fields(r, off)?;
    let start = off + header_size;
    let end = usize::try_from(fat_size)
        .ok()
        .and_then(|s| start.checked_add(s))
        .filter(|&end| end <= r.bytes.len())
        .ok_or(ImageError::PastEnd {
            what: "fatbin container",
            off: r.base + off,
            size: fat_size.saturating_add(header_size as u64),
            end: r.base + r.bytes.len(),
            container: "image",
        })?;
    Ok((start, end))
}

/// Parses every container in `bytes` (one after the other, zero padding between them
/// skipped) and returns all their entries in order.
pub fn parse_fatbin(bytes: &[u8]) -> Result<Vec<FatbinEntry>, ImageError> {
    Ok(parse_containers(bytes, 0)?.into_iter().flatten().collect())
}

/// Parses every container in `bytes`, one `Vec` of entries per container; offsets in
/// entries and errors are shifted by `base`.
pub(crate) fn parse_containers(
    bytes: &[u8],
    base: usize,
) -> Result<Vec<Vec<FatbinEntry>>, ImageError> {
    let r = Le { bytes, base };
    let mut containers = Vec::new();
    let mut off = 0;
    loop {
        if !containers.is_empty() {
            // Padding between containers (sections are aligned) and after the last.
            off += bytes[off..].iter().take_while(|&&b| b == 0).count();
            if off == bytes.len() {
                break;
            }
        }
        let (start, end) = container_header(r, off)?;
        tracing::debug!(offset = base + off, size = end - off, "fatbin container");
        containers.push(parse_entries(r, start, end)?);
        off = end;
    }
    Ok(containers)
}

/// Parses the entries in `start..end`.
fn parse_entries(r: Le<'_>, start: usize, end: usize) -> Result<Vec<FatbinEntry>, ImageError> {
    // The container's own bytes: entry fields may not reach past it.
    let c = Le {
        bytes: &r.bytes[..end],
        base: r.base,
    };
    let mut entries = Vec::new();
    let mut pos = start;
    while pos < end {
        let kind = c.u16(pos, "fatbin entry header")?;
        c.array::<ENTRY_HEADER_LEN>(pos, "fatbin entry header")?;
        let header_size = c.u32(pos + 4, "fatbin entry header")? as usize;
        if header_size < ENTRY_HEADER_LEN {
            return Err(ImageError::BadField {
                what: "fatbin entry header size",
                off: r.base + pos + 4,
                found: header_size as u64,
                expected: "at least 64",
            });
        }
        let data =
            pos.checked_add(header_size)
                .filter(|&d| d <= end)
                .ok_or(ImageError::PastEnd {
                    what: "fatbin entry header",
                    off: r.base + pos,
                    size: header_size as u64,
                    end: r.base + end,
                    container: "fatbin container",
                })?;
        let size = c.u64(pos + 8, "fatbin entry header")?;
        let next = usize::try_from(size)
            .ok()
            .and_then(|s| data.checked_add(s))
            .filter(|&n| n <= end)
            .ok_or(ImageError::PastEnd {
                what: "fatbin entry payload",
                off: r.base + data,
                size,
                end: r.base + end,
                container: "fatbin container",
            })?;
        let compressed_size = c.u32(pos + 16, "fatbin entry header")?;
        let options_off = c.u32(pos + 20, "fatbin entry header")? as usize;
        let minor = c.u16(pos + 24, "fatbin entry header")?;
        let major = c.u16(pos + 26, "fatbin entry header")?;
        let sm = c.u32(pos + 28, "fatbin entry header")?;
        let ident_off = c.u32(pos + 32, "fatbin entry header")? as usize;
        let ident_len = c.u32(pos + 36, "fatbin entry header")? as usize;
        let flags = c.u64(pos + 40, "fatbin entry header")?;
        let decompressed_size = c.u64(pos + 56, "fatbin entry header")?;

        // Strings live in the entry (its header, in practice); a bad one is dropped
        // rather than failing the image, since the driver never looks at them.
        let entry = &r.bytes[pos..next];
        let identifier = (ident_off != 0)
            .then(|| entry_string(entry, ident_off, ident_len, r.base + pos, "identifier"))
            .flatten();
        let options = (options_off != 0)
            .then(|| {
                let at = Le {
                    bytes: entry,
                    base: r.base + pos,
                };
                let o = at.u32(options_off, "options").ok()? as usize;
                let n = at.u32(options_off + 4, "options").ok()? as usize;
                (o != 0)
                    .then(|| entry_string(entry, o, n, r.base + pos, "options"))
                    .flatten()
            })
            .flatten();

        let kind = EntryKind::from_raw(kind);
        let method = compression(flags, compressed_size, r.base + pos)?;
        let payload = match method {
            None => r.bytes[data..next].to_vec(),
            Some(method) => {
                let stream = usize::try_from(compressed_size)
                    .ok()
                    .and_then(|n| r.bytes[data..next].get(..n))
                    .ok_or(ImageError::PastEnd {
                        what: "fatbin entry compressed payload",
                        off: r.base + data,
                        size: compressed_size.into(),
                        end: r.base + next,
                        container: "fatbin entry",
                    })?;
                decompress(method, stream, decompressed_size, r.base + pos)?
            }
        };
        let payload = trim_payload(kind, payload);
        tracing::trace!(
            offset = r.base + pos,
            ?kind,
            sm,
            flags,
            compressed = method.is_some(),
            len = payload.len(),
            "fatbin entry"
        );
        entries.push(FatbinEntry {
            kind,
            sm,
            version: (major, minor),
            compressed: method.is_some(),
            flags,
            identifier,
            options,
            payload,
            offset: r.base + pos,
        });
        pos = next;
    }
    Ok(entries)
}

/// The string of `len` bytes at `off` in `entry`, up to its first NUL; `None` when it is
/// empty, or (with a warning) when it does not fit.
fn entry_string(
    entry: &[u8],
    off: usize,
    len: usize,
    entry_off: usize,
    what: &'static str,
) -> Option<String> {
    let Some(s) = entry.get(off..).and_then(|rest| rest.get(..len)) else {
        tracing::warn!(
            entry = entry_off,
            off,
            len,
            entry_len = entry.len(),
            "fatbin entry {what} string lies outside its entry; ignored"
        );
        return None;
    };
    let s = s.split(|&b| b == 0).next().unwrap_or_default();
    (!s.is_empty()).then(|| String::from_utf8_lossy(s).into_owned())
}

/// A payload compression method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Lz4,
    Zstd,
}

/// The compression method the flags announce, if any. The old bit 0x1000 alone is
/// taken as "compressed" only when there is a compressed size too.
fn compression(flags: u64, compressed_size: u32, off: usize) -> Result<Option<Method>, ImageError> {
    if flags & FLAG_COMPRESSED_ZSTD != 0 {
        Ok(Some(Method::Zstd))
    } else if flags & FLAG_COMPRESSED_LZ4 != 0 {
        Ok(Some(Method::Lz4))
    } else if flags & FLAG_COMPRESSED != 0 && compressed_size != 0 {
        Err(ImageError::UnknownCompression { off, flags })
    } else {
        Ok(None)
    }
}

/// Decompresses the payload of the entry at `off`, which must come out `expected` bytes.
fn decompress(
    method: Method,
    stream: &[u8],
    expected: u64,
    off: usize,
) -> Result<Vec<u8>, ImageError> {
    let out = match method {
        Method::Lz4 => {
            let bound = (stream.len() as u64)
                .saturating_mul(LZ4_MAX_RATIO)
                .saturating_add(16);
            let n = usize::try_from(expected)
                .ok()
                .filter(|_| expected <= bound)
                .ok_or(ImageError::BadField {
                    what: "fatbin entry decompressed size",
                    off: off + 56,
                    found: expected,
                    expected: "at most 255 times the compressed size (the lz4 bound)",
                })?;
            let mut out = vec![0; n];
            let got = lz4_flex::block::decompress_into(stream, &mut out)
                .map_err(|source| ImageError::Lz4 { off, source })?;
            out.truncate(got);
            out
        }
        Method::Zstd => {
            // Never allocate more than the stream really produces (plus one byte to see
            // that it would produce more than announced).
            let limit = expected.saturating_add(1);
            let run = || -> Result<Vec<u8>, String> {
                let decoder =
                    ruzstd::decoding::StreamingDecoder::new(stream).map_err(|e| e.to_string())?;
                let mut out = Vec::new();
                decoder
                    .take(limit)
                    .read_to_end(&mut out)
                    .map_err(|e| e.to_string())?;
                Ok(out)
            };
            // A decoder bug on hostile input must not take the host application down.
            std::panic::catch_unwind(run)
                .unwrap_or_else(|_| Err("decoder panicked".to_string()))
                .map_err(|msg| ImageError::Zstd { off, msg })?
        }
    };
    if out.len() as u64 != expected {
        return Err(ImageError::SizeMismatch {
            off,
            found: out.len(),
            expected,
        });
    }
    Ok(out)
}

/// Drops padding: trailing NULs of PTX, bytes past a cubin's own extent.
fn trim_payload(kind: EntryKind, mut payload: Vec<u8>) -> Vec<u8> {
    match kind {
        EntryKind::Ptx => {
            let n = payload.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            payload.truncate(n);
        }
        EntryKind::Cubin => {
            if let Some(n) = cubin::elf_extent_of(&payload) {
                payload.truncate(n);
            }
        }
        EntryKind::Other(_) => {}
    }
    payload
}
