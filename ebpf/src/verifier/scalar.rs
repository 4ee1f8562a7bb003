//! The scalar abstract domain: unsigned and signed 64-bit ranges plus a tnum (known bits),
//! kept mutually refined.
//!
//! | component      | meaning                                         |
//! |----------------|-------------------------------------------------|
//! | `umin..=umax`  | the value as `u64`                              |
//! | `smin..=smax`  | the value as `i64`                              |
//! | `tn`           | bits known 0/1 (`value`) and unknown (`mask`)   |
//!
//! Every transfer function computes each component soundly on its own and then calls
//! [`Scalar::sync`], which intersects them (and finds empty sets for dead branches).

use crate::isa::{AluOp, EndOp, JmpCond, Width};

const SIGN: u64 = 1 << 63;
const U32: u64 = u32::MAX as u64;

/// A tristate number: bits set in `mask` are unknown, the others equal those of `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tnum {
    /// Known bit values (zero where unknown).
    pub value: u64,
    /// Unknown bits.
    pub mask: u64,
}

impl Tnum {
    /// Nothing known.
    pub const UNKNOWN: Tnum = Tnum {
        value: 0,
        mask: u64::MAX,
    };

    /// A constant.
    pub fn konst(v: u64) -> Tnum {
        Tnum { value: v, mask: 0 }
    }

    /// The smallest tnum containing every value of `min..=max`.
    pub fn range(min: u64, max: u64) -> Tnum {
        let chi = min ^ max;
        let bits = 64 - chi.leading_zeros();
        if bits > 63 {
            return Tnum::UNKNOWN;
        }
        let delta = (1u64 << bits) - 1;
        Tnum {
            value: min & !delta,
            mask: delta,
        }
    }

    /// Whether every bit is known.
    pub fn is_const(self) -> bool {
        self.mask == 0
    }

    fn add(self, b: Tnum) -> Tnum {
        let sm = self.mask.wrapping_add(b.mask);
        let sv = self.value.wrapping_add(b.value);
        let sigma = sm.wrapping_add(sv);
        let chi = sigma ^ sv;
        let mu = chi | self.mask | b.mask;
        Tnum {
            value: sv & !mu,
            mask: mu,
        }
    }

    fn sub(self, b: Tnum) -> Tnum {
        let dv = self.value.wrapping_sub(b.value);
        let alpha = dv.wrapping_add(self.mask);
        let beta = dv.wrapping_sub(b.mask);
        let chi = alpha ^ beta;
        let mu = chi | self.mask | b.mask;
        Tnum {
            value: dv & !mu,
            mask: mu,
        }
    }

    fn and(self, b: Tnum) -> Tnum {
        let alpha = self.value | self.mask;
        let beta = b.value | b.mask;
        let v = self.value & b.value;
        Tnum {
            value: v,
            mask: alpha & beta & !v,
        }
    }

    fn or(self, b: Tnum) -> Tnum {
        let v = self.value | b.value;
        let mu = self.mask | b.mask;
        Tnum {
            value: v,
            mask: mu & !v,
        }
    }

    fn xor(self, b: Tnum) -> Tnum {
        let v = self.value ^ b.value;
        let mu = self.mask | b.mask;
        Tnum {
            value: v & !mu,
            mask: mu,
        }
    }

    fn shl(self, k: u32) -> Tnum {
        Tnum {
            value: self.value << k,
            mask: self.mask << k,
        }
    }

    fn shr(self, k: u32) -> Tnum {
        Tnum {
            value: self.value >> k,
            mask: self.mask >> k,
        }
    }

    fn sar(self, k: u32) -> Tnum {
        Tnum {
            value: ((self.value as i64) >> k) as u64,
            mask: ((self.mask as i64) >> k) as u64,
        }
    }

    /// The values both tnums allow, or `None` when they contradict each other.
    pub fn intersect(self, b: Tnum) -> Option<Tnum> {
        if (self.value ^ b.value) & !self.mask & !b.mask != 0 {
            return None;
        }
        let v = self.value | b.value;
        let mu = self.mask & b.mask;
        Some(Tnum {
            value: v & !mu,
            mask: mu,
        })
    }

    /// Whether every value of `b` is a value of `self`.
    pub fn contains(self, b: Tnum) -> bool {
        if b.mask & !self.mask != 0 {
            return false;
        }
        (b.value & !self.mask) == self.value
    }

