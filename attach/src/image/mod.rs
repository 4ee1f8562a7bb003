//! GPU images: recognising and unpacking every form in which GPU code reaches the CUDA
//! driver (`cuModuleLoadData[Ex]`, `cuModuleLoadFatBinary`, `cuLibraryLoadData`,
//! `cuLinkAddData` all take a bare `const void *image`).
//!
//! ```text
//! const void *image ──[image_bytes]──▶ (ImageKind, &[u8]) ──[unpack]──▶ Unpacked { ptx, cubins }
//!                                                                            │
//!                                   device sm ──────────────[best_ptx]───────┘──▶ PTX to JIT
//! ```
//!
//! | kind                     | recognised by                                    | length (`image_len`)                    | module        |
//! |--------------------------|--------------------------------------------------|-----------------------------------------|---------------|
//! | [`ImageKind::Ptx`]       | whitespace/comments, then `.version`             | up to and including the NUL             | `ptx`         |
//! | [`ImageKind::FatbinWrapper`] | magic `0x466243B1` (`__fatBinC_Wrapper_t`)   | that of the container its `data` points to | [`fatbin`] |
//! | [`ImageKind::Fatbin`]    | magic `0xBA55ED50`                               | header size + `fatSize`                 | [`fatbin`]    |
//! | [`ImageKind::Cubin`]     | `\x7fELF`, `e_machine` 190 (`EM_CUDA`)           | furthest end of headers, sections, segments | [`cubin`] |
//! | [`ImageKind::HostElf`]   | `\x7fELF`, any other machine (offline use only)  | as for a cubin                          | [`host`]      |
//!
//! A wrapper's `data` is followed by [`image_bytes`] and [`wrapper_fatbin`]; a version-2
//! wrapper (relocatable device code) also lists prelinked containers, which
//! [`wrapper_prelinked`] returns. Wrappers are read as nvcc lays them out for 64-bit
//! little-endian hosts.
//!
//! Everything taking a byte slice is safe and total: bad input yields [`ImageError`], never
//! a panic. Only the `unsafe fn`s ([`image_len`], [`image_bytes`], [`wrapper_fatbin`],
//! [`wrapper_prelinked`]) read through raw pointers, and they trust the image's own headers
//! to say how far they may read.

pub mod cubin;
mod error;
pub mod fatbin;
pub mod host;
mod ptx;

pub use cubin::{CubinInfo, cubin_info};
pub use error::ImageError;
pub use fatbin::{EntryKind, FatbinEntry, FatbinWrapper, parse_fatbin, parse_wrapper};
pub use host::host_elf_fatbins;
pub use ptx::ptx_target_sm;

use fatbin::{FATBIN_MAGIC, WRAPPER_LEN, WRAPPER_MAGIC};
use object::elf;

/// The form of an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImageKind {
    /// NUL-terminated PTX text.
    Ptx,
    /// The wrapper struct nvcc's host stubs pass; it points at a [`ImageKind::Fatbin`].
    FatbinWrapper,
    /// A fat binary container (possibly followed by more).
    Fatbin,
    /// An ELF cubin (SASS for one architecture).
    Cubin,
    /// A host ELF with `.nv_fatbin` / `__nv_relfatbin` sections (never passed to the
    /// driver; for offline tools and tests).
    HostElf,
}

/// Recognises the kind of an image from its first bytes (PTX: from its text up to the
/// first NUL).
pub fn classify(bytes: &[u8]) -> Option<ImageKind> {
    let first = *bytes.first()?;
    if ptx::is_ptx_start(first) {
        return ptx::looks_like_ptx(bytes).then_some(ImageKind::Ptx);
    }
    let magic = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?);
    match magic {
        WRAPPER_MAGIC if bytes.len() >= WRAPPER_LEN => Some(ImageKind::FatbinWrapper),
        FATBIN_MAGIC => Some(ImageKind::Fatbin),
        _ if bytes.starts_with(&elf::ELFMAG) => {
            let m = bytes.get(18..20)?;
            let machine = match *bytes.get(cubin::EI_DATA)? {
                elf::ELFDATA2MSB => u16::from_be_bytes([m[0], m[1]]),
                _ => u16::from_le_bytes([m[0], m[1]]),
            };
            Some(if machine == cubin::EM_CUDA {
                ImageKind::Cubin
            } else {
                ImageKind::HostElf
            })
        }
        _ => None,
    }
}

