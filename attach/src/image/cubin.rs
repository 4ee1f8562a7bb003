//! Cubins: ELF64 little-endian objects with `e_machine` 190 (`EM_CUDA`) holding SASS.
//!
//! | what             | where                                                                  |
//! |------------------|------------------------------------------------------------------------|
//! | architecture     | `e_flags`: bits 0..8 when `EI_ABIVERSION` is 7 (`ELFABIVERSION_CUDA_V1`), bits 8..16 from version 8 on (Blackwell and CUDA 13) |
//! | a function       | an `STT_FUNC` symbol whose section is `.text.<name>`                   |
//! | a kernel (entry) | such a function with `STO_CUDA_ENTRY` (0x10) in `st_other`; in a cubin where no symbol has that bit, one with a `.nv.info.<name>` section (per-kernel attributes: parameter layout, register count) |
//! | a device function| any other function (non-inlined `__device__` code, `-rdc`)            |
//! | image length     | the furthest end of the ELF header, program and section header tables, section contents and segments |
//!
//! Names are the mangled symbol names, as `cuModuleGetFunction` takes them.

use super::ImageError;
use object::LittleEndian as Le;
use object::elf;
use object::read::elf::{FileHeader as _, Sym as _};
use std::collections::HashSet;

/// `e_ident` index of the class byte.
pub(crate) const EI_CLASS: usize = 4;
/// `e_ident` index of the data-encoding byte.
pub(crate) const EI_DATA: usize = 5;
/// `e_ident` index of the ABI version byte.
const EI_ABIVERSION: usize = 8;
/// `EM_CUDA`.
pub const EM_CUDA: u16 = 190;
/// `STO_CUDA_ENTRY`: `st_other` bit of a kernel symbol.
const STO_CUDA_ENTRY: u8 = 0x10;
/// `ELFABIVERSION_CUDA_V1`: the architecture is in the low byte of `e_flags`.
const ELFABIVERSION_CUDA_V1: u8 = 7;
/// Section header tables larger than this are refused when measuring an image.
const MAX_SECTIONS: u64 = 1 << 20;

/// What a loader needs from a cubin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CubinInfo {
    /// The SASS architecture (`sm_90` → 90).
    pub sm: u32,
    /// Mangled names of the kernels (`__global__` functions), in symbol table order.
    pub kernels: Vec<String>,
    /// Mangled names of the other functions with their own `.text.<name>` section.
    pub device_functions: Vec<String>,
}

/// Reads the architecture and the kernel names of a cubin.
pub fn cubin_info(bytes: &[u8]) -> Result<CubinInfo, ImageError> {
    cubin_info_at(bytes, 0)
}

/// [`cubin_info`] for a cubin found at byte offset `base` (errors name that offset).
pub(crate) fn cubin_info_at(bytes: &[u8], base: usize) -> Result<CubinInfo, ImageError> {
    let not_cubin = |found: String| ImageError::NotCubin { off: base, found };
    if bytes.len() < 64 {
        return Err(ImageError::Truncated {
            what: "cubin elf header",
            off: base,
            need: 64,
            have: bytes.len(),
        });
    }
    if bytes[..4] != elf::ELFMAG {
        return Err(not_cubin(format!("first bytes {:02x?}", &bytes[..4])));
    }
    if bytes[EI_CLASS] != elf::ELFCLASS64 {
        return Err(not_cubin(format!("elf class {}", bytes[EI_CLASS])));
    }
    if bytes[EI_DATA] != elf::ELFDATA2LSB {
        return Err(not_cubin(format!("elf data encoding {}", bytes[EI_DATA])));
    }
    let oerr = |source| ImageError::Elf {
        what: "cubin",
        off: base,
        source,
    };
    let header = elf::FileHeader64::<Le>::parse(bytes).map_err(oerr)?;
    let endian = Le;
    let machine = header.e_machine(endian);
    if machine != EM_CUDA {
        return Err(not_cubin(format!("e_machine {machine}")));
    }
    let sm = sm_from_flags(bytes[EI_ABIVERSION], header.e_flags(endian));
    let sections = header.sections(endian, bytes).map_err(oerr)?;
    let mut names = Vec::with_capacity(sections.len());
    for sh in sections.iter() {
        let name = sections.section_name(endian, sh).map_err(oerr)?;
        names.push(String::from_utf8_lossy(name).into_owned());
    }
    let infos: HashSet<&str> = names
        .iter()
        .filter_map(|n| n.strip_prefix(".nv.info."))
        .collect();
    let symtab = sections
        .symbols(endian, bytes, elf::SHT_SYMTAB)
        .map_err(oerr)?;
    // Functions in their own `.text.<name>`, with their STO_CUDA_ENTRY bit.
    let mut funcs = Vec::new();
    for (idx, sym) in symtab.enumerate() {
        if sym.st_type() != elf::STT_FUNC {
            continue;
        }
        let Ok(Some(sec)) = symtab.symbol_section(endian, sym, idx) else {
            continue;
        };
        let name = symtab.symbol_name(endian, sym).map_err(oerr)?;
        let name = String::from_utf8_lossy(name).into_owned();
        let in_own_text = names
            .get(sec.0)
            .and_then(|s| s.strip_prefix(".text."))
            .is_some_and(|s| s == name);
        if in_own_text {
            funcs.push((name, sym.st_other() & STO_CUDA_ENTRY != 0));
        }
    }
    // ptxas marks every kernel; only a cubin with no mark at all falls back to
    // `.nv.info.<name>` (which relocatable device functions may have too).
    let marked = funcs.iter().any(|(_, entry)| *entry);
    let mut info = CubinInfo {
        sm,
        ..CubinInfo::default()
    };
    for (name, entry) in funcs {
        if entry || (!marked && infos.contains(name.as_str())) {
            info.kernels.push(name);
        } else {
            info.device_functions.push(name);
        }
    }
    tracing::debug!(
        sm,
        kernels = info.kernels.len(),
        device_functions = info.device_functions.len(),
        "cubin"
    );
    Ok(info)
}