    fn low(self, bits: u32) -> Tnum {
        if bits >= 64 {
            return self;
        }
        let m = (1u64 << bits) - 1;
        Tnum {
            value: self.value & m,
            mask: self.mask & m,
        }
    }
}

/// An abstract 64-bit integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scalar {
    /// Unsigned minimum.
    pub umin: u64,
    /// Unsigned maximum.
    pub umax: u64,
    /// Signed minimum.
    pub smin: i64,
    /// Signed maximum.
    pub smax: i64,
    /// Known bits.
    pub tn: Tnum,
    /// Link id: registers with the same non-zero id hold the same value (copies).
    pub id: u32,
}

impl Scalar {
    /// Any value.
    pub fn unknown() -> Scalar {
        Scalar {
            umin: 0,
            umax: u64::MAX,
            smin: i64::MIN,
            smax: i64::MAX,
            tn: Tnum::UNKNOWN,
            id: 0,
        }
    }

    /// Exactly `v`.
    pub fn konst(v: u64) -> Scalar {
        Scalar {
            umin: v,
            umax: v,
            smin: v as i64,
            smax: v as i64,
            tn: Tnum::konst(v),
            id: 0,
        }
    }

    /// Any value in `min..=max` (unsigned).
    pub fn urange(min: u64, max: u64) -> Scalar {
        Scalar {
            umin: min,
            umax: max,
            ..Scalar::unknown()
        }
        .synced()
    }

    /// Any value in `min..=max` (signed).
    pub fn srange(min: i64, max: i64) -> Scalar {
        Scalar {
            smin: min,
            smax: max,
            ..Scalar::unknown()
        }
        .synced()
    }

    /// An unknown value loaded from `bytes` bytes of memory, zero- or sign-extended.
    pub fn unknown_bytes(bytes: usize, sign_extend: bool) -> Scalar {
        if bytes >= 8 {
            return Scalar::unknown();
        }
        let bits = bytes as u32 * 8;
        if sign_extend {
            let half = 1i64 << (bits - 1);
            Scalar::srange(-half, half - 1)
        } else {
            Scalar::urange(0, (1u64 << bits) - 1)
        }
    }

    /// The value, when known.
    pub fn as_const(&self) -> Option<u64> {
        (self.umin == self.umax).then_some(self.umin)
    }

    /// Whether nothing at all is known.
    pub fn is_unknown(&self) -> bool {
        self.umin == 0
            && self.umax == u64::MAX
            && self.smin == i64::MIN
            && self.smax == i64::MAX
            && self.tn == Tnum::UNKNOWN
    }

    /// Intersects the components with each other; `None` when the set is empty.
    pub fn sync(mut self) -> Option<Scalar> {
        for _ in 0..2 {
            let tn = self.tn;
            self.umin = self.umin.max(tn.value);
            self.umax = self.umax.min(tn.value | tn.mask);
            self.smin = self.smin.max((tn.value | (tn.mask & SIGN)) as i64);
            self.smax = self.smax.min((tn.value | (tn.mask & !SIGN)) as i64);
            if self.umin > self.umax || self.smin > self.smax {
                return None;
            }
            if self.smin >= 0 || self.smax < 0 {
                self.umin = self.umin.max(self.smin as u64);
                self.umax = self.umax.min(self.smax as u64);
            }
            if (self.umin as i64) <= (self.umax as i64) {
                self.smin = self.smin.max(self.umin as i64);
                self.smax = self.smax.min(self.umax as i64);
            }
            if self.umin > self.umax || self.smin > self.smax {
                return None;
            }
            self.tn = self.tn.intersect(Tnum::range(self.umin, self.umax))?;
        }
        Some(self)
    }

    /// [`Scalar::sync`] for results of transfer functions, which are never empty.
    fn synced(self) -> Scalar {
        self.sync().unwrap_or_else(Scalar::unknown)
    }

    /// Whether every value of `cur` is a value of `self` (ids are compared elsewhere).
    pub fn contains(&self, cur: &Scalar) -> bool {
        self.umin <= cur.umin
            && cur.umax <= self.umax
            && self.smin <= cur.smin
            && cur.smax <= self.smax
            && self.tn.contains(cur.tn)
    }

    /// The low 32 bits, zero-extended.
    pub fn trunc32(&self) -> Scalar {
        self.trunc_bits(32)
    }