/// Where an image's bytes are: its kind, their start and their length.
///
/// # Safety
/// As for [`image_len`].
unsafe fn locate(ptr: *const u8) -> Option<(ImageKind, *const u8, usize)> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees a valid image, which has at least one byte.
    let first = unsafe { *ptr };
    if ptx::is_ptx_start(first) {
        // SAFETY: a valid PTX image is NUL-terminated.
        let text = unsafe { std::ffi::CStr::from_ptr(ptr.cast()) }.to_bytes();
        return ptx::looks_like_ptx(text).then_some((ImageKind::Ptx, ptr, text.len() + 1));
    }
    // SAFETY: every binary image starts with a 4-byte magic.
    let magic = unsafe { read_at(ptr, 0, 4) }?;
    let magic = u32::from_le_bytes(magic.try_into().ok()?);
    match magic {
        WRAPPER_MAGIC => {
            // SAFETY: a valid wrapper is the whole 24-byte struct.
            let w = parse_wrapper(&unsafe { read_at(ptr, 0, WRAPPER_LEN) }?).ok()?;
            let data = usize::try_from(w.data).ok()? as *const u8;
            // SAFETY: a valid wrapper's `data` points at a valid fat binary, whose 16-byte
            // header is readable; checking it first also keeps a wrapper that points at a
            // wrapper from recursing.
            let len = unsafe { fatbin_len(data) }?;
            Some((ImageKind::FatbinWrapper, data, len))
        }
        FATBIN_MAGIC => {
            // SAFETY: forwarded from the caller (a valid fat binary).
            let len = unsafe { fatbin_len(ptr) }?;
            Some((ImageKind::Fatbin, ptr, len))
        }
        _ if magic.to_le_bytes() == elf::ELFMAG => {
            // SAFETY: a valid ELF image holds everything its headers point at, which is
            // all that elf_extent asks for (it checks the ELF header first).
            let len = cubin::elf_extent(&|off, len| unsafe { read_at(ptr, off, len) })
                .filter(|&n| n <= isize::MAX as usize)?;
            // SAFETY: the extent was just measured from the image's own headers.
            let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
            Some((classify(bytes)?, ptr, len))
        }
        _ => None,
    }
}

/// Length of the fat binary container at `ptr`, `None` if there is none.
///
/// # Safety
/// `ptr` must be null or point to 16 readable bytes.
unsafe fn fatbin_len(ptr: *const u8) -> Option<usize> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees a readable 16-byte header.
    let header = unsafe { read_at(ptr, 0, 16) }?;
    fatbin::container_len(&header)
        .ok()
        .filter(|&n| n <= isize::MAX as usize)
}

/// Copies `len` bytes at `ptr + off`; `None` when the range is not addressable.
///
/// # Safety
/// Those bytes must be readable.
unsafe fn read_at(ptr: *const u8, off: usize, len: usize) -> Option<Vec<u8>> {
    let end = off.checked_add(len)?;
    if end > isize::MAX as usize || (ptr as usize).checked_add(end).is_none() {
        return None;
    }
    // SAFETY: the caller guarantees these bytes are readable; the range was checked not
    // to wrap around the address space.
    Some(unsafe { std::slice::from_raw_parts(ptr.add(off), len) }.to_vec())
}

/// Length of the image at `ptr`, read from its own headers: PTX up to and including its
/// NUL; a fat binary its header size plus `fatSize` (the first container only); a cubin
/// the furthest end of its header tables, sections and segments. For a wrapper, this is
/// the length of the fat binary its `data` points to (see [`image_bytes`] for where that
/// is). `None` when the bytes are no image.
///
/// # Safety
/// `ptr` must be null or point to a valid image of one of the [`ImageKind`]s: every byte
/// its headers describe must be readable (for a wrapper, `data` must point to a valid fat
/// binary).
pub unsafe fn image_len(ptr: *const u8) -> Option<usize> {
    // SAFETY: forwarded from the caller.
    unsafe { locate(ptr) }.map(|(_, _, len)| len)
}

/// The bytes of the image at `ptr`, ready for [`unpack`], with the kind found at `ptr`.
/// For a wrapper the bytes are those of the fat binary its `data` points to (the kind
/// says [`ImageKind::FatbinWrapper`]).
///
/// # Safety
/// As for [`image_len`]; moreover the image must stay alive and unchanged for `'a`.
pub unsafe fn image_bytes<'a>(ptr: *const u8) -> Option<(ImageKind, &'a [u8])> {
    // SAFETY: forwarded from the caller.
    let (kind, start, len) = unsafe { locate(ptr) }?;
    // SAFETY: `locate` measured `len` bytes at `start` from the image's own headers; the
    // caller guarantees they are readable and live for 'a.
    Some((kind, unsafe { std::slice::from_raw_parts(start, len) }))
}

/// The fat binary a wrapper points to (`None` if `ptr` is no wrapper).
///
/// # Safety
/// As for [`image_bytes`].
pub unsafe fn wrapper_fatbin<'a>(ptr: *const u8) -> Option<&'a [u8]> {
    // SAFETY: forwarded from the caller.
    match unsafe { image_bytes(ptr) }? {
        (ImageKind::FatbinWrapper, bytes) => Some(bytes),
        _ => None,
    }
}

/// Most prelinked fat binaries a version-2 wrapper may list before the list is taken to be
/// corrupt.
const MAX_PRELINKED: usize = 1 << 16;

