//! Abstract machine state: register types, stack slots, call frames, held references, and
//! the subsumption test used for state pruning.
//!
//! ```text
//! State ─┬─ frames[0..=7] ─┬─ regs r0..r10 : Reg = NotInit | Scalar | Ptr{kind, off, var, id, range, ref_id}
//!        │                 └─ stack slots  : Slot = Bytes([Invalid|Misc|Zero; 8]) | Spill(Reg)
//!        └─ refs: acquired ring buffer reservations (id, pc of the reserve)
//! ```
//!
//! Stack slot `i` of a frame covers bytes `fp-8(i+1) .. fp-8i`.

use super::scalar::Scalar;

/// What a pointer points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PtrKind {
    /// The job ctx (read-only).
    Ctx,
    /// A stack frame (index into the frame list).
    Stack {
        /// Frame index.
        frame: u8,
    },
    /// A map itself (only for helper arguments).
    Map {
        /// Map index.
        map: u32,
    },
    /// A map value.
    MapValue {
        /// Map index.
        map: u32,
    },
    /// A map value or NULL (result of a lookup).
    MapValueOrNull {
        /// Map index.
        map: u32,
    },
    /// Job input bytes (read-only).
    Data,
    /// End of job input.
    DataEnd,
    /// Job output bytes.
    Out,
    /// End of job output.
    OutEnd,
    /// `size` bytes of read/write memory.
    Mem {
        /// Size in bytes.
        size: u64,
    },
    /// `size` bytes of memory or NULL.
    MemOrNull {
        /// Size in bytes.
        size: u64,
    },
}

impl PtrKind {
    /// The short type name used in messages and logs.
    pub fn name(self) -> &'static str {
        match self {
            PtrKind::Ctx => "ctx",
            PtrKind::Stack { .. } => "fp",
            PtrKind::Map { .. } => "map_ptr",
            PtrKind::MapValue { .. } => "map_value",
            PtrKind::MapValueOrNull { .. } => "map_value_or_null",
            PtrKind::Data => "data",
            PtrKind::DataEnd => "data_end",
            PtrKind::Out => "out",
            PtrKind::OutEnd => "out_end",
            PtrKind::Mem { .. } => "mem",
            PtrKind::MemOrNull { .. } => "mem_or_null",
        }
    }

    /// Whether this is a packet-like pointer whose range is proven against an end pointer.
    pub fn is_pkt(self) -> bool {
        matches!(self, PtrKind::Data | PtrKind::Out)
    }

    /// Whether the pointer may be NULL.
    pub fn or_null(self) -> bool {
        matches!(
            self,
            PtrKind::MapValueOrNull { .. } | PtrKind::MemOrNull { .. }
        )
    }
}

/// A pointer: base kind, constant offset, variable offset, and ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ptr {
    /// What it points to.
    pub kind: PtrKind,
    /// Constant offset from the base.
    pub off: i64,
    /// Variable part of the offset (constant 0 when none).
    pub var: Scalar,
    /// Null-check id for `*OrNull`; variable-part id for data/out pointers.
    pub id: u32,
    /// Bytes proven accessible past `base + var` (data/out pointers).
    pub range: u64,
    /// Bytes proven accessible past the region start itself, remembered when a variable
    /// part was added (data/out pointers): access is fine while `off + var.max + size`
    /// stays within it.
    pub base_range: u64,
    /// Reference id for ring buffer memory (0: not a reference).
    pub ref_id: u32,
}

impl Ptr {
    /// A pointer of `kind` at offset `off`, no variable part.
    pub fn new(kind: PtrKind, off: i64) -> Ptr {
        Ptr {
            kind,
            off,
            var: Scalar::konst(0),
            id: 0,
            range: 0,
            base_range: 0,
            ref_id: 0,
        }
    }

    /// The variable offset, if it is known.
    pub fn const_var(&self) -> Option<i64> {
        self.var.as_const().map(|v| v as i64)
    }
}

/// The abstract value of a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reg {
    /// Never written.
    NotInit,
    /// An integer.
    Scalar(Scalar),
    /// A pointer.
    Ptr(Ptr),
}