    fn trunc_bits(&self, bits: u32) -> Scalar {
        if bits >= 64 {
            return Scalar { id: 0, ..*self };
        }
        let m = (1u64 << bits) - 1;
        if self.umax <= m {
            return Scalar { id: 0, ..*self };
        }
        let (lo, hi) = if self.umin >> bits == self.umax >> bits {
            (self.umin & m, self.umax & m)
        } else {
            (0, m)
        };
        Scalar {
            umin: lo,
            umax: hi,
            smin: 0,
            smax: m as i64,
            tn: self.tn.low(bits),
            id: 0,
        }
        .synced()
    }

    fn add(&self, b: &Scalar) -> Scalar {
        let mut r = Scalar::unknown();
        if let (Some(lo), Some(hi)) = (self.umin.checked_add(b.umin), self.umax.checked_add(b.umax))
        {
            r.umin = lo;
            r.umax = hi;
        }
        if let (Some(lo), Some(hi)) = (self.smin.checked_add(b.smin), self.smax.checked_add(b.smax))
        {
            r.smin = lo;
            r.smax = hi;
        }
        r.tn = self.tn.add(b.tn);
        r.synced()
    }

    fn sub(&self, b: &Scalar) -> Scalar {
        let mut r = Scalar::unknown();
        if self.umin >= b.umax {
            r.umin = self.umin - b.umax;
            r.umax = self.umax - b.umin;
        }
        if let (Some(lo), Some(hi)) = (self.smin.checked_sub(b.smax), self.smax.checked_sub(b.smin))
        {
            r.smin = lo;
            r.smax = hi;
        }
        r.tn = self.tn.sub(b.tn);
        r.synced()
    }

    fn mul(&self, b: &Scalar) -> Scalar {
        match self.umax.checked_mul(b.umax) {
            Some(hi) => Scalar::urange(self.umin * b.umin, hi),
            None => Scalar::unknown(),
        }
    }

    fn div(&self, b: &Scalar) -> Scalar {
        if let Some(hi) = self.umax.checked_div(b.umin) {
            Scalar::urange(self.umin / b.umax, hi)
        } else {
            // Division by zero gives 0.
            Scalar::urange(0, self.umax)
        }
    }

    fn modu(&self, b: &Scalar) -> Scalar {
        if b.umin > 0 {
            Scalar::urange(0, self.umax.min(b.umax - 1))
        } else {
            // Modulo by zero leaves dst unchanged.
            Scalar::urange(0, self.umax)
        }
    }

    fn and(&self, b: &Scalar) -> Scalar {
        let tn = self.tn.and(b.tn);
        Scalar {
            umin: tn.value,
            umax: self.umax.min(b.umax),
            tn,
            ..Scalar::unknown()
        }
        .synced()
    }

    fn or(&self, b: &Scalar) -> Scalar {
        let tn = self.tn.or(b.tn);
        Scalar {
            umin: self.umin.max(b.umin),
            tn,
            ..Scalar::unknown()
        }
        .synced()
    }

    fn xor(&self, b: &Scalar) -> Scalar {
        Scalar {
            tn: self.tn.xor(b.tn),
            ..Scalar::unknown()
        }
        .synced()
    }

    fn shl(&self, k: u32) -> Scalar {
        let mut r = Scalar {
            tn: self.tn.shl(k),
            ..Scalar::unknown()
        };
        if k == 0 || self.umax.leading_zeros() >= k {
            r.umin = self.umin << k;
            r.umax = self.umax << k;
        }
        r.synced()
    }

    fn shr(&self, k: u32) -> Scalar {
        Scalar {
            umin: self.umin >> k,
            umax: self.umax >> k,
            tn: self.tn.shr(k),
            ..Scalar::unknown()
        }
        .synced()
    }

    fn sar(&self, k: u32) -> Scalar {
        Scalar {
            smin: self.smin >> k,
            smax: self.smax >> k,
            tn: self.tn.sar(k),
            ..Scalar::unknown()
        }
        .synced()
    }

    fn sign_extend(&self, bits: u32) -> Scalar {
        if bits >= 64 {
            return Scalar { id: 0, ..*self };
        }
        let half = 1u64 << (bits - 1);
        if self.umax < half {
            return Scalar { id: 0, ..*self };
        }
        let h = half as i64;
        Scalar::srange(-h, h - 1)
    }

