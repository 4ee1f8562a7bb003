//! The memory-access pass: finds every load, store, atomic and asynchronous copy of a
//! kernel and wraps each in a block that runs probe code next to it.
//!
//! ```text
//! app PTX ──[ptx::parse]──▶ kernels ──[sites]──▶ MemSite per access (op, space, size, address, value, .loc)
//!                                                   │
//!                  caller's MemBlocks::block ◀──────┘  (before / after text, built with Regs)
//!                                                   │
//! { .reg …; <before: address, stored value>; <the instruction, verbatim>; <after: loaded value, probe call> }
//! ```
//!
//! | instruction | op | address operand | value |
//! |-------------|----|-----------------|-------|
//! | `ld`, `ldu` (`.v2/.v4/.v8` included) | load | 2nd | the destination(s), after the load |
//! | `st` | store | 1st | the source(s), before the store |
//! | `atom`, `red` | atomic | after the destination (`atom`) / 1st (`red`) | the operand `b`, before |
//! | `cp.async` (not `.bulk`) | copy | 2nd (the global source) | none |
//!
//! State spaces: `.global` and generic accesses always (the caller classifies generic
//! addresses at run time); `.shared` and `.local` when [`MemOptions`] asks; `.param` and
//! `.const` never. A memory instruction of a form the pass does not know (`cp.async.bulk`,
//! `st.async`, an address that is not `[base+offset]`) is left alone with a warning naming
//! its line; so is a kernel with no access at all.
//!
//! Only `.entry` bodies are instrumented: an access in a `.func` that ptxas does not inline
//! is not seen. The instruction's text is moved into the block unchanged, so its guard,
//! modifiers and operands stay as written; the block declares its own registers (`%bt_*`).

use crate::ptx::parse::{self, Loc, Operand, PtxFile, PtxFunction, PtxStatement, StmtKind};
use std::collections::HashMap;
use std::fmt::Write;

use super::probe::Edit;
pub use super::probe::{PassError, PassWarning, ProbeModule};

/// What an access does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemOp {
    /// `ld`, `ldu`.
    Load,
    /// `st`.
    Store,
    /// `atom`, `red`.
    Atomic,
    /// `cp.async` from global to shared memory.
    Copy,
}

impl MemOp {
    /// The ctx's `op` value (`ebpf::MemCtx::LOAD`…).
    pub fn code(self) -> u32 {
        match self {
            MemOp::Load => 0,
            MemOp::Store => 1,
            MemOp::Atomic => 2,
            MemOp::Copy => 3,
        }
    }
}

/// The state space an instruction names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemSpace {
    /// No state space: the address is generic.
    Generic,
    /// `.global`.
    Global,
    /// `.shared`, `.shared::cta`, `.shared::cluster`.
    Shared,
    /// `.local`.
    Local,
}

impl MemSpace {
    /// The ctx's `space` value for an explicit space (`ebpf::MemCtx::GLOBAL`…); generic
    /// addresses are classified at run time.
    pub fn code(self) -> Option<u32> {
        match self {
            MemSpace::Generic => None,
            MemSpace::Global => Some(1),
            MemSpace::Shared => Some(2),
            MemSpace::Local => Some(3),
        }
    }
}

/// Which accesses to instrument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemOptions {
    /// Loads (`ld`, `ldu`) and copies (`cp.async`).
    pub loads: bool,
    /// Stores.
    pub stores: bool,
    /// Atomics and reductions.
    pub atomics: bool,
    /// `.shared` accesses too.
    pub shared: bool,
    /// `.local` accesses too.
    pub local: bool,
}

impl Default for MemOptions {
    fn default() -> Self {
        MemOptions {
            loads: true,
            stores: true,
            atomics: true,
            shared: false,
            local: false,
        }
    }
}

impl MemOptions {
    fn wants(&self, op: MemOp, space: MemSpace) -> bool {
        let by_op = match op {
            MemOp::Load | MemOp::Copy => self.loads,
            MemOp::Store => self.stores,
            MemOp::Atomic => self.atomics,
        };
        let by_space = match space {
            MemSpace::Generic | MemSpace::Global => true,
            MemSpace::Shared => self.shared,
            MemSpace::Local => self.local,
        };
        by_op && by_space
    }
}

/// A register's declared type, as far as moving its bits needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegType {
    /// Width in bits (8, 16, 32, 64, 128).
    pub bits: u32,
}

/// One element of an access's value: a register or an immediate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueElem {
    /// A register of this width.
    Reg(String, RegType),
    /// An immediate as written (`0`, `0f3F800000`).
    Imm(String),
    /// `_`, or a register of unknown type: reads as 0.
    None,
}

