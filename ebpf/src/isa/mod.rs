//! The eBPF instruction set (RFC 9669): encoding, the opcode table and decoding.
//!
//! An [`Insn`] is one raw 8-byte slot. [`Opcode::decode`] maps a slot to its row of the
//! opcode table ([`opcodes::TABLE`]); [`Opcode::kind`] gives its structured meaning. A
//! `ld_imm64` takes two slots; the second one has opcode byte 0 and carries the upper
//! 32 bits of the immediate. A `pc` is always a slot index, as in the RFC.
//!
//! Everything that needs to know every instruction (verifier, interpreter, JIT,
//! disassembler, assembler) reads this table, so a new row shows up in all of them.

pub mod opcodes;

pub use opcodes::{Discr, Opcode, OpcodeInfo, TABLE};

use std::sync::LazyLock;

/// Number of general-purpose registers, r0..r10.
pub const NUM_REGS: usize = 11;
/// The read-only frame pointer.
pub const FRAME_PTR: u8 = 10;
/// Stack bytes available to each function frame.
pub const STACK_SIZE: usize = 512;
/// Size of one encoded instruction slot.
pub const INSN_SIZE: usize = 8;

/// One raw instruction slot, exactly as encoded (little-endian).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Insn {
    /// Opcode byte.
    pub code: u8,
    /// Destination register (low nibble of the second byte).
    pub dst: u8,
    /// Source register (high nibble of the second byte).
    pub src: u8,
    /// Signed 16-bit offset.
    pub off: i16,
    /// Signed 32-bit immediate.
    pub imm: i32,
}

impl Insn {
    /// Builds an instruction from its fields.
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Self {
        Insn {
            code,
            dst,
            src,
            off,
            imm,
        }
    }

    /// Decodes one slot from 8 little-endian bytes.
    pub fn from_bytes(b: [u8; 8]) -> Self {
        Insn {
            code: b[0],
            dst: b[1] & 0x0f,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    /// Encodes the slot as 8 little-endian bytes.
    pub fn to_bytes(self) -> [u8; 8] {
        let off = self.off.to_le_bytes();
        let imm = self.imm.to_le_bytes();
        [
            self.code,
            (self.dst & 0x0f) | (self.src << 4),
            off[0],
            off[1],
            imm[0],
            imm[1],
            imm[2],
            imm[3],
        ]
    }

    /// Decodes the opcode of this slot.
    pub fn opcode(&self) -> Result<Opcode, DecodeError> {
        Opcode::decode(self)
    }
}

/// Splits a byte buffer into instruction slots.
pub fn insns_from_bytes(bytes: &[u8]) -> Result<Vec<Insn>, DecodeError> {
    if !bytes.len().is_multiple_of(INSN_SIZE) {
        return Err(DecodeError::Truncated { len: bytes.len() });
    }
    Ok(bytes
        .chunks_exact(INSN_SIZE)
        .map(|c| Insn::from_bytes(c.try_into().expect("chunks_exact yields 8 bytes")))
        .collect())
}

/// Encodes instruction slots back to bytes.
pub fn insns_to_bytes(insns: &[Insn]) -> Vec<u8> {
    insns.iter().flat_map(|i| i.to_bytes()).collect()
}

/// An instruction slot that is not a valid eBPF instruction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No row of the opcode table has this byte.
    #[error("unknown opcode {code:#04x}")]
    UnknownOpcode {
        /// The opcode byte.
        code: u8,
    },
    /// The byte is known but the discriminating field is not.
    #[error("opcode {code:#04x} does not allow {field} = {value} (expected {expected})")]
    BadField {
        /// The opcode byte.
        code: u8,
        /// Which field discriminates (`off`, `imm` or `src`).
        field: &'static str,
        /// The value found.
        value: i64,
        /// The values this byte accepts.
        expected: String,
    },
    /// A byte buffer whose length is not a multiple of 8.
    #[error("bytecode length {len} is not a multiple of 8")]
    Truncated {
        /// The length found.
        len: usize,
    },
}

/// First row index and row count for each opcode byte.
static BY_CODE: LazyLock<[(u16, u16); 256]> = LazyLock::new(|| {
    let mut idx = [(0u16, 0u16); 256];
    for (i, row) in TABLE.iter().enumerate() {
        let e = &mut idx[row.code as usize];
        if e.1 == 0 {
            e.0 = i as u16;
        }
        e.1 += 1;
    }
    idx
});

fn rows_for(code: u8) -> impl Iterator<Item = &'static OpcodeInfo> {
    // Rows sharing a byte are contiguous in the table except where the generator interleaved
    // them, so filter the span from the first row to be safe.
    let (start, _) = BY_CODE[code as usize];
    TABLE[start as usize..]
        .iter()
        .filter(move |r| r.code == code)
}

