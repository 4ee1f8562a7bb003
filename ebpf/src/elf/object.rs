//! Parsing an ELF64 little-endian `EM_BPF` relocatable object into an [`Object`].
//!
//! | section                              | role      | what the loader takes            |
//! |--------------------------------------|-----------|----------------------------------|
//! | executable, not `.text`              | `program` | each FUNC symbol is a program    |
//! | `.text`                              | `text`    | subprograms for bpf-to-bpf calls |
//! | `.maps` / `maps`                     | `maps`    | BTF / legacy map definitions     |
//! | `.rodata*`, `.data*`, `.bss*`        | `data`    | one-entry array maps             |
//! | `license`                            | `license` | the NUL-terminated string        |
//! | `.BTF`, `.BTF.ext`                   | `btf`     | `.BTF` for map definitions       |
//! | REL / RELA                           | `reloc`   | relocations of code sections     |
//!
//! Everything is copied out of the file at parse time; relocations of code sections are
//! resolved then too (see `reloc.rs`), so [`Object::program`] only links.

use super::btf::Btf;
use super::maps::{btf_map, global_data, global_data_kind, legacy_map};
use super::reloc::{self, Fix};
use super::{ElfError, ProgramInfo, SectionInfo};
use crate::isa::{INSN_SIZE, Insn};
use crate::program::{MapDef, ProgKind, Program};
use object::LittleEndian as Le;
use object::elf;
use object::read::elf::{FileHeader, Rel as _, Rela as _, SectionHeader as _, Sym as _};
use std::collections::{BTreeMap, HashMap};

/// Global-data sections larger than this are refused (they are allocated as maps).
const MAX_DATA_SECTION: u64 = 64 << 20;

/// `R_BPF_NONE`.
pub(super) const R_BPF_NONE: u32 = 0;
/// `R_BPF_64_64`: the 64-bit immediate of `ld_imm64`.
pub(super) const R_BPF_64_64: u32 = 1;
/// `R_BPF_64_32`: the 32-bit immediate of a bpf-to-bpf `call`.
pub(super) const R_BPF_64_32: u32 = 10;

/// A symbol, copied out of `.symtab`.
#[derive(Clone, Debug)]
pub(super) struct Sym {
    pub name: String,
    pub section: Option<usize>,
    pub value: u64,
    pub size: u64,
    pub st_type: u8,
}

/// One function of a code section: slots `start..end`.
#[derive(Clone, Debug)]
pub(super) struct Func {
    pub name: String,
    pub start: usize,
    pub end: usize,
}

/// An executable section with its functions and resolved relocations.
#[derive(Clone, Debug)]
pub(super) struct CodeSection {
    pub name: String,
    pub insns: Vec<Insn>,
    /// Functions sorted by start.
    pub funcs: Vec<Func>,
    /// Resolved relocations by slot index.
    pub fixes: BTreeMap<usize, Fix>,
}

impl CodeSection {
    /// The function starting at slot `start`.
    pub fn func_at(&self, start: usize) -> Option<usize> {
        self.funcs.iter().position(|f| f.start == start)
    }
}

/// A parsed object file.
#[derive(Clone, Debug)]
pub struct Object {
    /// File name.
    pub file: String,
    /// Programs, in section order.
    pub programs: Vec<ProgramInfo>,
    /// Maps: BTF, legacy and global data, in that order; relocated `ld_imm64` index this.
    pub maps: Vec<MapDef>,
    /// License string.
    pub license: Option<String>,
    /// Every section.
    pub sections: Vec<SectionInfo>,
    /// Code sections by ELF section index.
    pub(super) code: BTreeMap<usize, CodeSection>,
}

fn machine_name(m: u16) -> &'static str {
    match m {
        elf::EM_NONE => "none",
        elf::EM_386 => "x86",
        elf::EM_ARM => "arm",
        elf::EM_X86_64 => "x86-64",
        elf::EM_AARCH64 => "aarch64",
        elf::EM_RISCV => "risc-v",
        elf::EM_PPC64 => "ppc64",
        elf::EM_S390 => "s390",
        elf::EM_BPF => "bpf",
        _ => "unknown",
    }
}