/// One instrumented access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemSite {
    /// The kernel, mangled.
    pub kernel: String,
    /// Index among the module's sites, in text order, from 0.
    pub index: u32,
    /// 1-based PTX line of the instruction.
    pub line: u32,
    /// The `.loc` in effect, if the PTX has line info.
    pub loc: Option<Loc>,
    /// The opcode with modifiers.
    pub opcode: String,
    /// Load, store, atomic or copy.
    pub op: MemOp,
    /// The state space named.
    pub space: MemSpace,
    /// Bytes accessed.
    pub size: u32,
    /// Bytes per element (size / vector width).
    pub elem: u32,
    /// Guard: predicate and whether it is negated.
    pub guard: Option<(String, bool)>,
    /// Between a label and a later branch back to it: the access may run many times per
    /// thread.
    pub in_loop: bool,
    /// The kernel's registers live after the instruction, with their widths in bits (1
    /// for a predicate) ([`super::live`]): what a block may store before code of its own
    /// and load after it, to leave that code the registers they hold. Bases of the kernel's
    /// scalar shared-memory loads at two or more offsets are left out (`shared_load_bases`).
    pub live: Vec<(String, u32)>,
    base: Option<(String, Option<RegType>)>,
    offset: i128,
    value: Vec<ValueElem>,
}

impl MemSite {
    /// The guard as an instruction prefix (`@%p1 `, `@!%p1 `), or empty.
    pub fn guard_prefix(&self) -> String {
        match &self.guard {
            Some((p, false)) => format!("@{p} "),
            Some((p, true)) => format!("@!{p} "),
            None => String::new(),
        }
    }

    /// The guard as a `vote`/`selp` operand (`%p1`, `!%p1`), if any.
    pub fn guard_operand(&self) -> Option<String> {
        self.guard
            .as_ref()
            .map(|(p, n)| format!("{}{p}", if *n { "!" } else { "" }))
    }

    /// PTX that puts the access's address (in its state space) into the `.b64` register
    /// `dst`.
    pub fn address_into(&self, dst: &str) -> String {
        let mut s = String::new();
        match &self.base {
            None => {
                let _ = writeln!(s, "\t\tmov.u64 {dst}, {};", self.offset as i64);
                return s;
            }
            Some((b, Some(t))) if t.bits == 64 => {
                let _ = writeln!(s, "\t\tmov.b64 {dst}, {b};");
            }
            Some((b, Some(t))) if t.bits == 32 => {
                let _ = writeln!(s, "\t\tcvt.u64.u32 {dst}, {b};");
            }
            Some((b, Some(_))) => {
                let _ = writeln!(s, "\t\tmov.u64 {dst}, 0; // base {b}: unexpected width");
            }
            // A variable: its address in its own state space.
            Some((b, None)) => {
                let _ = writeln!(s, "\t\tmov.u64 {dst}, {b};");
            }
        }
        if self.offset != 0 {
            let _ = writeln!(s, "\t\tadd.s64 {dst}, {dst}, {};", self.offset as i64);
        }
        s
    }

    /// Whether the value is read after the instruction (loads) rather than before.
    pub fn value_after(&self) -> bool {
        self.op == MemOp::Load
    }

    /// Whether the access carries a value ([`MemOp::Copy`] does not).
    pub fn has_value(&self) -> bool {
        !self.value.is_empty()
    }

    /// PTX that packs the access's bytes `8*word .. 8*word+8` (elements little-endian, each
    /// masked to its size) into the `.b64` register `dst`.
    pub fn value_into(&self, dst: &str, word: u32, regs: &mut Regs) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "\t\tmov.u64 {dst}, 0;");
        if self.elem == 0 {
            return s;
        }
        let t = regs.d();
        for (k, e) in self.value.iter().enumerate() {
            let at = k as u32 * self.elem;
            if at / 8 != word || at + self.elem > 8 * (word + 1) {
                continue;
            }
            let loaded = match e {
                ValueElem::None => continue,
                ValueElem::Imm(v) => {
                    if v.starts_with("0f") || v.starts_with("0F") {
                        let r = regs.r();
                        let _ = writeln!(s, "\t\tmov.b32 {r}, {v};");
                        let _ = writeln!(s, "\t\tcvt.u64.u32 {t}, {r};");
                    } else {
                        let _ = writeln!(s, "\t\tmov.b64 {t}, {v};");
                    }
                    true
                }
                ValueElem::Reg(r, ty) => {
                    match ty.bits {
                        64 => {
                            let _ = writeln!(s, "\t\tmov.b64 {t}, {r};");
                        }
                        32 => {
                            let x = regs.r();
                            let _ = writeln!(s, "\t\tmov.b32 {x}, {r};");
                            let _ = writeln!(s, "\t\tcvt.u64.u32 {t}, {x};");
                        }
                        16 => {
                            let x = regs.h();
                            let _ = writeln!(s, "\t\tmov.b16 {x}, {r};");
                            let _ = writeln!(s, "\t\tcvt.u64.u16 {t}, {x};");
                        }
                        8 => {
                            let _ = writeln!(s, "\t\tcvt.u64.u8 {t}, {r};");
                        }
                        _ => continue,
                    }
                    true
                }
            };
            let wider = match e {
                ValueElem::Reg(_, ty) => ty.bits > 8 * self.elem,
                _ => true,
            };
            if !loaded {
                continue;
            }
            if self.elem < 8 && wider {
                let mask = (1u64 << (8 * self.elem)) - 1;
                let _ = writeln!(s, "\t\tand.b64 {t}, {t}, {mask};");
            }
            let shift = 8 * (at % 8);
            if shift != 0 {
                let _ = writeln!(s, "\t\tshl.b64 {t}, {t}, {shift};");
            }
            let _ = writeln!(s, "\t\tor.b64 {dst}, {dst}, {t};");
        }
        s
    }
}