    /// The result of `self op b` at `width` (the caller passes a zero-extended immediate or
    /// the source register; `Neg` ignores `b`).
    pub fn alu(&self, op: AluOp, width: Width, b: &Scalar) -> Scalar {
        if let (Some(x), Some(y)) = (self.as_const(), b.as_const()) {
            return Scalar::konst(alu_concrete(op, width, x, y));
        }
        if op == AluOp::Neg {
            return Scalar::konst(0).alu(AluOp::Sub, width, self);
        }
        match width {
            Width::W64 => self.alu64(op, b),
            Width::W32 => {
                let (a, b) = (self.trunc32(), b.trunc32());
                let r = match op {
                    AluOp::Add
                    | AluOp::Sub
                    | AluOp::Mul
                    | AluOp::Div
                    | AluOp::Mod
                    | AluOp::And
                    | AluOp::Or
                    | AluOp::Xor
                    | AluOp::Mov => a.alu64(op, &b),
                    AluOp::Rsh => match b.as_const() {
                        Some(k) => a.shr((k & 31) as u32),
                        None => Scalar::urange(0, a.umax),
                    },
                    AluOp::Lsh => match b.as_const() {
                        Some(k) => a.shl((k & 31) as u32),
                        None => Scalar::unknown(),
                    },
                    AluOp::Movsx8 => b.sign_extend(8).trunc32(),
                    AluOp::Movsx16 => b.sign_extend(16).trunc32(),
                    _ => Scalar::unknown(),
                };
                r.trunc32()
            }
        }
    }

    fn alu64(&self, op: AluOp, b: &Scalar) -> Scalar {
        let r = match op {
            AluOp::Add => self.add(b),
            AluOp::Sub => self.sub(b),
            AluOp::Mul => self.mul(b),
            AluOp::Div => self.div(b),
            AluOp::Mod => self.modu(b),
            AluOp::And => self.and(b),
            AluOp::Or => self.or(b),
            AluOp::Xor => self.xor(b),
            AluOp::Mov => *b,
            AluOp::Movsx8 => b.sign_extend(8),
            AluOp::Movsx16 => b.sign_extend(16),
            AluOp::Movsx32 => b.sign_extend(32),
            AluOp::Lsh | AluOp::Rsh | AluOp::Arsh => match b.as_const() {
                Some(k) => {
                    let k = (k & 63) as u32;
                    match op {
                        AluOp::Lsh => self.shl(k),
                        AluOp::Rsh => self.shr(k),
                        _ => self.sar(k),
                    }
                }
                None if op == AluOp::Rsh => Scalar::urange(0, self.umax),
                None => Scalar::unknown(),
            },
            AluOp::Neg | AluOp::Sdiv | AluOp::Smod => Scalar::unknown(),
        };
        Scalar { id: 0, ..r }
    }

    /// The result of a byte-order operation.
    pub fn endian(&self, op: EndOp, bits: u8) -> Scalar {
        if let Some(v) = self.as_const() {
            return Scalar::konst(end_concrete(op, bits, v));
        }
        match op {
            EndOp::Le => self.trunc_bits(bits as u32),
            _ => Scalar::unknown_bytes(bits as usize / 8, false),
        }
    }
}