/// Symbols in `section` with a name that are data objects, sorted by value.
fn data_symbols(syms: &[Sym], section: usize) -> Vec<&Sym> {
    let mut v: Vec<&Sym> = syms
        .iter()
        .filter(|s| {
            s.section == Some(section)
                && !s.name.is_empty()
                && matches!(s.st_type, elf::STT_OBJECT | elf::STT_NOTYPE)
        })
        .collect();
    v.sort_by_key(|s| s.value);
    v
}

impl Object {
    /// Parses an ELF object.
    pub fn parse(bytes: &[u8], file: &str) -> Result<Object, ElfError> {
        let malformed = |msg: String| ElfError::Malformed {
            file: file.to_string(),
            msg,
        };
        let oerr = |what: &str, e: object::Error| malformed(format!("{what}: {e}"));
        if !super::is_elf(bytes) {
            let n = bytes.len().min(4);
            return Err(ElfError::NotElf {
                file: file.to_string(),
                found: format!(
                    "first bytes {:02x?}, expected 7f 45 4c 46 (\\x7fELF)",
                    &bytes[..n]
                ),
            });
        }
        let unsupported = |msg: String| ElfError::Unsupported {
            file: file.to_string(),
            msg,
        };
        match bytes.get(4) {
            Some(&elf::ELFCLASS64) => {}
            Some(&c) => {
                return Err(unsupported(format!(
                    "class {c} (32-bit or unknown), expected 2 (ELF64)"
                )));
            }
            None => return Err(malformed("header truncated".into())),
        }
        match bytes.get(5) {
            Some(&elf::ELFDATA2LSB) => {}
            Some(&d) => {
                return Err(unsupported(format!(
                    "data encoding {d} (big-endian or unknown), expected 1 (little-endian)"
                )));
            }
            None => return Err(malformed("header truncated".into())),
        }
        let header = elf::FileHeader64::<Le>::parse(bytes).map_err(|e| oerr("header", e))?;
        let endian = header.endian().map_err(|e| oerr("header", e))?;
        let machine = header.e_machine(endian);
        if machine != elf::EM_BPF {
            return Err(ElfError::WrongMachine {
                file: file.to_string(),
                found: machine,
                name: machine_name(machine).to_string(),
            });
        }
        let e_type = header.e_type(endian);
        if e_type != elf::ET_REL {
            return Err(unsupported(format!(
                "e_type {e_type}, expected 1 (ET_REL, a relocatable object as clang -c writes)"
            )));
        }
        let sections = header
            .sections(endian, bytes)
            .map_err(|e| oerr("section table", e))?;
        let symtab = sections
            .symbols(endian, bytes, elf::SHT_SYMTAB)
            .map_err(|e| oerr("symbol table", e))?;

        // Section names and headers.
        let mut names = Vec::with_capacity(sections.len());
        for (i, sh) in sections.enumerate() {
            let name = sections
                .section_name(endian, sh)
                .map_err(|e| oerr(&format!("section {} name", i.0), e))?;
            names.push(String::from_utf8_lossy(name).into_owned());
        }
        let sec_data = |i: usize| -> Result<&[u8], ElfError> {
            let sh = sections
                .section(object::SectionIndex(i))
                .map_err(|e| oerr("section", e))?;
            sh.data(endian, bytes)
                .map_err(|e| oerr(&format!("section `{}` data", names[i]), e))
        };

        // Symbols.
        let mut syms = Vec::with_capacity(symtab.len());
        for (idx, s) in symtab.enumerate() {
            let name = symtab
                .symbol_name(endian, s)
                .map_err(|e| oerr(&format!("symbol {} name", idx.0), e))?;
            let section = symtab
                .symbol_section(endian, s, idx)
                .map_err(|e| oerr(&format!("symbol {} section", idx.0), e))?
                .map(|i| i.0);
            syms.push(Sym {
                name: String::from_utf8_lossy(name).into_owned(),
                section: section.filter(|&i| i < names.len()),
                value: s.st_value(endian),
                size: s.st_size(endian),
                st_type: s.st_type(),
            });
        }

        let mut obj = Object {
            file: file.to_string(),
            programs: Vec::new(),
            maps: Vec::new(),
            license: None,
            sections: Vec::new(),
            code: BTreeMap::new(),
        };

        // Section roles; code sections and their functions.
        let mut btf_data = None;
        let mut btf_maps_sec = None;
        let mut legacy_maps_sec = None;
        let mut data_secs = Vec::new();
        for (idx, sh) in sections.enumerate() {
            let i = idx.0;
            if i == 0 {
                continue;
            }
            let name = &names[i];
            let sh_type = sh.sh_type(endian);
            let flags = sh.sh_flags(endian);
            let size = sh.sh_size(endian);
            let role = match sh_type {
                elf::SHT_SYMTAB => "symtab",
                elf::SHT_STRTAB => "strtab",
                elf::SHT_REL | elf::SHT_RELA => "reloc",
                _ if flags & u64::from(elf::SHF_EXECINSTR) != 0 => {
                    let data = sec_data(i)?;
                    if !data.len().is_multiple_of(INSN_SIZE) {
                        return Err(malformed(format!(
                            "code section `{name}` is {} bytes, not a multiple of 8",
                            data.len()
                        )));
                    }
                    let insns: Vec<Insn> = data
                        .chunks_exact(INSN_SIZE)
                        .map(|c| {
                            let mut b = [0u8; 8];
                            b.copy_from_slice(c);
                            Insn::from_bytes(b)
                        })
                        .collect();
                    let funcs = functions(file, name, i, insns.len(), &syms)?;
                    obj.code.insert(
                        i,
                        CodeSection {
                            name: name.clone(),
                            insns,
                            funcs,
                            fixes: BTreeMap::new(),
                        },
                    );
                    if name == ".text" { "text" } else { "program" }
                }
                _ if name == ".BTF" => {
                    btf_data = Some(i);
                    "btf"
                }
                _ if name == ".BTF.ext" => "btf",
                _ if name == ".maps" => {
                    btf_maps_sec = Some(i);
                    "maps"
                }
                _ if name == "maps" => {
                    legacy_maps_sec = Some(i);
                    "maps"
                }
                _ if name == "license" => {
                    let d = sec_data(i)?;
                    let end = d.iter().position(|&b| b == 0).unwrap_or(d.len());
                    obj.license = Some(String::from_utf8_lossy(&d[..end]).into_owned());
                    "license"
                }
                _ if name.starts_with(".debug") || name.starts_with(".rel.debug") => "debug",
                _ if global_data_kind(name).is_some()
                    && matches!(sh_type, elf::SHT_PROGBITS | elf::SHT_NOBITS) =>
                {
                    if size > 0 {
                        data_secs.push(i);
                    }
                    "data"
                }
                _ => "other",
            };
            obj.sections.push(SectionInfo {
                name: name.clone(),
                role: role.to_string(),
                size,
            });
        }

        // Maps: BTF, legacy, global data. `map_at` finds a map by (section, offset).
        let mut map_at: HashMap<(usize, u64), usize> = HashMap::new();
        if let Some(ms) = btf_maps_sec {
            let msyms = data_symbols(&syms, ms);
            if !msyms.is_empty() {
                let Some(b) = btf_data else {
                    return Err(ElfError::Btf {
                        msg: format!(
                            "{file}: `.maps` declares {} maps but there is no .BTF section (compile with -g)",
                            msyms.len()
                        ),
                    });
                };
                let btf = Btf::parse(sec_data(b)?).map_err(|e| ElfError::Btf {
                    msg: format!("{file}: {}", e.0),
                })?;
                for s in msyms {
                    map_at.insert((ms, s.value), obj.maps.len());
                    obj.maps.push(btf_map(&btf, &s.name)?);
                }
            }
        }
        if let Some(ms) = legacy_maps_sec {
            let d = sec_data(ms)?;
            for s in data_symbols(&syms, ms) {
                let start = usize::try_from(s.value).unwrap_or(usize::MAX);
                let size = if s.size == 0 { 20 } else { s.size };
                let end = start.saturating_add(usize::try_from(size).unwrap_or(usize::MAX));
                let Some(bytes) = d.get(start..end.min(d.len())).filter(|_| start < d.len()) else {
                    return Err(ElfError::BadSymbol {
                        file: file.to_string(),
                        name: s.name.clone(),
                        msg: format!(
                            "legacy map at offset {} lies outside section `maps` ({} bytes)",
                            s.value,
                            d.len()
                        ),
                    });
                };
                map_at.insert((ms, s.value), obj.maps.len());
                obj.maps.push(legacy_map(&s.name, bytes)?);
            }
        }
        let mut data_map: HashMap<usize, usize> = HashMap::new();
        for &i in &data_secs {
            let sh = sections
                .section(object::SectionIndex(i))
                .map_err(|e| oerr("section", e))?;
            let size = sh.sh_size(endian);
            if size > MAX_DATA_SECTION {
                return Err(ElfError::BadMap {
                    name: names[i].clone(),
                    msg: format!(
                        "global-data section of {size} bytes, expected at most {MAX_DATA_SECTION}"
                    ),
                });
            }
            let init = if sh.sh_type(endian) == elf::SHT_NOBITS {
                vec![0; size as usize]
            } else {
                sec_data(i)?.to_vec()
            };
            let writable = global_data_kind(&names[i]).unwrap_or(true);
            data_map.insert(i, obj.maps.len());
            obj.maps
                .push(global_data(&names[i], init.len() as u64, init, writable)?);
        }

        // Relocations of code sections.
        let ctx = reloc::ResolveCtx {
            file,
            syms: &syms,
            map_at: &map_at,
            data_map: &data_map,
            maps: &obj.maps,
        };
        for (idx, sh) in sections.enumerate() {
            let (entries, target): (Vec<(u64, u32, u32)>, _) = match sh.sh_type(endian) {
                elf::SHT_REL => match sh.rel(endian, bytes) {
                    Ok(Some((rels, _symtab))) => (
                        rels.iter()
                            .map(|r| (r.r_offset(endian), r.r_type(endian), r.r_sym(endian)))
                            .collect(),
                        sh.info_link(endian),
                    ),
                    Ok(None) => continue,
                    Err(e) => return Err(oerr(&format!("relocations `{}`", names[idx.0]), e)),
                },
                elf::SHT_RELA => match sh.rela(endian, bytes) {
                    Ok(Some((relas, _symtab))) => (
                        relas
                            .iter()
                            .map(|r| {
                                (
                                    r.r_offset(endian),
                                    r.r_type(endian, false),
                                    r.r_sym(endian, false),
                                )
                            })
                            .collect(),
                        sh.info_link(endian),
                    ),
                    Ok(None) => continue,
                    Err(e) => return Err(oerr(&format!("relocations `{}`", names[idx.0]), e)),
                },
                _ => continue,
            };
            let Some(cs) = obj.code.get_mut(&target.0) else {
                continue; // relocations of debug info, BTF, ... are not needed
            };
            for (offset, r_type, sym) in entries {
                if r_type == R_BPF_NONE {
                    continue;
                }
                let (pc, fix) = reloc::resolve(&ctx, cs, offset, r_type, sym)?;
                cs.fixes.insert(pc, fix);
            }
        }

        for cs in obj.code.values() {
            if cs.name == ".text" {
                continue;
            }
            for f in &cs.funcs {
                obj.programs.push(ProgramInfo {
                    name: f.name.clone(),
                    section: cs.name.clone(),
                    kind: ProgKind::from_section(&cs.name),
                    insn_count: f.end - f.start,
                });
            }
        }
        tracing::debug!(
            file,
            programs = obj.programs.len(),
            maps = obj.maps.len(),
            "parsed elf object"
        );
        Ok(obj)
    }