/// Registers of one block: `%bt_d` (`.b64`), `%bt_r` (`.b32`), `%bt_h` (`.b16`), `%bt_p`
/// (`.pred`), numbered from 0.
#[derive(Clone, Debug, Default)]
pub struct Regs {
    d: u32,
    r: u32,
    h: u32,
    p: u32,
}

impl Regs {
    /// A fresh `.b64` register.
    pub fn d(&mut self) -> String {
        self.d += 1;
        format!("%bt_d{}", self.d - 1)
    }
    /// A fresh `.b32` register.
    pub fn r(&mut self) -> String {
        self.r += 1;
        format!("%bt_r{}", self.r - 1)
    }
    /// A fresh `.b16` register.
    pub fn h(&mut self) -> String {
        self.h += 1;
        format!("%bt_h{}", self.h - 1)
    }
    /// A fresh predicate.
    pub fn p(&mut self) -> String {
        self.p += 1;
        format!("%bt_p{}", self.p - 1)
    }
    /// The `.reg` declarations of every register handed out.
    pub fn decls(&self) -> String {
        let mut s = String::new();
        for (n, ty, pre) in [
            (self.d, ".b64", "d"),
            (self.r, ".b32", "r"),
            (self.h, ".b16", "h"),
            (self.p, ".pred", "p"),
        ] {
            if n > 0 {
                let _ = writeln!(s, "\t\t.reg {ty} %bt_{pre}<{n}>;");
            }
        }
        s
    }
}

/// The caller's code around one access.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemBlock {
    /// Declarations (registers, `.local` arrays), first in the block.
    pub decls: String,
    /// Runs before the instruction (the address, a stored value).
    pub before: String,
    /// Runs after it (a loaded value, the probe call).
    pub after: String,
    /// A comment for the block's first line.
    pub comment: String,
}