/// Concrete semantics of one ALU operation (used for constant folding).
pub fn alu_concrete(op: AluOp, width: Width, a: u64, b: u64) -> u64 {
    match width {
        Width::W64 => match op {
            AluOp::Add => a.wrapping_add(b),
            AluOp::Sub => a.wrapping_sub(b),
            AluOp::Mul => a.wrapping_mul(b),
            AluOp::Div => a.checked_div(b).unwrap_or(0),
            AluOp::Sdiv => {
                if b == 0 {
                    0
                } else {
                    (a as i64).wrapping_div(b as i64) as u64
                }
            }
            AluOp::Or => a | b,
            AluOp::And => a & b,
            AluOp::Lsh => a << (b & 63),
            AluOp::Rsh => a >> (b & 63),
            AluOp::Neg => a.wrapping_neg(),
            AluOp::Mod => a.checked_rem(b).unwrap_or(a),
            AluOp::Smod => {
                if b == 0 {
                    a
                } else {
                    (a as i64).wrapping_rem(b as i64) as u64
                }
            }
            AluOp::Xor => a ^ b,
            AluOp::Mov => b,
            AluOp::Movsx8 => b as i8 as i64 as u64,
            AluOp::Movsx16 => b as i16 as i64 as u64,
            AluOp::Movsx32 => b as i32 as i64 as u64,
            AluOp::Arsh => ((a as i64) >> (b & 63)) as u64,
        },
        Width::W32 => {
            let (a, b) = (a as u32, b as u32);
            let r: u32 = match op {
                AluOp::Add => a.wrapping_add(b),
                AluOp::Sub => a.wrapping_sub(b),
                AluOp::Mul => a.wrapping_mul(b),
                AluOp::Div => a.checked_div(b).unwrap_or(0),
                AluOp::Sdiv => {
                    if b == 0 {
                        0
                    } else {
                        (a as i32).wrapping_div(b as i32) as u32
                    }
                }
                AluOp::Or => a | b,
                AluOp::And => a & b,
                AluOp::Lsh => a << (b & 31),
                AluOp::Rsh => a >> (b & 31),
                AluOp::Neg => a.wrapping_neg(),
                AluOp::Mod => a.checked_rem(b).unwrap_or(a),
                AluOp::Smod => {
                    if b == 0 {
                        a
                    } else {
                        (a as i32).wrapping_rem(b as i32) as u32
                    }
                }
                AluOp::Xor => a ^ b,
                AluOp::Mov => b,
                AluOp::Movsx8 => b as i8 as i32 as u32,
                AluOp::Movsx16 => b as i16 as i32 as u32,
                AluOp::Movsx32 => b,
                AluOp::Arsh => ((a as i32) >> (b & 31)) as u32,
            };
            r as u64
        }
    }
}

/// Concrete semantics of a byte-order operation (little-endian host).
pub fn end_concrete(op: EndOp, bits: u8, v: u64) -> u64 {
    match (op, bits) {
        (EndOp::Le, 16) => v & 0xffff,
        (EndOp::Le, 32) => v & U32,
        (EndOp::Le, _) => v,
        (_, 16) => (v as u16).swap_bytes() as u64,
        (_, 32) => (v as u32).swap_bytes() as u64,
        _ => v.swap_bytes(),
    }
}

/// Refines `(a, b)` assuming `a cond b` holds (`holds`) or fails, on 64-bit values.
/// `None` when that outcome is impossible.
pub fn refine(cond: JmpCond, a: &Scalar, b: &Scalar, holds: bool) -> Option<(Scalar, Scalar)> {
    let cond = if holds {
        cond
    } else {
        match cond.negate() {
            Some(c) => c,
            None => {
                // !(a & b): bits known set in both would make it true.
                if a.tn.value & b.tn.value != 0 {
                    return None;
                }
                let mut a2 = *a;
                if let Some(k) = b.as_const() {
                    a2.tn = Tnum {
                        value: a.tn.value & !k,
                        mask: a.tn.mask & !k,
                    };
                }
                return Some((a2.sync()?, *b));
            }
        }
    };
    let (mut x, mut y) = (*a, *b);
    match cond {
        JmpCond::Eq => {
            x.umin = x.umin.max(y.umin);
            x.umax = x.umax.min(y.umax);
            x.smin = x.smin.max(y.smin);
            x.smax = x.smax.min(y.smax);
            x.tn = x.tn.intersect(y.tn)?;
            let x = x.sync()?;
            y = Scalar { id: y.id, ..x };
            return Some((Scalar { id: a.id, ..x }, y));
        }
        JmpCond::Ne => {
            if let Some(k) = y.as_const() {
                exclude(&mut x, k)?;
            }
            if let Some(k) = x.as_const() {
                exclude(&mut y, k)?;
            }
        }
        JmpCond::Set => {
            if (x.tn.value | x.tn.mask) & (y.tn.value | y.tn.mask) == 0 {
                return None;
            }
            // A single-bit mask that is set makes that bit known.
            if let Some(k) = y.as_const()
                && k.is_power_of_two()
            {
                x.tn = Tnum {
                    value: x.tn.value | k,
                    mask: x.tn.mask & !k,
                };
            }
        }
        JmpCond::Gt => gt(&mut x, &mut y, false)?,
        JmpCond::Ge => gt(&mut x, &mut y, true)?,
        JmpCond::Lt => gt(&mut y, &mut x, false)?,
        JmpCond::Le => gt(&mut y, &mut x, true)?,
        JmpCond::Sgt => sgt(&mut x, &mut y, false)?,
        JmpCond::Sge => sgt(&mut x, &mut y, true)?,
        JmpCond::Slt => sgt(&mut y, &mut x, false)?,
        JmpCond::Sle => sgt(&mut y, &mut x, true)?,
    }
    Some((x.sync()?, y.sync()?))
}