impl Reg {
    /// The type name used in messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Reg::NotInit => "uninit",
            Reg::Scalar(_) => "scalar",
            Reg::Ptr(p) => p.kind.name(),
        }
    }
}

impl std::fmt::Display for Reg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reg::NotInit => write!(f, "uninit"),
            Reg::Scalar(s) => write!(f, "{s}"),
            Reg::Ptr(p) => {
                if let PtrKind::Stack { frame } = p.kind
                    && p.const_var().is_some()
                {
                    let off = p.off + p.const_var().unwrap_or(0);
                    return if frame == 0 {
                        write!(f, "fp{off}")
                    } else {
                        write!(f, "fp[{frame}]{off}")
                    };
                }
                write!(f, "{}(", p.kind.name())?;
                match p.kind {
                    PtrKind::Map { map }
                    | PtrKind::MapValue { map }
                    | PtrKind::MapValueOrNull { map } => write!(f, "map={map},")?,
                    PtrKind::Mem { size } | PtrKind::MemOrNull { size } => {
                        write!(f, "size={size},")?
                    }
                    _ => {}
                }
                write!(f, "off={}", p.off)?;
                if p.var.as_const() != Some(0) {
                    write!(f, ",var={}", p.var)?;
                }
                if p.id != 0 {
                    write!(f, ",id={}", p.id)?;
                }
                if p.kind.is_pkt() {
                    write!(f, ",r={}", p.range)?;
                    if p.base_range != 0 {
                        write!(f, ",base_r={}", p.base_range)?;
                    }
                }
                if p.ref_id != 0 {
                    write!(f, ",ref={}", p.ref_id)?;
                }
                write!(f, ")")
            }
        }
    }
}

/// What one stack byte holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteKind {
    /// Never written.
    Invalid,
    /// Some initialized data.
    Misc,
    /// Known zero.
    Zero,
}

/// One 8-byte stack slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Slot {
    /// Byte-wise state.
    Bytes([ByteKind; 8]),
    /// A whole register spilled by an aligned 8-byte store.
    Spill(Reg),
}

impl Slot {
    /// An unwritten slot.
    pub const INVALID: Slot = Slot::Bytes([ByteKind::Invalid; 8]);

    /// The byte-wise view (spills count as initialized).
    pub fn bytes(&self) -> [ByteKind; 8] {
        match self {
            Slot::Bytes(b) => *b,
            Slot::Spill(Reg::Scalar(s)) if s.as_const() == Some(0) => [ByteKind::Zero; 8],
            Slot::Spill(_) => [ByteKind::Misc; 8],
        }
    }
}

/// One function activation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// r0..r10.
    pub regs: [Reg; 11],
    /// Slots, growing downwards from the frame pointer.
    pub stack: Vec<Slot>,
    /// Entry pc of the function.
    pub entry: usize,
    /// Where the caller resumes (unused for the main frame).
    pub ret_pc: usize,
}

impl Frame {
    /// The slot holding byte `off` (negative, `-512..0`).
    pub fn slot(&self, idx: usize) -> Slot {
        self.stack.get(idx).copied().unwrap_or(Slot::INVALID)
    }

    /// A mutable slot, growing the stack as needed.
    pub fn slot_mut(&mut self, idx: usize) -> &mut Slot {
        if self.stack.len() <= idx {
            self.stack.resize(idx + 1, Slot::INVALID);
        }
        &mut self.stack[idx]
    }
}

/// Slot index and byte index for stack offset `off` (negative).
pub fn slot_of(off: i64) -> (usize, usize) {
    let idx = ((-off - 1) / 8) as usize;
    let byte = (off + 8 * (idx as i64 + 1)) as usize;
    (idx, byte)
}

/// The whole abstract state of one path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Call frames, the current one last.
    pub frames: Vec<Frame>,
    /// Held references: (id, pc of acquisition).
    pub refs: Vec<(u32, usize)>,
}

impl State {
    /// The current frame.
    pub fn cur(&self) -> &Frame {
        self.frames.last().expect("a state has at least one frame")
    }