/// The architecture in `e_flags`, by the ELF ABI version. An unknown ABI version is read
/// the old way when its low byte is an sm number that way (`sm_20`..`sm_90`).
pub fn sm_from_flags(abi_version: u8, flags: u32) -> u32 {
    let low = flags & 0xff;
    let high = (flags >> 8) & 0xff;
    match abi_version {
        ELFABIVERSION_CUDA_V1 => low,
        v if v > ELFABIVERSION_CUDA_V1 => high,
        _ if (0x14..=0x5a).contains(&low) => low,
        _ => high,
    }
}

/// Reads `len` bytes at `off` of an image, or `None` if they are not there.
pub(crate) type ReadAt<'a> = &'a dyn Fn(usize, usize) -> Option<Vec<u8>>;

/// The extent of the ELF64 little-endian image that `read` gives access to: the end of
/// whatever its headers point at. `None` if it is no such ELF or the headers are
/// inconsistent.
pub(crate) fn elf_extent(read: ReadAt<'_>) -> Option<usize> {
    let h = read(0, 64)?;
    if h.get(..4)? != elf::ELFMAG
        || *h.get(EI_CLASS)? != elf::ELFCLASS64
        || *h.get(EI_DATA)? != elf::ELFDATA2LSB
    {
        return None;
    }
    let phoff = u64_at(&h, 0x20)?;
    let shoff = u64_at(&h, 0x28)?;
    let phentsize = u64::from(u16_at(&h, 0x36)?);
    let phnum = u64::from(u16_at(&h, 0x38)?);
    let shentsize = u64::from(u16_at(&h, 0x3a)?);
    let mut shnum = u64::from(u16_at(&h, 0x3c)?);
    let mut end = 64u64;
    if phnum > 0 {
        if phentsize < 56 {
            return None;
        }
        let len = phnum.checked_mul(phentsize)?;
        end = end.max(phoff.checked_add(len)?);
        let tab = read(usize::try_from(phoff).ok()?, usize::try_from(len).ok()?)?;
        for i in 0..phnum {
            let p = usize::try_from(i * phentsize).ok()?;
            let off = u64_at(&tab, p + 8)?;
            let filesz = u64_at(&tab, p + 0x20)?;
            end = end.max(off.checked_add(filesz)?);
        }
    }
    if shoff != 0 {
        if shentsize < 64 {
            return None;
        }
        if shnum == 0 {
            // Extended numbering: the count is in section 0's sh_size.
            let first = read(usize::try_from(shoff).ok()?, 64)?;
            shnum = u64_at(&first, 0x20)?;
        }
        if shnum > MAX_SECTIONS {
            return None;
        }
        let len = shnum.checked_mul(shentsize)?;
        end = end.max(shoff.checked_add(len)?);
        let tab = read(usize::try_from(shoff).ok()?, usize::try_from(len).ok()?)?;
        for i in 0..shnum {
            let s = usize::try_from(i * shentsize).ok()?;
            if u32_at(&tab, s + 4)? == elf::SHT_NOBITS {
                continue;
            }
            let off = u64_at(&tab, s + 0x18)?;
            let size = u64_at(&tab, s + 0x20)?;
            end = end.max(off.checked_add(size)?);
        }
    }
    usize::try_from(end).ok()
}

/// [`elf_extent`] of an ELF in a slice; `None` also when the extent passes its end.
pub(crate) fn elf_extent_of(bytes: &[u8]) -> Option<usize> {
    elf_extent(&|off, len| {
        bytes
            .get(off..)
            .and_then(|rest| rest.get(..len))
            .map(<[u8]>::to_vec)
    })
    .filter(|&n| n <= bytes.len())
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
}