impl Opcode {
    /// Decodes the opcode of a slot, using the discriminating field where needed.
    pub fn decode(insn: &Insn) -> Result<Opcode, DecodeError> {
        if BY_CODE[insn.code as usize].1 == 0 {
            return Err(DecodeError::UnknownOpcode { code: insn.code });
        }
        let mut field = "";
        let mut expected = Vec::new();
        let mut value = 0i64;
        for row in rows_for(insn.code) {
            let ok = match row.discr {
                Discr::Any => true,
                Discr::Off(v) => {
                    field = "off";
                    value = insn.off as i64;
                    expected.push(v as i64);
                    insn.off == v
                }
                Discr::Imm(v) => {
                    field = "imm";
                    value = insn.imm as i64;
                    expected.push(v as i64);
                    insn.imm == v
                }
                Discr::Src(v) => {
                    field = "src";
                    value = insn.src as i64;
                    expected.push(v as i64);
                    insn.src == v
                }
            };
            if ok {
                return Ok(row.opcode);
            }
        }
        let expected = expected
            .iter()
            .map(|v| {
                if field == "imm" {
                    format!("{v:#x}")
                } else {
                    v.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        Err(DecodeError::BadField {
            code: insn.code,
            field,
            value,
            expected: format!("one of {expected}"),
        })
    }

    /// The table row of this opcode.
    pub fn info(self) -> &'static OpcodeInfo {
        &TABLE[self as usize]
    }

    /// Structured meaning of this opcode.
    pub fn kind(self) -> OpKind {
        self.info().kind
    }

    /// Whether this opcode occupies two slots (`ld_imm64`).
    pub fn is_wide(self) -> bool {
        matches!(self.kind(), OpKind::Ld64(_))
    }

    /// A slot with this opcode: the byte plus the discriminating field set.
    pub fn insn(self, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        let info = self.info();
        let mut i = Insn::new(info.code, dst, src, off, imm);
        match info.discr {
            Discr::Any => {}
            Discr::Off(v) => i.off = v,
            Discr::Imm(v) => i.imm = v,
            Discr::Src(v) => i.src = v,
        }
        i
    }
}

/// Operand width of an ALU or jump instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Width {
    /// 32-bit: operates on the low halves; ALU results are zero-extended.
    W32,
    /// 64-bit.
    W64,
}

/// Where the second operand comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Src {
    /// The 32-bit immediate, sign-extended to 64 bits.
    Imm,
    /// The source register.
    Reg,
}

/// Arithmetic and logic operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AluOp {
    /// `dst += src`
    Add,
    /// `dst -= src`
    Sub,
    /// `dst *= src`
    Mul,
    /// Unsigned division; division by zero gives 0.
    Div,
    /// Signed division; division by zero gives 0, `MIN / -1` gives `MIN`.
    Sdiv,
    /// `dst |= src`
    Or,
    /// `dst &= src`
    And,
    /// Left shift, the count masked to the width.
    Lsh,
    /// Logical right shift, the count masked to the width.
    Rsh,
    /// `dst = -dst`
    Neg,
    /// Unsigned modulo; modulo by zero leaves dst unchanged.
    Mod,
    /// Signed modulo; modulo by zero leaves dst unchanged, `MIN % -1` gives 0.
    Smod,
    /// `dst ^= src`
    Xor,
    /// `dst = src`
    Mov,
    /// `dst = (s8)src`
    Movsx8,
    /// `dst = (s16)src`
    Movsx16,
    /// `dst = (s32)src` (64-bit only)
    Movsx32,
    /// Arithmetic right shift, the count masked to the width.
    Arsh,
}