    /// The current frame, mutably.
    pub fn cur_mut(&mut self) -> &mut Frame {
        self.frames
            .last_mut()
            .expect("a state has at least one frame")
    }

    /// Applies `f` to every register and spilled register in every frame.
    pub fn for_each_reg(&mut self, mut f: impl FnMut(&mut Reg)) {
        for fr in &mut self.frames {
            for r in fr.regs.iter_mut() {
                f(r);
            }
            for s in fr.stack.iter_mut() {
                if let Slot::Spill(r) = s {
                    f(r);
                }
            }
        }
    }

    /// The registers of the current frame, for logs: `R0=... R1=ctx(off=0) ...`.
    pub fn describe(&self) -> String {
        let fr = self.cur();
        let mut out = String::new();
        if self.frames.len() > 1 {
            out.push_str(&format!("frame{}: ", self.frames.len() - 1));
        }
        let mut first = true;
        for (i, r) in fr.regs.iter().enumerate() {
            if *r == Reg::NotInit {
                continue;
            }
            if !first {
                out.push(' ');
            }
            first = false;
            out.push_str(&format!("R{i}={r}"));
        }
        for (i, s) in fr.stack.iter().enumerate() {
            let off = -8 * (i as i64 + 1);
            match s {
                Slot::Spill(r) => out.push_str(&format!(" fp{off}={r}")),
                Slot::Bytes(b) if b.iter().any(|k| *k != ByteKind::Invalid) => {
                    let t: String = b
                        .iter()
                        .map(|k| match k {
                            ByteKind::Invalid => '?',
                            ByteKind::Misc => 'm',
                            ByteKind::Zero => '0',
                        })
                        .collect();
                    out.push_str(&format!(" fp{off}={t}"));
                }
                _ => {}
            }
        }
        out
    }
}

/// Consistent renaming of ids between an old (explored) state and the current one (a few
/// ids per state, so a linear list beats hashing).
#[derive(Default)]
struct IdMap {
    pairs: Vec<(u32, u32)>,
}

impl IdMap {
    fn check(&mut self, old: u32, cur: u32) -> bool {
        for &(o, c) in &self.pairs {
            if o == old || c == cur {
                return o == old && c == cur;
            }
        }
        self.pairs.push((old, cur));
        true
    }
}

struct Cmp {
    exact: bool,
    ptr_ids: IdMap,
    scalar_ids: IdMap,
}

impl Cmp {
    fn scalar(&mut self, old: &Scalar, cur: &Scalar) -> bool {
        let ids_ok = if old.id == 0 {
            !self.exact || cur.id == 0
        } else {
            cur.id != 0 && self.scalar_ids.check(old.id, cur.id)
        };
        if !ids_ok {
            return false;
        }
        if self.exact {
            Scalar { id: 0, ..*old } == Scalar { id: 0, ..*cur }
        } else {
            old.contains(cur)
        }
    }

    fn reg(&mut self, old: &Reg, cur: &Reg) -> bool {
        match (old, cur) {
            (Reg::NotInit, Reg::NotInit) => true,
            (Reg::NotInit, _) => !self.exact,
            (Reg::Scalar(a), Reg::Scalar(b)) => self.scalar(a, b),
            (Reg::Ptr(a), Reg::Ptr(b)) => {
                if a.kind != b.kind || a.off != b.off {
                    return false;
                }
                let var_ok = if self.exact {
                    a.var == b.var
                } else {
                    a.var.contains(&b.var)
                };
                let range_ok = if self.exact {
                    a.range == b.range && a.base_range == b.base_range
                } else {
                    b.range >= a.range && b.base_range >= a.base_range
                };
                var_ok
                    && range_ok
                    && self.ptr_ids.check(a.id, b.id)
                    && self.ptr_ids.check(a.ref_id, b.ref_id)
            }
            _ => false,
        }
    }