/// The caller's probe code per access.
pub trait MemBlocks {
    /// Whether (and with which options) to instrument `kernel`; `None` leaves it alone.
    fn options(&mut self, kernel: &PtxFunction<'_>) -> Option<MemOptions>;

    /// The code around `site` (`uid` is unique within the module, for names), or `None`
    /// to leave the access alone.
    fn block(&mut self, kernel: &PtxFunction<'_>, site: &MemSite, uid: u32) -> Option<MemBlock>;

    /// Text inserted at the start of `kernel`'s body once its sites are known (kernel-scope
    /// registers the blocks share), usually none.
    fn prologue(&mut self, _kernel: &PtxFunction<'_>, _sites: &[MemSite]) -> String {
        String::new()
    }

    /// Whether the blocks read [`MemSite::live`] (computing it costs a dataflow pass over
    /// each kernel); default no, and then it is empty.
    fn wants_live(&self) -> bool {
        false
    }

    /// Text run before each `ret`/`exit` of `kernel` (and before its closing `}` when
    /// control reaches it) once its sites are known, usually none. It runs unguarded, also
    /// before a guarded `ret`, so it must be harmless when the thread goes on.
    fn epilogue(&mut self, _kernel: &PtxFunction<'_>) -> String {
        String::new()
    }
}

/// The result of [`splice`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemSpliced {
    /// The instrumented PTX.
    pub text: String,
    /// Every site instrumented, in text order.
    pub sites: Vec<MemSite>,
    /// Header changes, kernels without accesses, forms left alone.
    pub warnings: Vec<PassWarning>,
}

/// The `.reg` declarations of `f`: name (or parameterized prefix) → type.
pub fn reg_types(src: &str, f: &PtxFunction<'_>) -> HashMap<String, RegType> {
    reg_directives(f)
        .flat_map(|s| reg_directive(&src[s.span.clone()]))
        .collect()
}

/// The registers a block may store and load ([`MemSite::live`]): declared once, in the
/// function's own scope. A name declared again in a nested block (inline assembly's
/// scratch registers) may be another register, of another width, there.
fn saveable_regs(src: &str, f: &PtxFunction<'_>) -> HashMap<String, RegType> {
    let mut count: HashMap<String, u32> = HashMap::new();
    let mut top = HashMap::new();
    for s in reg_directives(f) {
        for (name, t) in reg_directive(&src[s.span.clone()]) {
            *count.entry(name.clone()).or_default() += 1;
            if s.depth == 1 {
                top.insert(name, t);
            }
        }
    }
    top.retain(|n, _| count.get(n) == Some(&1));
    top
}

/// Registers no block stores and reloads around its cold part, though live: the bases of
/// the kernel's scalar shared-memory loads at two or more offsets. Where ptxas sees how
/// such a base is computed, it knows its alignment and merges neighbouring loads from it
/// into one vector load (a 16×16-tiled SGEMM's four `ld.shared.f32` a row into one
/// `LDS.128`); reloaded from local memory after the call, the base has lost that, and the
/// kernel runs 12 more loads a loop turn (`bench/results/cxl_gpu.md`, run 29). A base of
/// one load, or of loads already vectors, has nothing to merge and stays in the stored set,
/// so that ptxas does not keep it live across the call. ptxas keeps the others across the
/// call itself.
fn shared_load_bases(f: &PtxFunction<'_>) -> std::collections::HashSet<String> {
    let mut offsets: HashMap<&str, std::collections::HashSet<i128>> = HashMap::new();
    for s in &f.statements {
        let mods: Vec<&str> = s.opcode.split('.').collect();
        let scalar_shared_load = s.kind == StmtKind::Instruction
            && matches!(s.base_opcode(), "ld" | "ldu")
            && mods.iter().any(|m| m.starts_with("shared"))
            && !mods.iter().any(|m| matches!(*m, "v2" | "v4" | "v8"));
        if let (
            true,
            Some(Operand::Address {
                base: Some(b),
                offset,
            }),
        ) = (scalar_shared_load, s.operands.get(1))
            && b.starts_with('%')
        {
            offsets.entry(b.as_str()).or_default().insert(*offset);
        }
    }
    offsets
        .into_iter()
        .filter(|(_, o)| o.len() >= 2)
        .map(|(b, _)| b.to_string())
        .collect()
}

fn reg_directives<'a>(f: &'a PtxFunction<'_>) -> impl Iterator<Item = &'a PtxStatement> {
    f.statements
        .iter()
        .filter(|s| s.kind == StmtKind::Directive && s.opcode == ".reg")
}

/// The names (or parameterized prefixes) and type of one `.reg` directive's text; none for
/// vector registers.
fn reg_directive(text: &str) -> Vec<(String, RegType)> {
    let body = text
        .trim_start()
        .trim_start_matches(".reg")
        .trim_end_matches(';');
    let mut words = body.split_whitespace().peekable();
    let mut bits = None;
    let mut vec = 1;
    while let Some(w) = words.peek() {
        if !w.starts_with('.') {
            break;
        }
        let w = words.next().unwrap_or_default();
        match w {
            ".v2" => vec = 2,
            ".v4" => vec = 4,
            ".pred" => bits = Some(1),
            t => bits = type_bits(t),
        }
    }
    let Some(bits) = bits.filter(|_| vec == 1) else {
        return Vec::new();
    };
    let rest: String = words.collect::<Vec<_>>().join(" ");
    rest.split(',')
        .map(|name| {
            let name = name.trim();
            name.split('<').next().unwrap_or(name).trim().to_string()
        })
        .filter(|n| !n.is_empty())
        .map(|n| (n, RegType { bits }))
        .collect()
}

fn lookup(regs: &HashMap<String, RegType>, name: &str) -> Option<RegType> {
    if let Some(t) = regs.get(name) {
        return Some(*t);
    }
    let prefix = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if prefix.len() < name.len() {
        regs.get(prefix).copied()
    } else {
        None
    }
}

/// Width in bits of a PTX type (`.f32` → 32, `.f16x2` → 32, `.b128` → 128).
pub fn type_bits(t: &str) -> Option<u32> {
    Some(match t.trim_start_matches('.') {
        "b8" | "u8" | "s8" | "e4m3x2" | "e5m2x2" => {
            if t.ends_with("x2") {
                16
            } else {
                8
            }
        }
        "b16" | "u16" | "s16" | "f16" | "bf16" => 16,
        "b32" | "u32" | "s32" | "f32" | "f16x2" | "bf16x2" | "tf32" => 32,
        "b64" | "u64" | "s64" | "f64" => 64,
        "b128" => 128,
        _ => return None,
    })
}

/// What [`classify`] makes of a statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Classified {
    /// Not a memory access (or one of `.param`/`.const`).
    Not,
    /// An access.
    Site(Box<MemSite>),
    /// A memory instruction of a form the pass does not know.
    Unknown(String),
}