/// Byte-order operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndOp {
    /// Convert to little-endian (a truncation on a little-endian machine).
    Le,
    /// Convert to big-endian.
    Be,
    /// Unconditional byte swap.
    Bswap,
}

/// Conditions of conditional jumps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JmpCond {
    /// `==`
    Eq,
    /// unsigned `>`
    Gt,
    /// unsigned `>=`
    Ge,
    /// `dst & src != 0`
    Set,
    /// `!=`
    Ne,
    /// signed `>`
    Sgt,
    /// signed `>=`
    Sge,
    /// unsigned `<`
    Lt,
    /// unsigned `<=`
    Le,
    /// signed `<`
    Slt,
    /// signed `<=`
    Sle,
}

impl JmpCond {
    /// Evaluates the condition on 64-bit operands.
    #[inline(always)]
    pub fn eval64(self, a: u64, b: u64) -> bool {
        match self {
            JmpCond::Eq => a == b,
            JmpCond::Gt => a > b,
            JmpCond::Ge => a >= b,
            JmpCond::Set => a & b != 0,
            JmpCond::Ne => a != b,
            JmpCond::Sgt => (a as i64) > (b as i64),
            JmpCond::Sge => (a as i64) >= (b as i64),
            JmpCond::Lt => a < b,
            JmpCond::Le => a <= b,
            JmpCond::Slt => (a as i64) < (b as i64),
            JmpCond::Sle => (a as i64) <= (b as i64),
        }
    }

    /// Evaluates the condition on the low 32 bits of the operands.
    #[inline(always)]
    pub fn eval32(self, a: u64, b: u64) -> bool {
        let (a, b) = (a as u32, b as u32);
        match self {
            JmpCond::Eq => a == b,
            JmpCond::Gt => a > b,
            JmpCond::Ge => a >= b,
            JmpCond::Set => a & b != 0,
            JmpCond::Ne => a != b,
            JmpCond::Sgt => (a as i32) > (b as i32),
            JmpCond::Sge => (a as i32) >= (b as i32),
            JmpCond::Lt => a < b,
            JmpCond::Le => a <= b,
            JmpCond::Slt => (a as i32) < (b as i32),
            JmpCond::Sle => (a as i32) <= (b as i32),
        }
    }

    /// The condition that holds exactly when this one does not.
    pub fn negate(self) -> Option<JmpCond> {
        Some(match self {
            JmpCond::Eq => JmpCond::Ne,
            JmpCond::Ne => JmpCond::Eq,
            JmpCond::Gt => JmpCond::Le,
            JmpCond::Le => JmpCond::Gt,
            JmpCond::Ge => JmpCond::Lt,
            JmpCond::Lt => JmpCond::Ge,
            JmpCond::Sgt => JmpCond::Sle,
            JmpCond::Sle => JmpCond::Sgt,
            JmpCond::Sge => JmpCond::Slt,
            JmpCond::Slt => JmpCond::Sge,
            JmpCond::Set => return None,
        })
    }
}

/// Memory access size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Size {
    /// 1 byte.
    B,
    /// 2 bytes.
    H,
    /// 4 bytes.
    W,
    /// 8 bytes.
    Dw,
}

impl Size {
    /// Size in bytes.
    pub const fn bytes(self) -> usize {
        match self {
            Size::B => 1,
            Size::H => 2,
            Size::W => 4,
            Size::Dw => 8,
        }
    }
}

/// Atomic read-modify-write operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// `+=`
    Add,
    /// `|=`
    Or,
    /// `&=`
    And,
    /// `^=`
    Xor,
    /// Exchange (always fetches).
    Xchg,
    /// Compare with r0 and exchange (always fetches into r0).
    Cmpxchg,
}