    fn slot(&mut self, old: &Slot, cur: &Slot) -> bool {
        match (old, cur) {
            (Slot::Spill(a), Slot::Spill(b)) => self.reg(a, b),
            (Slot::Spill(Reg::Scalar(a)), Slot::Bytes(b)) if !self.exact => {
                // An unknown spilled scalar accepts any initialized bytes.
                a.is_unknown() && a.id == 0 && b.iter().all(|k| *k != ByteKind::Invalid)
            }
            (Slot::Spill(Reg::NotInit), _) => !self.exact,
            (Slot::Spill(_), Slot::Bytes(_)) => false,
            (Slot::Bytes(a), _) => {
                if let Slot::Spill(Reg::Ptr(_)) = cur {
                    // Bytes read back from a pointer spill are rejected, so an old state
                    // with plain bytes says nothing about a pointer here unless unwritten.
                    if a.iter().any(|k| *k != ByteKind::Invalid) {
                        return false;
                    }
                    return !self.exact;
                }
                let b = cur.bytes();
                if self.exact {
                    return *a == b && matches!(cur, Slot::Bytes(_));
                }
                a.iter().zip(b.iter()).all(|(o, c)| match o {
                    ByteKind::Invalid => true,
                    ByteKind::Misc => *c != ByteKind::Invalid,
                    ByteKind::Zero => *c == ByteKind::Zero,
                })
            }
        }
    }
}

/// Whether `old` covers `cur`: every behaviour possible from `cur` is possible from `old`
/// (`exact`: the two are equal up to id renaming). `live[i]` masks the registers of frame
/// `i` that may still be read; the others are not compared. `precise` names the scalars
/// whose values matter (`None`: all of them); the others only need to be scalars.
pub fn covers(
    old: &State,
    cur: &State,
    exact: bool,
    live: &[u16],
    precise: Option<&super::precise::Track>,
) -> bool {
    if old.frames.len() != cur.frames.len() || old.refs.len() != cur.refs.len() {
        return false;
    }
    let mut c = Cmp {
        exact,
        ptr_ids: IdMap::default(),
        scalar_ids: IdMap::default(),
    };
    c.ptr_ids.check(0, 0);
    for (a, b) in old.frames.iter().zip(cur.frames.iter()) {
        if a.entry != b.entry || a.ret_pc != b.ret_pc {
            return false;
        }
    }
    for (fi, (a, b)) in old.frames.iter().zip(cur.frames.iter()).enumerate() {
        let mask = live.get(fi).copied().unwrap_or(u16::MAX);
        let (preg, pslot) = match (exact, precise) {
            (false, Some(p)) => (p.regs[fi], p.slots[fi]),
            _ => (u16::MAX, u64::MAX),
        };
        for (r, (ra, rb)) in a.regs.iter().zip(b.regs.iter()).enumerate() {
            if mask & (1 << r) == 0 {
                continue;
            }
            if preg & (1 << r) == 0 && matches!((ra, rb), (Reg::Scalar(_), Reg::Scalar(_))) {
                continue;
            }
            if !c.reg(ra, rb) {
                return false;
            }
        }
        let n = a.stack.len().max(b.stack.len());
        for i in 0..n {
            let (sa, sb) = (a.slot(i), b.slot(i));
            if i >= 64 || pslot & (1 << i) != 0 {
                if !c.slot(&sa, &sb) {
                    return false;
                }
                continue;
            }
            // An imprecise slot: its value does not matter, only what can be read from it.
            let ok = match (sa, sb) {
                (Slot::Spill(Reg::Scalar(_)), Slot::Spill(Reg::Scalar(_))) => true,
                (Slot::Spill(Reg::Scalar(_)), Slot::Bytes(bb)) => {
                    bb.iter().all(|k| *k != ByteKind::Invalid)
                }
                (Slot::Bytes(_), Slot::Spill(Reg::Scalar(_))) => true,
                (Slot::Bytes(ba), Slot::Bytes(bb)) => ba
                    .iter()
                    .zip(bb.iter())
                    .all(|(o, c)| *o == ByteKind::Invalid || *c != ByteKind::Invalid),
                _ => c.slot(&sa, &sb),
            };
            if !ok {
                return false;
            }
        }
    }
    for ((ia, _), (ib, _)) in old.refs.iter().zip(cur.refs.iter()) {
        if !c.ptr_ids.check(*ia, *ib) {
            return false;
        }
    }
    true
}
