//! Relocations of code sections, and linking a program with its bpf-to-bpf callees.
//!
//! | relocation    | instruction              | becomes                                        |
//! |---------------|--------------------------|------------------------------------------------|
//! | `R_BPF_64_64` | `ld_imm64` (src 0)       | map symbol: `src = 5`, `imm = map index`        |
//! |               |                          | global data: `src = 6`, `imm = map index`, second slot `imm = symbol value + addend` |
//! | `R_BPF_64_32` | `call` (src 1)           | callee at `symbol value / 8 + imm + 1` of its section, appended |
//! | none          | `call` (src 1)           | callee at `pc + imm + 1` of the same section, appended |
//!
//! Linking copies the program's function, then every callee (transitively) once, in the
//! order first called, and rewrites each call's `imm` to the callee's new relative offset.

use super::ElfError;
use super::object::{CodeSection, Object, R_BPF_64_32, R_BPF_64_64, Sym};
use crate::asm::disasm_insn;
use crate::isa::{INSN_SIZE, Insn};
use crate::program::{InsnLoc, MapDef};
use std::collections::{HashMap, VecDeque};

/// `ld_imm64` opcode byte.
const LD_IMM64: u8 = 0x18;
/// `call` opcode byte.
const CALL: u8 = 0x85;
/// `src` of a bpf-to-bpf call.
const PSEUDO_CALL: u8 = 1;
/// `src` of `ld_imm64` with a map index.
const PSEUDO_MAP_IDX: u8 = 5;
/// `src` of `ld_imm64` with a map index and value offset.
const PSEUDO_MAP_IDX_VALUE: u8 = 6;

/// A resolved relocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Fix {
    /// `ld_imm64` of map `.0`.
    Map(usize),
    /// `ld_imm64` of the value of global-data map `map`, plus `off`.
    Data {
        /// Map index.
        map: usize,
        /// Byte offset into the value.
        off: i32,
    },
    /// bpf-to-bpf call into code section `sec`, slot `target`.
    Call {
        /// ELF section index of the callee.
        sec: usize,
        /// Slot index of the callee in that section (may be out of range: checked at link).
        target: i64,
    },
}

/// What resolving a relocation needs to know about the object.
pub(super) struct ResolveCtx<'a> {
    pub file: &'a str,
    pub syms: &'a [Sym],
    pub map_at: &'a HashMap<(usize, u64), usize>,
    pub data_map: &'a HashMap<usize, usize>,
    pub maps: &'a [MapDef],
}

fn bad(file: &str, cs: &CodeSection, pc: usize, msg: String) -> ElfError {
    ElfError::BadRelocation {
        loc: InsnLoc {
            file: file.to_string(),
            section: cs.name.clone(),
            pc,
        },
        insn: disasm_insn(&cs.insns, pc),
        msg,
    }
}

fn sym_label(s: &Sym) -> String {
    if s.name.is_empty() {
        "<unnamed symbol>".to_string()
    } else {
        format!("`{}`", s.name)
    }
}

/// Resolves one relocation of code section `cs` at byte `offset`: the slot and its fix.
pub(super) fn resolve(
    ctx: &ResolveCtx<'_>,
    cs: &CodeSection,
    offset: u64,
    r_type: u32,
    sym: u32,
) -> Result<(usize, Fix), ElfError> {
    let pc = usize::try_from(offset / INSN_SIZE as u64).unwrap_or(usize::MAX);
    let fail = |msg: String| Err(bad(ctx.file, cs, pc, msg));
    if !offset.is_multiple_of(INSN_SIZE as u64) {
        return fail(format!(
            "relocation at byte {offset} is not on an instruction boundary (a multiple of 8)"
        ));
    }
    let Some(insn) = cs.insns.get(pc) else {
        return fail(format!(
            "relocation at byte {offset} is past the end of the section ({} instructions)",
            cs.insns.len()
        ));
    };
    let Some(s) = ctx.syms.get(sym as usize) else {
        return fail(format!(
            "relocation names symbol {sym}, but the symbol table has {} entries",
            ctx.syms.len()
        ));
    };
    let Some(ssec) = s.section else {
        return fail(format!(
            "relocation against {}, which is undefined (extern variables, kfuncs and ksyms are not supported)",
            sym_label(s)
        ));
    };
    match r_type {
        R_BPF_64_64 => {
            if insn.code != LD_IMM64 || insn.src != 0 || pc + 1 >= cs.insns.len() {
                return fail(format!(
                    "R_BPF_64_64 relocation against {} expects a two-slot ld_imm64 with src 0 (opcode 0x18), found opcode {:#04x} src {}",
                    sym_label(s),
                    insn.code,
                    insn.src
                ));
            }
            let off = s.value as i64 + insn.imm as i64;
            if let Some(&m) = u64::try_from(off)
                .ok()
                .and_then(|o| ctx.map_at.get(&(ssec, o)))
            {
                return Ok((pc, Fix::Map(m)));
            }
            if ctx.map_at.keys().any(|&(sec, _)| sec == ssec) {
                return fail(format!(
                    "relocation against {} points at byte {off} of a map section, where no map starts",
                    sym_label(s)
                ));
            }
            if let Some(&m) = ctx.data_map.get(&ssec) {
                let size = ctx.maps.get(m).map_or(0, |d| d.value_size) as i64;
                if !(0..=size).contains(&off) {
                    return fail(format!(
                        "relocation against {} points at byte {off} of global data `{}`, expected 0..={size}",
                        sym_label(s),
                        ctx.maps.get(m).map_or("", |d| d.name.as_str())
                    ));
                }
                return Ok((
                    pc,
                    Fix::Data {
                        map: m,
                        off: off as i32,
                    },
                ));
            }
            fail(format!(
                "relocation against {} (section {ssec}): expected a map (.maps, maps) or global data (.rodata, .data, .bss); function addresses and other sections are not supported",
                sym_label(s)
            ))
        }
        R_BPF_64_32 => {
            if insn.code != CALL || insn.src != PSEUDO_CALL {
                return fail(format!(
                    "R_BPF_64_32 relocation against {} expects a bpf-to-bpf call (opcode 0x85, src 1), found opcode {:#04x} src {}",
                    sym_label(s),
                    insn.code,
                    insn.src
                ));
            }
            if !s.value.is_multiple_of(INSN_SIZE as u64) {
                return fail(format!(
                    "call target {} is at byte {}, not on an instruction boundary",
                    sym_label(s),
                    s.value
                ));
            }
            let target = (s.value / INSN_SIZE as u64) as i64 + insn.imm as i64 + 1;
            Ok((pc, Fix::Call { sec: ssec, target }))
        }
        other => fail(format!(
            "unsupported relocation type {other} against {} (expected 1 R_BPF_64_64 on ld_imm64 or 10 R_BPF_64_32 on call)",
            sym_label(s)
        )),
    }
}