fn exclude(x: &mut Scalar, k: u64) -> Option<()> {
    if x.umin == k {
        x.umin = x.umin.checked_add(1)?;
    }
    if x.umax == k {
        x.umax = x.umax.checked_sub(1)?;
    }
    if x.smin == k as i64 {
        x.smin = x.smin.checked_add(1)?;
    }
    if x.smax == k as i64 {
        x.smax = x.smax.checked_sub(1)?;
    }
    Some(())
}

/// `x > y` (or `>=` with `eq`), unsigned.
fn gt(x: &mut Scalar, y: &mut Scalar, eq: bool) -> Option<()> {
    let d = if eq { 0 } else { 1 };
    x.umin = x.umin.max(y.umin.checked_add(d)?);
    y.umax = y.umax.min(x.umax.checked_sub(d)?);
    Some(())
}

/// `x s> y` (or `s>=` with `eq`).
fn sgt(x: &mut Scalar, y: &mut Scalar, eq: bool) -> Option<()> {
    let d = if eq { 0 } else { 1 };
    x.smin = x.smin.max(y.smin.checked_add(d)?);
    y.smax = y.smax.min(x.smax.checked_sub(d)?);
    Some(())
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(v) = self.as_const() {
            return write!(f, "{}", v as i64);
        }
        write!(f, "scalar(")?;
        let mut parts = Vec::new();
        if self.id != 0 {
            parts.push(format!("id={}", self.id));
        }
        if self.umin != 0 {
            parts.push(format!("umin={}", self.umin));
        }
        if self.umax != u64::MAX {
            parts.push(format!("umax={}", self.umax));
        }
        if self.smin != i64::MIN && self.smin as u64 != self.umin {
            parts.push(format!("smin={}", self.smin));
        }
        if self.smax != i64::MAX && self.smax as u64 != self.umax {
            parts.push(format!("smax={}", self.smax));
        }
        if self.tn != Tnum::UNKNOWN && self.tn != Tnum::range(self.umin, self.umax) {
            parts.push(format!(
                "var_off=({:#x}; {:#x})",
                self.tn.value, self.tn.mask
            ));
        }
        write!(f, "{})", parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(s: &Scalar, v: u64) -> bool {
        s.umin <= v
            && v <= s.umax
            && s.smin <= v as i64
            && v as i64 <= s.smax
            && (v & !s.tn.mask) == s.tn.value
    }

    #[test]
    fn and_mask_bounds() {
        let x = Scalar::unknown().alu(AluOp::And, Width::W64, &Scalar::konst(0xff));
        assert_eq!((x.umin, x.umax), (0, 0xff));
        let y = x.alu(AluOp::Add, Width::W64, &Scalar::konst(8));
        assert_eq!((y.umin, y.umax), (8, 0x107));
    }

    #[test]
    fn sync_detects_empty() {
        let x = Scalar::urange(0, 10);
        assert!(refine(JmpCond::Gt, &x, &Scalar::konst(10), true).is_none());
        let (t, _) = refine(JmpCond::Gt, &x, &Scalar::konst(5), true).unwrap();
        assert_eq!((t.umin, t.umax), (6, 10));
        let (f, _) = refine(JmpCond::Gt, &x, &Scalar::konst(5), false).unwrap();
        assert_eq!((f.umin, f.umax), (0, 5));
    }

    #[test]
    fn alu_sound_on_samples() {
        let samples = [
            0u64,
            1,
            7,
            255,
            256,
            1 << 31,
            u32::MAX as u64,
            1 << 63,
            u64::MAX,
        ];
        let ops = [
            AluOp::Add,
            AluOp::Sub,
            AluOp::Mul,
            AluOp::Div,
            AluOp::Mod,
            AluOp::And,
            AluOp::Or,
            AluOp::Xor,
            AluOp::Lsh,
            AluOp::Rsh,
            AluOp::Arsh,
            AluOp::Movsx8,
        ];
        for &lo in &samples {
            for &hi in &samples {
                if lo > hi {
                    continue;
                }
                let a = Scalar::urange(lo, hi);
                for &k in &[0u64, 3, 12, 40] {
                    for op in ops {
                        for w in [Width::W64, Width::W32] {
                            let r = a.alu(op, w, &Scalar::konst(k));
                            for v in [lo, hi, lo + (hi - lo) / 2, lo + (hi - lo) / 3] {
                                let c = alu_concrete(op, w, v, k);
                                assert!(members(&r, c), "{op:?} {w:?} {v} {k}: {r:?} lacks {c}");
                            }
                        }
                    }
                }
            }
        }
    }

    fn pick(lo: u64, hi: u64, t: u64) -> u64 {
        if hi - lo == u64::MAX {
            t
        } else {
            lo + t % (hi - lo + 1)
        }
    }

    fn interesting() -> impl Strategy<Value = u64> {
        prop_oneof![
            0u64..300,
            any::<u64>(),
            (0u32..64).prop_map(|k| 1u64 << k),
            (0u32..64).prop_map(|k| (1u64 << k).wrapping_sub(1)),
            (0u64..300).prop_map(|v| v.wrapping_neg()),
        ]
    }

    const OPS: [AluOp; 18] = [
        AluOp::Add,
        AluOp::Sub,
        AluOp::Mul,
        AluOp::Div,
        AluOp::Sdiv,
        AluOp::Or,
        AluOp::And,
        AluOp::Lsh,
        AluOp::Rsh,
        AluOp::Neg,
        AluOp::Mod,
        AluOp::Smod,
        AluOp::Xor,
        AluOp::Mov,
        AluOp::Movsx8,
        AluOp::Movsx16,
        AluOp::Movsx32,
        AluOp::Arsh,
    ];

    const CONDS: [JmpCond; 11] = [
        JmpCond::Eq,
        JmpCond::Gt,
        JmpCond::Ge,
        JmpCond::Set,
        JmpCond::Ne,
        JmpCond::Sgt,
        JmpCond::Sge,
        JmpCond::Lt,
        JmpCond::Le,
        JmpCond::Slt,
        JmpCond::Sle,
    ];

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Every concrete result of an operation on members is a member of the abstract result.
        #[test]
        fn alu_is_sound(
            a in (interesting(), interesting()), b in (interesting(), interesting()),
            ta in any::<u64>(), tb in any::<u64>(), and_mask in interesting(),
            op in 0usize..18, w64 in any::<bool>(),
        ) {
            let (alo, ahi) = (a.0.min(a.1), a.0.max(a.1));
            let (blo, bhi) = (b.0.min(b.1), b.0.max(b.1));
            // Tnum-shaped inputs too: the range masked by a constant.
            let sa = Scalar::urange(alo, ahi).alu(AluOp::And, Width::W64, &Scalar::konst(and_mask));
            let sb = Scalar::urange(blo, bhi);
            let x = pick(alo, ahi, ta) & and_mask;
            let y = pick(blo, bhi, tb);
            prop_assert!(members(&sa, x));
            prop_assert!(members(&sb, y));
            let op = OPS[op];
            let w = if w64 { Width::W64 } else { Width::W32 };
            if w == Width::W32 && op == AluOp::Movsx32 {
                return Ok(());
            }
            let r = sa.alu(op, w, &sb);
            let c = alu_concrete(op, w, x, y);
            prop_assert!(members(&r, c), "{:?} {:?} {} {}: {:?} lacks {}", op, w, x, y, r, c);
        }

        /// Refinement never drops a pair of members for which the outcome holds.
        #[test]
        fn refine_is_sound(
            a in (interesting(), interesting()), b in (interesting(), interesting()),
            ta in any::<u64>(), tb in any::<u64>(), cond in 0usize..11,
        ) {
            let (alo, ahi) = (a.0.min(a.1), a.0.max(a.1));
            let (blo, bhi) = (b.0.min(b.1), b.0.max(b.1));
            let (sa, sb) = (Scalar::urange(alo, ahi), Scalar::urange(blo, bhi));
            let (x, y) = (pick(alo, ahi, ta), pick(blo, bhi, tb));
            let cond = CONDS[cond];
            let holds = cond.eval64(x, y);
            let r = refine(cond, &sa, &sb, holds);
            prop_assert!(r.is_some(), "{:?} {} {} holds={} pruned", cond, x, y, holds);
            let (ra, rb) = r.unwrap();
            prop_assert!(members(&ra, x) && members(&rb, y), "{:?} {} {}: {:?} {:?}", cond, x, y, ra, rb);
        }
    }
}