/// Classifies an instruction of kernel `kernel`.
pub fn classify(
    s: &PtxStatement,
    kernel: &str,
    regs: &HashMap<String, RegType>,
    index: u32,
) -> Classified {
    if s.kind != StmtKind::Instruction {
        return Classified::Not;
    }
    let mods: Vec<&str> = s.opcode.split('.').collect();
    let base = mods[0];
    let op = match base {
        "ld" | "ldu" => MemOp::Load,
        "st" => MemOp::Store,
        "atom" => MemOp::Atomic,
        "red" => MemOp::Atomic,
        "cp" if mods.get(1) == Some(&"async") => MemOp::Copy,
        _ => return Classified::Not,
    };
    let unknown = |why: &str| Classified::Unknown(format!("`{}`: {why}", s.opcode));
    if op == MemOp::Copy {
        if mods.contains(&"bulk") || mods.contains(&"wait_group") {
            if mods.contains(&"bulk") {
                return unknown("bulk (tensor memory accelerator) copies are not instrumented");
            }
            return Classified::Not;
        }
        if mods
            .iter()
            .any(|m| matches!(*m, "commit_group" | "wait_group" | "wait_all" | "mbarrier"))
        {
            return Classified::Not;
        }
    }
    if mods
        .iter()
        .any(|m| *m == "async" && op != MemOp::Copy || m.starts_with("tile") || *m == "im2col")
    {
        return unknown("asynchronous forms are not instrumented");
    }
    let mut space = MemSpace::Generic;
    for m in &mods[1..] {
        match *m {
            "param" | "const" => return Classified::Not,
            "global" => space = MemSpace::Global,
            m if m.starts_with("shared") => space = MemSpace::Shared,
            "local" => space = MemSpace::Local,
            _ => {}
        }
    }
    if op == MemOp::Copy {
        space = MemSpace::Global;
    }
    let vec: u32 = mods
        .iter()
        .find_map(|m| match *m {
            "v2" => Some(2),
            "v4" => Some(4),
            "v8" => Some(8),
            _ => None,
        })
        .unwrap_or(1);
    let (addr_at, value_at) = match (op, base) {
        (MemOp::Load, _) => (1, Some(0)),
        (MemOp::Store, _) => (0, Some(1)),
        (MemOp::Atomic, "atom") => (1, Some(2)),
        (MemOp::Atomic, _) => (0, Some(1)),
        (MemOp::Copy, _) => (1, None),
    };
    let (base_reg, offset) = match s.operands.get(addr_at) {
        Some(Operand::Address { base, offset }) => (base.clone(), *offset),
        _ => return unknown("the address is not a `[base+offset]` operand"),
    };
    let elem_bits = if op == MemOp::Copy {
        match s.operands.get(2) {
            Some(Operand::Int(n)) if matches!(*n, 4 | 8 | 16) => (*n as u32) * 8,
            _ => return unknown("cp.async size is not 4, 8 or 16"),
        }
    } else {
        match mods.iter().rev().find_map(|m| type_bits(m)) {
            Some(b) => b,
            None => return unknown("no type modifier"),
        }
    };
    let elem = elem_bits / 8;
    let value = match value_at.and_then(|k| s.operands.get(k)) {
        None => Vec::new(),
        Some(Operand::Vector(v)) => v.iter().map(|o| value_elem(o, regs)).collect(),
        Some(o) => vec![value_elem(o, regs)],
    };
    let base = base_reg.map(|b| {
        let t = lookup(regs, &b);
        (b, t)
    });
    Classified::Site(Box::new(MemSite {
        kernel: kernel.to_string(),
        index,
        line: s.line,
        loc: s.loc.clone(),
        opcode: s.opcode.clone(),
        op,
        space,
        size: elem * if op == MemOp::Copy { 1 } else { vec },
        elem,
        guard: s.guard.as_ref().map(|g| (g.pred.clone(), g.negated)),
        in_loop: false,
        live: Vec::new(),
        base,
        offset,
        value,
    }))
}

fn value_elem(o: &Operand, regs: &HashMap<String, RegType>) -> ValueElem {
    match o {
        Operand::Reg(r) => match lookup(regs, r) {
            Some(t) if t.bits >= 8 && t.bits <= 64 => ValueElem::Reg(r.clone(), t),
            _ => ValueElem::None,
        },
        Operand::Int(n) => ValueElem::Imm(format!("{}", *n as i64)),
        Operand::Float(f) if f.starts_with("0f") || f.starts_with("0F") => {
            ValueElem::Imm(f.clone())
        }
        Operand::Float(f) if f.starts_with("0d") || f.starts_with("0D") => {
            ValueElem::Imm(f.clone())
        }
        _ => ValueElem::None,
    }
}

/// Statement index ranges `label..branch` of `f`'s backward branches (loops).
fn loop_ranges(f: &PtxFunction<'_>) -> Vec<std::ops::Range<usize>> {
    let labels: HashMap<&str, usize> = f
        .statements
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind == StmtKind::Label)
        .map(|(i, s)| (s.opcode.as_str(), i))
        .collect();
    let mut out = Vec::new();
    for (j, s) in f.statements.iter().enumerate() {
        if s.kind != StmtKind::Instruction || s.base_opcode() != "bra" {
            continue;
        }
        for o in &s.operands {
            if let Operand::Symbol(t) = o
                && let Some(&k) = labels.get(t.as_str())
                && k < j
            {
                out.push(k..j);
            }
        }
    }
    out
}

/// Parses `src` leniently and instruments it; a module that does not parse comes back
/// unchanged with a warning.
pub fn instrument(
    src: &str,
    module: &ProbeModule,
    blocks: &mut dyn MemBlocks,
) -> Result<MemSpliced, PassError> {
    match parse::parse_lenient(src) {
        Ok(file) => splice(src, &file, module, blocks),
        Err(e) => Ok(MemSpliced {
            text: src.to_string(),
            sites: Vec::new(),
            warnings: vec![super::probe::unparsed(&e)],
        }),
    }
}