    fn candidates(&self) -> Vec<String> {
        self.programs
            .iter()
            .map(|p| format!("{} ({})", p.name, p.section))
            .collect()
    }

    /// Links one program (by function or section name; `None` picks the only one of a
    /// known kind).
    pub fn program(&self, name: Option<&str>) -> Result<Program, ElfError> {
        let chosen = match name {
            Some(n) => {
                if let Some(p) = self.programs.iter().find(|p| p.name == n) {
                    p
                } else {
                    let in_sec: Vec<&ProgramInfo> =
                        self.programs.iter().filter(|p| p.section == n).collect();
                    match in_sec.as_slice() {
                        [one] => *one,
                        [] => {
                            return Err(ElfError::UnknownProgram {
                                file: self.file.clone(),
                                name: n.to_string(),
                                candidates: self.candidates(),
                            });
                        }
                        many => {
                            return Err(ElfError::Ambiguous {
                                file: self.file.clone(),
                                name: n.to_string(),
                                candidates: many.iter().map(|p| p.name.clone()).collect(),
                            });
                        }
                    }
                }
            }
            None => {
                let known: Vec<&ProgramInfo> =
                    self.programs.iter().filter(|p| p.kind.is_known()).collect();
                match known.as_slice() {
                    [one] => *one,
                    _ => {
                        return Err(ElfError::NoProgram {
                            file: self.file.clone(),
                            candidates: self.candidates(),
                        });
                    }
                }
            }
        };
        let (sec_idx, func_idx) = self
            .code
            .iter()
            .find_map(|(&i, cs)| {
                (cs.name == chosen.section)
                    .then(|| cs.funcs.iter().position(|f| f.name == chosen.name))
                    .flatten()
                    .map(|f| (i, f))
            })
            .ok_or_else(|| ElfError::UnknownProgram {
                file: self.file.clone(),
                name: chosen.name.clone(),
                candidates: self.candidates(),
            })?;
        let insns = reloc::link(self, sec_idx, func_idx)?;
        Ok(Program {
            name: chosen.name.clone(),
            section: chosen.section.clone(),
            file: self.file.clone(),
            kind: chosen.kind.clone(),
            insns,
            maps: self.maps.clone(),
            license: self.license.clone(),
        })
    }
}