/// The prelinked fat binaries of a version-2 wrapper (relocatable device code, `-rdc`):
/// its `filename_or_fatbins` is a null-terminated array of pointers to containers. Empty
/// for a version-1 wrapper; `None` if `ptr` is no wrapper or an element is no container.
///
/// # Safety
/// As for [`image_bytes`]; for version 2, the array and every container it lists must be
/// valid too.
pub unsafe fn wrapper_prelinked<'a>(ptr: *const u8) -> Option<Vec<&'a [u8]>> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees a valid wrapper: 24 readable bytes.
    let w = parse_wrapper(&unsafe { read_at(ptr, 0, WRAPPER_LEN) }?).ok()?;
    let list = usize::try_from(w.filename_or_fatbins).ok()? as *const u8;
    let mut out = Vec::new();
    if w.version != 2 || list.is_null() {
        return Some(out);
    }
    for i in 0..MAX_PRELINKED {
        // SAFETY: a valid version-2 list is readable up to and including its null.
        let p = unsafe { read_at(list, i * 8, 8) }?;
        let p = usize::try_from(u64::from_le_bytes(p.try_into().ok()?)).ok()? as *const u8;
        if p.is_null() {
            return Some(out);
        }
        // SAFETY: each listed pointer is a valid container, alive for 'a.
        let len = unsafe { fatbin_len(p) }?;
        // SAFETY: `len` bytes measured from the container's own header.
        out.push(unsafe { std::slice::from_raw_parts(p, len) });
    }
    None
}

/// What a loader should do with an image: every PTX module and every cubin in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unpacked {
    /// PTX modules with their architecture (the fat binary entry's, or for bare PTX its
    /// `.target`, 0 if none).
    pub ptx: Vec<(u32, String)>,
    /// Cubins with their architecture (the fat binary entry's, or the cubin's `e_flags`).
    pub cubins: Vec<(u32, CubinInfo)>,
}

impl Unpacked {
    fn add_entries(&mut self, entries: &[FatbinEntry]) -> Result<(), ImageError> {
        for e in entries {
            match e.kind {
                EntryKind::Ptx => self.ptx.push((e.sm, ptx_string(&e.payload, e.offset)?)),
                EntryKind::Cubin => {
                    let info = cubin::cubin_info_at(&e.payload, e.offset)?;
                    if info.sm != e.sm {
                        tracing::warn!(
                            offset = e.offset,
                            entry_sm = e.sm,
                            elf_sm = info.sm,
                            "fatbin entry and its cubin disagree on the architecture"
                        );
                    }
                    self.cubins.push((e.sm, info));
                }
                EntryKind::Other(kind) => {
                    tracing::debug!(offset = e.offset, kind, "fatbin entry skipped");
                }
            }
        }
        Ok(())
    }
}

/// PTX text up to its first NUL, as a `String`.
fn ptx_string(bytes: &[u8], off: usize) -> Result<String, ImageError> {
    std::str::from_utf8(ptx::text(bytes))
        .map(str::to_string)
        .map_err(|source| ImageError::PtxNotUtf8 { off, source })
}

/// Unpacks an image given as bytes: PTX, a fat binary (all containers that follow each
/// other), a cubin, or a host ELF. A wrapper holds pointers: pass the bytes
/// [`image_bytes`] gives for it instead.
pub fn unpack(bytes: &[u8]) -> Result<Unpacked, ImageError> {
    let mut out = Unpacked::default();
    match classify(bytes) {
        Some(ImageKind::Ptx) => {
            let text = ptx_string(bytes, 0)?;
            out.ptx.push((ptx_target_sm(&text).unwrap_or(0), text));
        }
        Some(ImageKind::Fatbin) => out.add_entries(&parse_fatbin(bytes)?)?,
        Some(ImageKind::Cubin) => {
            let info = cubin_info(bytes)?;
            out.cubins.push((info.sm, info));
        }
        Some(ImageKind::HostElf) => {
            for container in host_elf_fatbins(bytes)? {
                out.add_entries(&container)?;
            }
        }
        Some(ImageKind::FatbinWrapper) => return Err(ImageError::Wrapper),
        None => {
            return Err(ImageError::Unrecognized {
                found: bytes.iter().take(8).copied().collect(),
            });
        }
    }
    tracing::debug!(
        ptx = out.ptx.len(),
        cubins = out.cubins.len(),
        "image unpacked"
    );
    Ok(out)
}

/// The PTX to JIT for a device of compute capability `sm` (`8.6` → 86): the entry with
/// the highest architecture not above `sm` (the first such on a tie), if any.
pub fn best_ptx(unpacked: &Unpacked, sm: u32) -> Option<&str> {
    let mut best: Option<&(u32, String)> = None;
    for p in unpacked.ptx.iter().filter(|(s, _)| *s <= sm) {
        if best.is_none_or(|b| p.0 > b.0) {
            best = Some(p);
        }
    }
    best.map(|(_, text)| text.as_str())
}