/// Wraps every access of every kernel `blocks` wants in its block, and inserts `module`'s
/// text after the header (only when some site was instrumented).
pub fn splice(
    src: &str,
    file: &PtxFile<'_>,
    module: &ProbeModule,
    blocks: &mut dyn MemBlocks,
) -> Result<MemSpliced, PassError> {
    if file.src != src {
        return Err(PassError::Mismatch {
            found: file.src.len(),
            expected: src.len(),
        });
    }
    let mut edits: Vec<Edit> = Vec::new();
    let mut sites = Vec::new();
    let mut warnings = Vec::new();
    let mut uid = 0u32;
    for k in file.kernels() {
        let Some(opts) = blocks.options(k) else {
            continue;
        };
        if let Some(e) = &k.error {
            warnings.push(PassWarning {
                kernel: Some(k.name.to_string()),
                line: e.line,
                what: format!("kernel left unmodified: {e}"),
            });
            continue;
        }
        let regs = reg_types(src, k);
        let before = sites.len();
        let loops = loop_ranges(k);
        // The accesses the options want, in text order (each classified once).
        let mut found: Vec<(usize, Box<MemSite>)> = Vec::new();
        for (at, s) in k.statements.iter().enumerate() {
            match classify(s, k.name, &regs, 0) {
                Classified::Not => {}
                Classified::Unknown(why) => warnings.push(PassWarning {
                    kernel: Some(k.name.to_string()),
                    line: s.line,
                    what: format!("access left unprobed: {why}"),
                }),
                Classified::Site(site) if opts.wants(site.op, site.space) => found.push((at, site)),
                Classified::Site(_) => {}
            }
        }
        // The registers live after each access, when the blocks want them.
        if blocks.wants_live() {
            let ats: Vec<usize> = found.iter().map(|(at, _)| *at).collect();
            let saveable = saveable_regs(src, k);
            let kept = shared_load_bases(k);
            let live = super::live::live_after(k, &ats, |n| lookup(&regs, n).is_some());
            for ((_, site), names) in found.iter_mut().zip(live) {
                site.live = names
                    .into_iter()
                    .filter(|n| !kept.contains(n))
                    .filter_map(|n| lookup(&saveable, &n).map(|t| (n, t.bits)))
                    .collect();
            }
        }
        for (at, mut site) in found {
            let s = &k.statements[at];
            site.index = sites.len() as u32;
            site.in_loop = loops.iter().any(|r| r.contains(&at));
            let this = uid;
            uid += 1;
            let Some(b) = blocks.block(k, &site, this) else {
                continue;
            };
            let mut text = String::new();
            let _ = writeln!(text, "{{ // bpftime-super: {}", b.comment);
            text.push_str(&b.decls);
            text.push_str(&b.before);
            let _ = writeln!(text, "\t\t{}", &src[s.span.clone()]);
            text.push_str(&b.after);
            text.push_str("\t}");
            parse::lexer::lex(&text).map_err(|e| PassError::Block {
                kernel: k.name.to_string(),
                site: super::probe::Site::Exit {
                    index: site.index,
                    line: site.line,
                },
                what: e.to_string(),
            })?;
            edits.push(Edit {
                range: s.span.clone(),
                text,
            });
            sites.push(*site);
        }
        if sites.len() > before {
            let pro = blocks.prologue(k, &sites[before..]);
            if let (false, Some(body)) = (pro.is_empty(), k.body.as_ref()) {
                edits.push(Edit {
                    range: body.start + 1..body.start + 1,
                    text: pro,
                });
            }
            let epi = blocks.epilogue(k);
            if !epi.is_empty() {
                for e in k.exits() {
                    edits.push(Edit {
                        range: e.span.start..e.span.start,
                        text: format!("{}\n\t", epi.trim()),
                    });
                }
                if let (true, Some(body)) = (super::probe::falls_off_end(k), k.body.as_ref()) {
                    edits.push(Edit {
                        range: body.end - 1..body.end - 1,
                        text: format!("{}\n", epi.trim()),
                    });
                }
            }
        } else {
            warnings.push(PassWarning {
                kernel: Some(k.name.to_string()),
                line: k.line,
                what: "no memory access to probe: kernel left unmodified".into(),
            });
        }
    }
    if !sites.is_empty() {
        super::probe::header_edits(file, module, &mut edits, &mut warnings);
        if !module.text.is_empty() {
            parse::lexer::lex(&module.text).map_err(PassError::Module)?;
            edits.push(Edit {
                range: file.header_end..file.header_end,
                text: format!("\n{}\n", module.text),
            });
        }
    }
    let out = super::probe::apply(src, edits);
    Ok(MemSpliced {
        text: out,
        sites,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: &str = ".version 8.0\n.target sm_80\n.address_size 64\n.file 1 \"k.cu\"\n\n.visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n\t.reg .pred %p<2>;\n\t.reg .b16 %rs<3>;\n\t.reg .b32 %r<9>;\n\t.reg .f32 %f<5>;\n\t.reg .b64 %rd<4>;\n\t.shared .align 4 .b8 sm[64];\n\tld.param.u64 %rd1, [k_param_0];\n\t.loc 1 7 3\n\tld.global.f32 %f1, [%rd1+8];\n\t@!%p1 st.global.v2.f32 [%rd1], {%f1, %f2};\n\tatom.global.add.u32 %r1, [%rd1], %r1;\n\tred.global.add.u32 [%rd1+4], 1;\n\tld.global.nc.v4.u32 {%r1, %r2, %r3, _}, [%rd2];\n\tld.shared.u32 %r4, [sm+4];\n\tst.u8 [%rd3], %rs1;\n\tcp.async.ca.shared.global [%r5], [%rd2], 16;\n\tcp.async.commit_group;\n\tcp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r5], [%rd2], 64, [%r6];\n\tld.const.f32 %f3, [%rd1];\n\tret;\n}\n.entry nothing()\n{\n\tret;\n}\n";

    struct Tag(MemOptions);
    impl MemBlocks for Tag {
        fn options(&mut self, _: &PtxFunction<'_>) -> Option<MemOptions> {
            Some(self.0)
        }
        fn block(&mut self, _: &PtxFunction<'_>, s: &MemSite, uid: u32) -> Option<MemBlock> {
            let mut regs = Regs::default();
            let a = regs.d();
            let before = s.address_into(&a);
            let v = regs.d();
            let value = s.value_into(&v, 0, &mut regs);
            let (b, after) = if s.value_after() {
                (before, value)
            } else {
                (before + &value, String::new())
            };
            Some(MemBlock {
                decls: regs.decls(),
                before: b,
                after,
                comment: format!("site {} uid {uid}", s.index),
            })
        }
    }

    #[test]
    fn sites_in_text_order_with_sizes_values_and_locs() {
        let f = parse::parse(K).unwrap();
        let out = splice(
            K,
            &f,
            &ProbeModule::default(),
            &mut Tag(MemOptions::default()),
        )
        .unwrap();
        let got: Vec<(MemOp, MemSpace, u32, u32)> = out
            .sites
            .iter()
            .map(|s| (s.op, s.space, s.size, s.line))
            .collect();
        assert_eq!(
            got,
            vec![
                (MemOp::Load, MemSpace::Global, 4, 18),
                (MemOp::Store, MemSpace::Global, 8, 19),
                (MemOp::Atomic, MemSpace::Global, 4, 20),
                (MemOp::Atomic, MemSpace::Global, 4, 21),
                (MemOp::Load, MemSpace::Global, 16, 22),
                (MemOp::Store, MemSpace::Generic, 1, 24),
                (MemOp::Copy, MemSpace::Global, 16, 25),
            ],
            "{}",
            out.text
        );
        assert_eq!(out.sites[0].loc.as_ref().map(|l| l.line), Some(7));
        // The bulk copy is named, and the kernel without accesses too.
        assert!(
            out.warnings
                .iter()
                .any(|w| w.line == 27 && w.what.contains("bulk"))
        );
        assert!(
            out.warnings
                .iter()
                .any(|w| w.kernel.as_deref() == Some("nothing") && w.what.contains("no memory"))
        );
        assert!(parse::parse(&out.text).is_ok(), "{}", out.text);
        // Loads read their value after the instruction; the store and atomic before it.
        let load = out.text.find("ld.global.f32 %f1, [%rd1+8];").unwrap();
        assert!(out.text[..load].ends_with("add.s64 %bt_d0, %bt_d0, 8;\n\t\t"));
        assert!(out.text[load..].starts_with(
            "ld.global.f32 %f1, [%rd1+8];\n\t\tmov.u64 %bt_d1, 0;\n\t\tmov.b32 %bt_r0, %f1;"
        ));
        let atom = out.text.find("atom.global.add.u32 %r1").unwrap();
        assert!(out.text[..atom].contains("mov.b32 %bt_r0, %r1;"));
        // The guard stays on the instruction, as written.
        assert!(
            out.text
                .contains("\t\t@!%p1 st.global.v2.f32 [%rd1], {%f1, %f2};\n")
        );
        // The second f32 of the v2 store lands in bits 32..64.
        assert!(out.text.contains("shl.b64 %bt_d2, %bt_d2, 32;"));
        // An immediate value; a 16-bit register; an 8-bit store masks to a byte.
        assert!(out.text.contains("mov.b64 %bt_d2, 1;"));
        assert!(out.text.contains("mov.b16 %bt_h0, %rs1;"));
        assert!(out.text.contains("and.b64 %bt_d2, %bt_d2, 255;"));
    }

    #[test]
    fn options_select_ops_and_spaces() {
        let f = parse::parse(K).unwrap();
        let only_loads = MemOptions {
            stores: false,
            atomics: false,
            shared: true,
            ..MemOptions::default()
        };
        let out = splice(K, &f, &ProbeModule::default(), &mut Tag(only_loads)).unwrap();
        let got: Vec<(MemOp, MemSpace)> = out.sites.iter().map(|s| (s.op, s.space)).collect();
        assert_eq!(
            got,
            vec![
                (MemOp::Load, MemSpace::Global),
                (MemOp::Load, MemSpace::Global),
                (MemOp::Load, MemSpace::Shared),
                (MemOp::Copy, MemSpace::Global),
            ]
        );
        // A shared variable's address.
        assert!(
            out.text
                .contains("mov.u64 %bt_d0, sm;\n\t\tadd.s64 %bt_d0, %bt_d0, 4;")
        );
    }

    #[test]
    fn sites_know_whether_they_repeat() {
        let src = ".version 8.0\n.target sm_90\n.address_size 64\n.entry k(.param .u64 p)\n{\n\t.reg .pred %p<2>;\n\t.reg .b32 %r<4>;\n\t.reg .b64 %rd<3>;\n\tld.global.u32 %r1, [%rd1];\n$L__BB0_1:\n\tld.global.u32 %r2, [%rd1];\n\t@%p1 bra $L__BB0_1;\n\tst.global.u32 [%rd1], %r2;\n\t@%p1 bra $L__BB0_2;\n\tst.global.u32 [%rd2], %r2;\n$L__BB0_2:\n\tret;\n}\n";
        let f = parse::parse(src).unwrap();
        let out = splice(
            src,
            &f,
            &ProbeModule::default(),
            &mut Tag(MemOptions::default()),
        )
        .unwrap();
        let got: Vec<bool> = out.sites.iter().map(|s| s.in_loop).collect();
        assert_eq!(got, [false, true, false, false]);
    }

    #[test]
    fn register_types_come_from_declarations() {
        let f = parse::parse(K).unwrap();
        let k = f.kernels().next().unwrap();
        let r = reg_types(K, k);
        assert_eq!(lookup(&r, "%rd12"), Some(RegType { bits: 64 }));
        assert_eq!(lookup(&r, "%f1"), Some(RegType { bits: 32 }));
        assert_eq!(lookup(&r, "%rs2"), Some(RegType { bits: 16 }));
        assert_eq!(lookup(&r, "%q1"), None);
    }

    /// Blocks may store only registers declared once, in the kernel's own scope: a name an
    /// inline-assembly block declares again (or alone) may be another register there.
    /// Liveness comes only when the blocks ask for it.
    #[test]
    fn saved_registers_are_the_kernels_own_and_asked_for() {
        let src = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 a)\n{\n\t.reg .b64 %rd<4>;\n\t.reg .b32 %t;\n\t.reg .f32 %f<3>;\n\tld.param.u64 %rd1, [a];\n\t{\n\t.reg .b64 %t;\n\t.reg .b32 %s;\n\tmov.b64 %t, 1;\n\t}\n\tld.global.f32 %f1, [%rd1];\n\tmov.b32 %t, 2;\n\tst.global.f32 [%rd1+4], %f1;\n\tst.global.b32 [%rd1+8], %t;\n\tret;\n}\n";
        let f = parse::parse(src).unwrap();
        let k = f.kernels().next().unwrap();
        let r = saveable_regs(src, k);
        assert_eq!(lookup(&r, "%rd1"), Some(RegType { bits: 64 }));
        assert_eq!(lookup(&r, "%f2"), Some(RegType { bits: 32 }));
        assert_eq!(lookup(&r, "%t"), None, "declared twice");
        assert_eq!(lookup(&r, "%s"), None, "declared in a nested block only");
        struct Live(bool, Vec<Vec<(String, u32)>>);
        impl MemBlocks for Live {
            fn options(&mut self, _: &PtxFunction<'_>) -> Option<MemOptions> {
                Some(MemOptions::default())
            }
            fn block(&mut self, _: &PtxFunction<'_>, s: &MemSite, _: u32) -> Option<MemBlock> {
                self.1.push(s.live.clone());
                Some(MemBlock::default())
            }
            fn wants_live(&self) -> bool {
                self.0
            }
        }
        let mut asked = Live(true, Vec::new());
        splice(src, &f, &ProbeModule::default(), &mut asked).unwrap();
        let l = |v: &[(&str, u32)]| -> Vec<(String, u32)> {
            v.iter().map(|(n, b)| (n.to_string(), *b)).collect()
        };
        // After the load %rd1 and %f1 are read later (and %t, which is not saveable).
        assert_eq!(
            asked.1,
            [l(&[("%f1", 32), ("%rd1", 64)]), l(&[("%rd1", 64)]), l(&[])]
        );
        let mut not = Live(false, Vec::new());
        splice(src, &f, &ProbeModule::default(), &mut not).unwrap();
        assert!(not.1.iter().all(|v| v.is_empty()) && not.1.len() == 3);
        // The base of scalar shared-memory loads at two offsets (`%r1`, through
        // `ld.shared::cta` too) stays out, though live; so does nothing else: a shared
        // store's base (`%r2`), the base of one shared load (`%r3`), and the base of a
        // vector load (`%r4`) are stored as before.
        let tiled = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 a)\n{\n\t.reg .b64 %rd<4>;\n\t.reg .b32 %r<6>;\n\t.reg .f32 %f<12>;\n\t.shared .align 16 .b8 sm[64];\n\tld.param.u64 %rd1, [a];\n\tmov.u32 %r1, sm;\n\tmov.u32 %r2, sm;\n\tmov.u32 %r3, sm;\n\tmov.u32 %r4, sm;\n\tld.global.f32 %f1, [%rd1];\n\tst.shared.f32 [%r2], %f1;\n\tld.shared.f32 %f2, [%r1+4];\n\tld.shared::cta.f32 %f3, [%r1+8];\n\tld.shared.f32 %f4, [%r3];\n\tld.shared.v2.f32 {%f5, %f6}, [%r4];\n\tld.shared.v2.f32 {%f7, %f8}, [%r4+8];\n\tst.global.f32 [%rd1], %f2;\n\tret;\n}\n";
        let f = parse::parse(tiled).unwrap();
        let mut asked = Live(true, Vec::new());
        splice(tiled, &f, &ProbeModule::default(), &mut asked).unwrap();
        assert_eq!(
            asked.1[0],
            l(&[
                ("%f1", 32),
                ("%r2", 32),
                ("%r3", 32),
                ("%r4", 32),
                ("%rd1", 64)
            ])
        );
    }
}