/// The functions of code section `sec` (`len` slots), from its FUNC symbols. A non-`.text`
/// section without FUNC symbols is one function named after the section.
fn functions(
    file: &str,
    sec_name: &str,
    sec: usize,
    len: usize,
    syms: &[Sym],
) -> Result<Vec<Func>, ElfError> {
    let mut starts: Vec<(&Sym, usize)> = Vec::new();
    for s in syms
        .iter()
        .filter(|s| s.section == Some(sec) && s.st_type == elf::STT_FUNC)
    {
        let bad = |msg: String| ElfError::BadSymbol {
            file: file.to_string(),
            name: s.name.clone(),
            msg,
        };
        if !s.value.is_multiple_of(INSN_SIZE as u64) {
            return Err(bad(format!(
                "function starts at byte {} of `{sec_name}`, not a multiple of 8",
                s.value
            )));
        }
        let start = s.value / INSN_SIZE as u64;
        if start >= len as u64 {
            return Err(bad(format!(
                "function starts at slot {start}, past the end of `{sec_name}` ({len} slots)"
            )));
        }
        starts.push((s, start as usize));
    }
    starts.sort_by_key(|&(_, st)| st);
    let mut funcs = Vec::with_capacity(starts.len());
    for (k, &(s, start)) in starts.iter().enumerate() {
        let bad = |msg: String| ElfError::BadSymbol {
            file: file.to_string(),
            name: s.name.clone(),
            msg,
        };
        let end = if s.size == 0 {
            starts
                .iter()
                .skip(k + 1)
                .map(|&(_, st)| st)
                .find(|&st| st > start)
                .unwrap_or(len)
        } else {
            if !s.size.is_multiple_of(INSN_SIZE as u64) {
                return Err(bad(format!(
                    "function size {} bytes is not a multiple of 8",
                    s.size
                )));
            }
            let end = (start as u64).saturating_add(s.size / INSN_SIZE as u64);
            if end > len as u64 {
                return Err(bad(format!(
                    "function slots {start}..{end} run past the end of `{sec_name}` ({len} slots)"
                )));
            }
            end as usize
        };
        funcs.push(Func {
            name: s.name.clone(),
            start,
            end,
        });
    }
    if funcs.is_empty() && len > 0 && sec_name != ".text" {
        funcs.push(Func {
            name: sec_name.to_string(),
            start: 0,
            end: len,
        });
    }
    Ok(funcs)
}