/// Links function `func` of code section `sec` with its callees.
pub(super) fn link(obj: &Object, sec: usize, func: usize) -> Result<Vec<Insn>, ElfError> {
    let mut out: Vec<Insn> = Vec::new();
    let mut placed: HashMap<(usize, usize), usize> = HashMap::new();
    let mut queue: VecDeque<(usize, usize, usize)> = VecDeque::new();

    let mut place = |out: &mut Vec<Insn>, queue: &mut VecDeque<_>, s: usize, fi: usize| {
        if let Some(&base) = placed.get(&(s, fi)) {
            return base;
        }
        let base = out.len();
        let cs = &obj.code[&s];
        let f = &cs.funcs[fi];
        out.extend_from_slice(&cs.insns[f.start..f.end]);
        placed.insert((s, fi), base);
        queue.push_back((s, fi, base));
        base
    };
    place(&mut out, &mut queue, sec, func);

    while let Some((s, fi, base)) = queue.pop_front() {
        let cs = &obj.code[&s];
        let f = &cs.funcs[fi];
        for pc in f.start..f.end {
            let opc = base + (pc - f.start);
            let insn = cs.insns[pc];
            let fail = |msg: String| Err(bad(&obj.file, cs, pc, msg));
            let (tsec, target) = match cs.fixes.get(&pc) {
                Some(Fix::Map(m)) | Some(Fix::Data { map: m, .. }) => {
                    if pc + 1 >= f.end {
                        return fail(format!(
                            "ld_imm64 needs two slots but function `{}` ends after the first",
                            f.name
                        ));
                    }
                    let m = i32::try_from(*m).unwrap_or(i32::MAX);
                    out[opc].imm = m;
                    if let Some(Fix::Data { off, .. }) = cs.fixes.get(&pc) {
                        out[opc].src = PSEUDO_MAP_IDX_VALUE;
                        out[opc + 1].imm = *off;
                    } else {
                        out[opc].src = PSEUDO_MAP_IDX;
                        out[opc + 1].imm = 0;
                    }
                    continue;
                }
                Some(Fix::Call { sec, target }) => (*sec, *target),
                None if insn.code == CALL && insn.src == PSEUDO_CALL => {
                    (s, pc as i64 + insn.imm as i64 + 1)
                }
                None => continue,
            };
            let Some(tcs) = obj.code.get(&tsec) else {
                return fail(format!(
                    "call target is in section {tsec}, which is not executable"
                ));
            };
            let callee = usize::try_from(target)
                .ok()
                .filter(|&t| t < tcs.insns.len())
                .and_then(|t| tcs.func_at(t));
            let Some(cfi) = callee else {
                return fail(format!(
                    "call target is slot {target} of `{}` ({} slots), expected the first slot of a function",
                    tcs.name,
                    tcs.insns.len()
                ));
            };
            let cbase = place(&mut out, &mut queue, tsec, cfi);
            let rel = cbase as i64 - opc as i64 - 1;
            let Ok(rel) = i32::try_from(rel) else {
                return fail(format!("call offset {rel} does not fit in 32 bits"));
            };
            out[opc].imm = rel;
        }
    }
    Ok(out)
}