/// The forms of the 64-bit immediate load, by its `src` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ld64Kind {
    /// `src = 0`: the 64-bit constant.
    Imm,
    /// `src = 1`: a map by file descriptor.
    MapFd,
    /// `src = 2`: the address of a map's value plus an offset, map by fd.
    MapValue,
    /// `src = 3`: the address of a variable by BTF id.
    VarAddr,
    /// `src = 4`: the address of an instruction.
    CodeAddr,
    /// `src = 5`: a map by index into the program's map table.
    MapIdx,
    /// `src = 6`: the address of a map's value plus an offset, map by index.
    MapIdxValue,
}

/// Structured meaning of an opcode, for code that reasons about groups of instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Arithmetic and logic.
    Alu {
        /// The operation.
        op: AluOp,
        /// 32 or 64 bits.
        width: Width,
        /// Immediate or register operand.
        src: Src,
    },
    /// Byte-order conversion of `dst`.
    End {
        /// The conversion.
        op: EndOp,
        /// 16, 32 or 64.
        bits: u8,
    },
    /// The two-slot 64-bit immediate load.
    Ld64(Ld64Kind),
    /// `dst = *(size *)(src + off)`
    Load {
        /// Access size.
        size: Size,
        /// Sign-extend the loaded value (MEMSX).
        sign_extend: bool,
    },
    /// `*(size *)(dst + off) = imm` (ST) or `= src` (STX).
    Store {
        /// Access size.
        size: Size,
        /// Immediate (ST) or register (STX).
        src: Src,
    },
    /// Atomic read-modify-write on `*(size *)(dst + off)`.
    Atomic {
        /// The operation.
        op: AtomicOp,
        /// `W` or `Dw`.
        size: Size,
        /// Whether the old value is returned.
        fetch: bool,
    },
    /// `goto +off`
    Ja,
    /// `gotol +imm`
    JaLong,
    /// Conditional jump.
    Jmp {
        /// The condition.
        cond: JmpCond,
        /// 32 or 64 bits.
        width: Width,
        /// Immediate or register operand.
        src: Src,
    },
    /// Helper call by id.
    Call,
    /// bpf-to-bpf call to `pc + imm + 1`.
    CallLocal,
    /// Call of a kernel function by BTF id (decoded, never accepted).
    CallKfunc,
    /// Helper call by the id held in `dst` (`callx`, `BPF_JMP | BPF_CALL | BPF_X`, the
    /// "callx" conformance group): `dst` holds the helper id as a 64-bit value, `src`, `off`
    /// and `imm` are 0. The verifier accepts it only where `dst` is a known constant naming a
    /// helper; the engines then call that helper as `call imm` would.
    Callx,
    /// Return from the current function.
    Exit,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_decodes_to_itself() {
        for (i, op) in Opcode::ALL.iter().enumerate() {
            assert_eq!(*op as usize, i);
            let insn = op.insn(1, 2, 0, 0);
            let decoded = Opcode::decode(&insn).unwrap();
            assert_eq!(decoded, *op, "row {op:?}");
        }
    }

    #[test]
    fn unknown_and_bad_fields_are_errors() {
        assert_eq!(
            Opcode::decode(&Insn::new(0x00, 0, 0, 0, 0)),
            Err(DecodeError::UnknownOpcode { code: 0 })
        );
        assert!(matches!(
            Opcode::decode(&Insn::new(0x3f, 0, 0, 2, 0)),
            Err(DecodeError::BadField { field: "off", .. })
        ));
        assert!(matches!(
            Opcode::decode(&Insn::new(0xdb, 0, 0, 0, 0x02)),
            Err(DecodeError::BadField { field: "imm", .. })
        ));
    }

    #[test]
    fn bytes_roundtrip() {
        let i = Insn::new(0x61, 3, 10, -8, -123456);
        assert_eq!(Insn::from_bytes(i.to_bytes()), i);
    }
}
