//! The opcode table: every instruction of RFC 9669, listed once.
//!
//! Each row is `(code, discriminator, Variant, kind, asm template, doc)`:
//! - `code` is the 8-bit opcode byte;
//! - the discriminator picks between rows that share a byte (`Off(1)` for `sdiv`,
//!   `Imm(0xe1)` for `xchg`, `Src(1)` for a local call, `Any` when the byte is enough);
//! - `kind` is the structured meaning ([`OpKind`]) that the verifier and back ends match on;
//! - the template drives both the disassembler and the assembler (see `crate::asm`);
//! - the doc line says what the instruction does.
//!
//! The legacy packet-access instructions (`ld_abs`/`ld_ind`) are deliberately absent: RFC 9669
//! marks them deprecated and they only make sense for socket filters.

use super::{AluOp, AtomicOp, EndOp, JmpCond, Ld64Kind, OpKind, Size, Src, Width};

/// Which other field of an instruction selects between rows sharing an opcode byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discr {
    /// The opcode byte alone selects the row.
    Any,
    /// The `off` field must equal this value.
    Off(i16),
    /// The `imm` field must equal this value.
    Imm(i32),
    /// The `src` register field must equal this value.
    Src(u8),
}

/// One row of the opcode table.
#[derive(Clone, Copy, Debug)]
pub struct OpcodeInfo {
    /// The opcode byte.
    pub code: u8,
    /// What else must match for this row to apply.
    pub discr: Discr,
    /// The decoded opcode.
    pub opcode: Opcode,
    /// Structured meaning.
    pub kind: OpKind,
    /// Assembly template shared by the assembler and disassembler.
    pub template: &'static str,
    /// One-line description of the semantics.
    pub doc: &'static str,
}

macro_rules! opcodes {
    ($(($code:expr, $discr:ident $(($dv:expr))?, $name:ident, $kind:expr, $tmpl:expr, $doc:expr),)*) => {
        /// Every valid eBPF instruction, as decoded from its opcode byte and discriminator.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Opcode {
            $(#[doc = $doc] $name,)*
        }

        /// The table itself, in declaration order.
        pub static TABLE: &[OpcodeInfo] = &[
            $(OpcodeInfo {
                code: $code,
                discr: Discr::$discr $(($dv))?,
                opcode: Opcode::$name,
                kind: { use OpKind::*; $kind },
                template: $tmpl,
                doc: $doc,
            },)*
        ];

        impl Opcode {
            /// Every opcode, in table order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$name,)*];
        }
    };
}

opcodes! {
    (0x07, Any, Add64Imm, Alu { op: AluOp::Add, width: Width::W64, src: Src::Imm }, "{d} += {imm}", "dst += imm"),
    (0x0f, Any, Add64Reg, Alu { op: AluOp::Add, width: Width::W64, src: Src::Reg }, "{d} += {s}", "dst += src"),
    (0x17, Any, Sub64Imm, Alu { op: AluOp::Sub, width: Width::W64, src: Src::Imm }, "{d} -= {imm}", "dst -= imm"),
    (0x1f, Any, Sub64Reg, Alu { op: AluOp::Sub, width: Width::W64, src: Src::Reg }, "{d} -= {s}", "dst -= src"),
    (0x27, Any, Mul64Imm, Alu { op: AluOp::Mul, width: Width::W64, src: Src::Imm }, "{d} *= {imm}", "dst *= imm"),
    (0x2f, Any, Mul64Reg, Alu { op: AluOp::Mul, width: Width::W64, src: Src::Reg }, "{d} *= {s}", "dst *= src"),
    (0x37, Off(0), Div64Imm, Alu { op: AluOp::Div, width: Width::W64, src: Src::Imm }, "{d} /= {imm}", "dst = imm != 0 ? dst / imm : 0 (unsigned)"),
    (0x37, Off(1), Sdiv64Imm, Alu { op: AluOp::Sdiv, width: Width::W64, src: Src::Imm }, "{d} s/= {imm}", "signed division, dst = imm != 0 ? dst s/ imm : 0"),
    (0x3f, Off(0), Div64Reg, Alu { op: AluOp::Div, width: Width::W64, src: Src::Reg }, "{d} /= {s}", "dst = src != 0 ? dst / src : 0 (unsigned)"),
    (0x3f, Off(1), Sdiv64Reg, Alu { op: AluOp::Sdiv, width: Width::W64, src: Src::Reg }, "{d} s/= {s}", "signed division, dst = src != 0 ? dst s/ src : 0"),
    (0x47, Any, Or64Imm, Alu { op: AluOp::Or, width: Width::W64, src: Src::Imm }, "{d} |= {imm}", "dst |= imm"),
    (0x4f, Any, Or64Reg, Alu { op: AluOp::Or, width: Width::W64, src: Src::Reg }, "{d} |= {s}", "dst |= src"),
    (0x57, Any, And64Imm, Alu { op: AluOp::And, width: Width::W64, src: Src::Imm }, "{d} &= {imm}", "dst &= imm"),
    (0x5f, Any, And64Reg, Alu { op: AluOp::And, width: Width::W64, src: Src::Reg }, "{d} &= {s}", "dst &= src"),
    (0x67, Any, Lsh64Imm, Alu { op: AluOp::Lsh, width: Width::W64, src: Src::Imm }, "{d} <<= {imm}", "dst <<= (imm & mask)"),
    (0x6f, Any, Lsh64Reg, Alu { op: AluOp::Lsh, width: Width::W64, src: Src::Reg }, "{d} <<= {s}", "dst <<= (src & mask)"),
    (0x77, Any, Rsh64Imm, Alu { op: AluOp::Rsh, width: Width::W64, src: Src::Imm }, "{d} >>= {imm}", "dst >>= (imm & mask), logical"),
    (0x7f, Any, Rsh64Reg, Alu { op: AluOp::Rsh, width: Width::W64, src: Src::Reg }, "{d} >>= {s}", "dst >>= (src & mask), logical"),
    (0x97, Off(0), Mod64Imm, Alu { op: AluOp::Mod, width: Width::W64, src: Src::Imm }, "{d} %= {imm}", "dst = imm != 0 ? dst % imm : dst (unsigned)"),
    (0x97, Off(1), Smod64Imm, Alu { op: AluOp::Smod, width: Width::W64, src: Src::Imm }, "{d} s%= {imm}", "signed modulo, dst = imm != 0 ? dst s% imm : dst"),
    (0x9f, Off(0), Mod64Reg, Alu { op: AluOp::Mod, width: Width::W64, src: Src::Reg }, "{d} %= {s}", "dst = src != 0 ? dst % src : dst (unsigned)"),
    (0x9f, Off(1), Smod64Reg, Alu { op: AluOp::Smod, width: Width::W64, src: Src::Reg }, "{d} s%= {s}", "signed modulo, dst = src != 0 ? dst s% src : dst"),
    (0xa7, Any, Xor64Imm, Alu { op: AluOp::Xor, width: Width::W64, src: Src::Imm }, "{d} ^= {imm}", "dst ^= imm"),
    (0xaf, Any, Xor64Reg, Alu { op: AluOp::Xor, width: Width::W64, src: Src::Reg }, "{d} ^= {s}", "dst ^= src"),
    (0xb7, Off(0), Mov64Imm, Alu { op: AluOp::Mov, width: Width::W64, src: Src::Imm }, "{d} = {imm}", "dst = imm"),
    (0xbf, Off(0), Mov64Reg, Alu { op: AluOp::Mov, width: Width::W64, src: Src::Reg }, "{d} = {s}", "dst = src"),
    (0xbf, Off(8), Mov64Sx8, Alu { op: AluOp::Movsx8, width: Width::W64, src: Src::Reg }, "{d} = (s8){s}", "dst = sign-extend low 8 bits of src"),
    (0xbf, Off(16), Mov64Sx16, Alu { op: AluOp::Movsx16, width: Width::W64, src: Src::Reg }, "{d} = (s16){s}", "dst = sign-extend low 16 bits of src"),
    (0xbf, Off(32), Mov64Sx32, Alu { op: AluOp::Movsx32, width: Width::W64, src: Src::Reg }, "{d} = (s32){s}", "dst = sign-extend low 32 bits of src"),
    (0xc7, Any, Arsh64Imm, Alu { op: AluOp::Arsh, width: Width::W64, src: Src::Imm }, "{d} s>>= {imm}", "dst >>= (imm & mask), arithmetic"),
    (0xcf, Any, Arsh64Reg, Alu { op: AluOp::Arsh, width: Width::W64, src: Src::Reg }, "{d} s>>= {s}", "dst >>= (src & mask), arithmetic"),
    (0x87, Any, Neg64, Alu { op: AluOp::Neg, width: Width::W64, src: Src::Imm }, "{d} = -{d}", "dst = -dst"),
    (0x04, Any, Add32Imm, Alu { op: AluOp::Add, width: Width::W32, src: Src::Imm }, "{wd} += {imm}", "dst += imm, 32-bit, upper half zeroed"),
    (0x0c, Any, Add32Reg, Alu { op: AluOp::Add, width: Width::W32, src: Src::Reg }, "{wd} += {ws}", "dst += src, 32-bit, upper half zeroed"),
    (0x14, Any, Sub32Imm, Alu { op: AluOp::Sub, width: Width::W32, src: Src::Imm }, "{wd} -= {imm}", "dst -= imm, 32-bit, upper half zeroed"),
    (0x1c, Any, Sub32Reg, Alu { op: AluOp::Sub, width: Width::W32, src: Src::Reg }, "{wd} -= {ws}", "dst -= src, 32-bit, upper half zeroed"),
    (0x24, Any, Mul32Imm, Alu { op: AluOp::Mul, width: Width::W32, src: Src::Imm }, "{wd} *= {imm}", "dst *= imm, 32-bit, upper half zeroed"),
    (0x2c, Any, Mul32Reg, Alu { op: AluOp::Mul, width: Width::W32, src: Src::Reg }, "{wd} *= {ws}", "dst *= src, 32-bit, upper half zeroed"),
    (0x34, Off(0), Div32Imm, Alu { op: AluOp::Div, width: Width::W32, src: Src::Imm }, "{wd} /= {imm}", "dst = imm != 0 ? dst / imm : 0 (unsigned), 32-bit, upper half zeroed"),
    (0x34, Off(1), Sdiv32Imm, Alu { op: AluOp::Sdiv, width: Width::W32, src: Src::Imm }, "{wd} s/= {imm}", "signed division, dst = imm != 0 ? dst s/ imm : 0, 32-bit"),
    (0x3c, Off(0), Div32Reg, Alu { op: AluOp::Div, width: Width::W32, src: Src::Reg }, "{wd} /= {ws}", "dst = src != 0 ? dst / src : 0 (unsigned), 32-bit, upper half zeroed"),
    (0x3c, Off(1), Sdiv32Reg, Alu { op: AluOp::Sdiv, width: Width::W32, src: Src::Reg }, "{wd} s/= {ws}", "signed division, dst = src != 0 ? dst s/ src : 0, 32-bit"),
    (0x44, Any, Or32Imm, Alu { op: AluOp::Or, width: Width::W32, src: Src::Imm }, "{wd} |= {imm}", "dst |= imm, 32-bit, upper half zeroed"),
    (0x4c, Any, Or32Reg, Alu { op: AluOp::Or, width: Width::W32, src: Src::Reg }, "{wd} |= {ws}", "dst |= src, 32-bit, upper half zeroed"),
    (0x54, Any, And32Imm, Alu { op: AluOp::And, width: Width::W32, src: Src::Imm }, "{wd} &= {imm}", "dst &= imm, 32-bit, upper half zeroed"),
    (0x5c, Any, And32Reg, Alu { op: AluOp::And, width: Width::W32, src: Src::Reg }, "{wd} &= {ws}", "dst &= src, 32-bit, upper half zeroed"),
    (0x64, Any, Lsh32Imm, Alu { op: AluOp::Lsh, width: Width::W32, src: Src::Imm }, "{wd} <<= {imm}", "dst <<= (imm & mask), 32-bit, upper half zeroed"),
    (0x6c, Any, Lsh32Reg, Alu { op: AluOp::Lsh, width: Width::W32, src: Src::Reg }, "{wd} <<= {ws}", "dst <<= (src & mask), 32-bit, upper half zeroed"),
    (0x74, Any, Rsh32Imm, Alu { op: AluOp::Rsh, width: Width::W32, src: Src::Imm }, "{wd} >>= {imm}", "dst >>= (imm & mask), logical, 32-bit, upper half zeroed"),
    (0x7c, Any, Rsh32Reg, Alu { op: AluOp::Rsh, width: Width::W32, src: Src::Reg }, "{wd} >>= {ws}", "dst >>= (src & mask), logical, 32-bit, upper half zeroed"),
    (0x94, Off(0), Mod32Imm, Alu { op: AluOp::Mod, width: Width::W32, src: Src::Imm }, "{wd} %= {imm}", "dst = imm != 0 ? dst % imm : dst (unsigned), 32-bit, upper half zeroed"),
    (0x94, Off(1), Smod32Imm, Alu { op: AluOp::Smod, width: Width::W32, src: Src::Imm }, "{wd} s%= {imm}", "signed modulo, dst = imm != 0 ? dst s% imm : dst, 32-bit"),
    (0x9c, Off(0), Mod32Reg, Alu { op: AluOp::Mod, width: Width::W32, src: Src::Reg }, "{wd} %= {ws}", "dst = src != 0 ? dst % src : dst (unsigned), 32-bit, upper half zeroed"),
    (0x9c, Off(1), Smod32Reg, Alu { op: AluOp::Smod, width: Width::W32, src: Src::Reg }, "{wd} s%= {ws}", "signed modulo, dst = src != 0 ? dst s% src : dst, 32-bit"),
    (0xa4, Any, Xor32Imm, Alu { op: AluOp::Xor, width: Width::W32, src: Src::Imm }, "{wd} ^= {imm}", "dst ^= imm, 32-bit, upper half zeroed"),
    (0xac, Any, Xor32Reg, Alu { op: AluOp::Xor, width: Width::W32, src: Src::Reg }, "{wd} ^= {ws}", "dst ^= src, 32-bit, upper half zeroed"),
    (0xb4, Off(0), Mov32Imm, Alu { op: AluOp::Mov, width: Width::W32, src: Src::Imm }, "{wd} = {imm}", "dst = imm, 32-bit, upper half zeroed"),
    (0xbc, Off(0), Mov32Reg, Alu { op: AluOp::Mov, width: Width::W32, src: Src::Reg }, "{wd} = {ws}", "dst = src, 32-bit, upper half zeroed"),
    (0xbc, Off(8), Mov32Sx8, Alu { op: AluOp::Movsx8, width: Width::W32, src: Src::Reg }, "{wd} = (s8){ws}", "dst = sign-extend low 8 bits of src to 32 bits, upper half zeroed"),
    (0xbc, Off(16), Mov32Sx16, Alu { op: AluOp::Movsx16, width: Width::W32, src: Src::Reg }, "{wd} = (s16){ws}", "dst = sign-extend low 16 bits of src to 32 bits, upper half zeroed"),
    (0xc4, Any, Arsh32Imm, Alu { op: AluOp::Arsh, width: Width::W32, src: Src::Imm }, "{wd} s>>= {imm}", "dst >>= (imm & mask), arithmetic, 32-bit, upper half zeroed"),
    (0xcc, Any, Arsh32Reg, Alu { op: AluOp::Arsh, width: Width::W32, src: Src::Reg }, "{wd} s>>= {ws}", "dst >>= (src & mask), arithmetic, 32-bit, upper half zeroed"),
    (0x84, Any, Neg32, Alu { op: AluOp::Neg, width: Width::W32, src: Src::Imm }, "{wd} = -{wd}", "dst = -dst, 32-bit"),
    (0xd4, Imm(16), Le16, End { op: EndOp::Le, bits: 16 }, "{d} = le16 {d}", "dst = convert to little-endian, 16 bits, upper bits zeroed"),
    (0xd4, Imm(32), Le32, End { op: EndOp::Le, bits: 32 }, "{d} = le32 {d}", "dst = convert to little-endian, 32 bits, upper bits zeroed"),
    (0xd4, Imm(64), Le64, End { op: EndOp::Le, bits: 64 }, "{d} = le64 {d}", "dst = convert to little-endian, 64 bits, upper bits zeroed"),
    (0xdc, Imm(16), Be16, End { op: EndOp::Be, bits: 16 }, "{d} = be16 {d}", "dst = convert to big-endian, 16 bits, upper bits zeroed"),
    (0xdc, Imm(32), Be32, End { op: EndOp::Be, bits: 32 }, "{d} = be32 {d}", "dst = convert to big-endian, 32 bits, upper bits zeroed"),
    (0xdc, Imm(64), Be64, End { op: EndOp::Be, bits: 64 }, "{d} = be64 {d}", "dst = convert to big-endian, 64 bits, upper bits zeroed"),
    (0xd7, Imm(16), Bswap16, End { op: EndOp::Bswap, bits: 16 }, "{d} = bswap16 {d}", "dst = byte swap, 16 bits, upper bits zeroed"),
    (0xd7, Imm(32), Bswap32, End { op: EndOp::Bswap, bits: 32 }, "{d} = bswap32 {d}", "dst = byte swap, 32 bits, upper bits zeroed"),
    (0xd7, Imm(64), Bswap64, End { op: EndOp::Bswap, bits: 64 }, "{d} = bswap64 {d}", "dst = byte swap, 64 bits, upper bits zeroed"),
    (0x18, Src(0), Lddw, Ld64(Ld64Kind::Imm), "{d} = {imm64} ll", "dst = imm64 (two slots)"),
    (0x18, Src(1), LddwMapFd, Ld64(Ld64Kind::MapFd), "{d} = map_fd[{imm}] ll", "dst = map_by_fd(imm) (two slots)"),
    (0x18, Src(2), LddwMapValue, Ld64(Ld64Kind::MapValue), "{d} = map_value[{imm}][{next}] ll", "dst = map_val(map_by_fd(imm)) + next_imm (two slots)"),
    (0x18, Src(3), LddwVarAddr, Ld64(Ld64Kind::VarAddr), "{d} = var_addr[{imm}] ll", "dst = var_addr(imm) (two slots)"),
    (0x18, Src(4), LddwCodeAddr, Ld64(Ld64Kind::CodeAddr), "{d} = code_addr[{imm}] ll", "dst = code_addr(imm) (two slots)"),
    (0x18, Src(5), LddwMapIdx, Ld64(Ld64Kind::MapIdx), "{d} = map_idx[{imm}] ll", "dst = map_by_idx(imm) (two slots)"),
    (0x18, Src(6), LddwMapIdxValue, Ld64(Ld64Kind::MapIdxValue), "{d} = map_idx_value[{imm}][{next}] ll", "dst = map_val(map_by_idx(imm)) + next_imm (two slots)"),
    (0x71, Any, LdxB, Load { size: Size::B, sign_extend: false }, "{d} = *(u8 *)({s} {moff})", "dst = *(u8 *)(src + off), zero-extended"),
    (0x91, Any, LdxSxB, Load { size: Size::B, sign_extend: true }, "{d} = *(s8 *)({s} {moff})", "dst = *(s8 *)(src + off), sign-extended"),
    (0x72, Any, StB, Store { size: Size::B, src: Src::Imm }, "*(u8 *)({d} {moff}) = {imm}", "*(u8 *)(dst + off) = imm"),
    (0x73, Any, StxB, Store { size: Size::B, src: Src::Reg }, "*(u8 *)({d} {moff}) = {s}", "*(u8 *)(dst + off) = src"),
    (0x69, Any, LdxH, Load { size: Size::H, sign_extend: false }, "{d} = *(u16 *)({s} {moff})", "dst = *(u16 *)(src + off), zero-extended"),
    (0x89, Any, LdxSxH, Load { size: Size::H, sign_extend: true }, "{d} = *(s16 *)({s} {moff})", "dst = *(s16 *)(src + off), sign-extended"),
    (0x6a, Any, StH, Store { size: Size::H, src: Src::Imm }, "*(u16 *)({d} {moff}) = {imm}", "*(u16 *)(dst + off) = imm"),
    (0x6b, Any, StxH, Store { size: Size::H, src: Src::Reg }, "*(u16 *)({d} {moff}) = {s}", "*(u16 *)(dst + off) = src"),
    (0x61, Any, LdxW, Load { size: Size::W, sign_extend: false }, "{d} = *(u32 *)({s} {moff})", "dst = *(u32 *)(src + off), zero-extended"),
    (0x81, Any, LdxSxW, Load { size: Size::W, sign_extend: true }, "{d} = *(s32 *)({s} {moff})", "dst = *(s32 *)(src + off), sign-extended"),
    (0x62, Any, StW, Store { size: Size::W, src: Src::Imm }, "*(u32 *)({d} {moff}) = {imm}", "*(u32 *)(dst + off) = imm"),
    (0x63, Any, StxW, Store { size: Size::W, src: Src::Reg }, "*(u32 *)({d} {moff}) = {s}", "*(u32 *)(dst + off) = src"),
    (0x79, Any, LdxDw, Load { size: Size::Dw, sign_extend: false }, "{d} = *(u64 *)({s} {moff})", "dst = *(u64 *)(src + off), zero-extended"),
    (0x7a, Any, StDw, Store { size: Size::Dw, src: Src::Imm }, "*(u64 *)({d} {moff}) = {imm}", "*(u64 *)(dst + off) = imm"),
    (0x7b, Any, StxDw, Store { size: Size::Dw, src: Src::Reg }, "*(u64 *)({d} {moff}) = {s}", "*(u64 *)(dst + off) = src"),
    (0xc3, Imm(0x0), AtomicAdd32, Atomic { op: AtomicOp::Add, size: Size::W, fetch: false }, "lock *(u32 *)({d} {moff}) += {ws}", "atomically *(u32 *)(dst + off) += src"),
    (0xc3, Imm(0x1), AtomicFetchAdd32, Atomic { op: AtomicOp::Add, size: Size::W, fetch: true }, "{ws} = atomic_fetch_add((u32 *)({d} {moff}), {ws})", "atomically src = old *(u32 *)(dst + off); *(dst + off) += src"),
    (0xc3, Imm(0x40), AtomicOr32, Atomic { op: AtomicOp::Or, size: Size::W, fetch: false }, "lock *(u32 *)({d} {moff}) |= {ws}", "atomically *(u32 *)(dst + off) |= src"),
    (0xc3, Imm(0x41), AtomicFetchOr32, Atomic { op: AtomicOp::Or, size: Size::W, fetch: true }, "{ws} = atomic_fetch_or((u32 *)({d} {moff}), {ws})", "atomically src = old *(u32 *)(dst + off); *(dst + off) |= src"),
    (0xc3, Imm(0x50), AtomicAnd32, Atomic { op: AtomicOp::And, size: Size::W, fetch: false }, "lock *(u32 *)({d} {moff}) &= {ws}", "atomically *(u32 *)(dst + off) &= src"),
    (0xc3, Imm(0x51), AtomicFetchAnd32, Atomic { op: AtomicOp::And, size: Size::W, fetch: true }, "{ws} = atomic_fetch_and((u32 *)({d} {moff}), {ws})", "atomically src = old *(u32 *)(dst + off); *(dst + off) &= src"),
    (0xc3, Imm(0xa0), AtomicXor32, Atomic { op: AtomicOp::Xor, size: Size::W, fetch: false }, "lock *(u32 *)({d} {moff}) ^= {ws}", "atomically *(u32 *)(dst + off) ^= src"),
    (0xc3, Imm(0xa1), AtomicFetchXor32, Atomic { op: AtomicOp::Xor, size: Size::W, fetch: true }, "{ws} = atomic_fetch_xor((u32 *)({d} {moff}), {ws})", "atomically src = old *(u32 *)(dst + off); *(dst + off) ^= src"),
    (0xc3, Imm(0xe1), Xchg32, Atomic { op: AtomicOp::Xchg, size: Size::W, fetch: true }, "{ws} = xchg32_32({d} {moff}, {ws})", "atomically exchange src with *(dst + off)"),
    (0xc3, Imm(0xf1), Cmpxchg32, Atomic { op: AtomicOp::Cmpxchg, size: Size::W, fetch: true }, "w0 = cmpxchg32_32({d} {moff}, w0, {ws})", "atomically: r0 = old *(dst + off); if old == r0 then *(dst + off) = src"),
    (0xdb, Imm(0x0), AtomicAdd64, Atomic { op: AtomicOp::Add, size: Size::Dw, fetch: false }, "lock *(u64 *)({d} {moff}) += {s}", "atomically *(u64 *)(dst + off) += src"),
    (0xdb, Imm(0x1), AtomicFetchAdd64, Atomic { op: AtomicOp::Add, size: Size::Dw, fetch: true }, "{s} = atomic_fetch_add((u64 *)({d} {moff}), {s})", "atomically src = old *(u64 *)(dst + off); *(dst + off) += src"),
    (0xdb, Imm(0x40), AtomicOr64, Atomic { op: AtomicOp::Or, size: Size::Dw, fetch: false }, "lock *(u64 *)({d} {moff}) |= {s}", "atomically *(u64 *)(dst + off) |= src"),
    (0xdb, Imm(0x41), AtomicFetchOr64, Atomic { op: AtomicOp::Or, size: Size::Dw, fetch: true }, "{s} = atomic_fetch_or((u64 *)({d} {moff}), {s})", "atomically src = old *(u64 *)(dst + off); *(dst + off) |= src"),
    (0xdb, Imm(0x50), AtomicAnd64, Atomic { op: AtomicOp::And, size: Size::Dw, fetch: false }, "lock *(u64 *)({d} {moff}) &= {s}", "atomically *(u64 *)(dst + off) &= src"),
    (0xdb, Imm(0x51), AtomicFetchAnd64, Atomic { op: AtomicOp::And, size: Size::Dw, fetch: true }, "{s} = atomic_fetch_and((u64 *)({d} {moff}), {s})", "atomically src = old *(u64 *)(dst + off); *(dst + off) &= src"),
    (0xdb, Imm(0xa0), AtomicXor64, Atomic { op: AtomicOp::Xor, size: Size::Dw, fetch: false }, "lock *(u64 *)({d} {moff}) ^= {s}", "atomically *(u64 *)(dst + off) ^= src"),
    (0xdb, Imm(0xa1), AtomicFetchXor64, Atomic { op: AtomicOp::Xor, size: Size::Dw, fetch: true }, "{s} = atomic_fetch_xor((u64 *)({d} {moff}), {s})", "atomically src = old *(u64 *)(dst + off); *(dst + off) ^= src"),
    (0xdb, Imm(0xe1), Xchg64, Atomic { op: AtomicOp::Xchg, size: Size::Dw, fetch: true }, "{s} = xchg_64({d} {moff}, {s})", "atomically exchange src with *(dst + off)"),
    (0xdb, Imm(0xf1), Cmpxchg64, Atomic { op: AtomicOp::Cmpxchg, size: Size::Dw, fetch: true }, "r0 = cmpxchg_64({d} {moff}, r0, {s})", "atomically: r0 = old *(dst + off); if old == r0 then *(dst + off) = src"),
    (0x05, Any, Ja, Ja, "goto {joff}", "pc += off"),
    (0x06, Any, Gotol, JaLong, "gotol {jimm}", "pc += imm"),
    (0x15, Any, Jeq64Imm, Jmp { cond: JmpCond::Eq, width: Width::W64, src: Src::Imm }, "if {d} == {imm} goto {joff}", "if dst == imm (64-bit) then pc += off"),
    (0x1d, Any, Jeq64Reg, Jmp { cond: JmpCond::Eq, width: Width::W64, src: Src::Reg }, "if {d} == {s} goto {joff}", "if dst == src (64-bit) then pc += off"),
    (0x25, Any, Jgt64Imm, Jmp { cond: JmpCond::Gt, width: Width::W64, src: Src::Imm }, "if {d} > {imm} goto {joff}", "if dst > imm (64-bit) then pc += off"),
    (0x2d, Any, Jgt64Reg, Jmp { cond: JmpCond::Gt, width: Width::W64, src: Src::Reg }, "if {d} > {s} goto {joff}", "if dst > src (64-bit) then pc += off"),
    (0x35, Any, Jge64Imm, Jmp { cond: JmpCond::Ge, width: Width::W64, src: Src::Imm }, "if {d} >= {imm} goto {joff}", "if dst >= imm (64-bit) then pc += off"),
    (0x3d, Any, Jge64Reg, Jmp { cond: JmpCond::Ge, width: Width::W64, src: Src::Reg }, "if {d} >= {s} goto {joff}", "if dst >= src (64-bit) then pc += off"),
    (0x45, Any, Jset64Imm, Jmp { cond: JmpCond::Set, width: Width::W64, src: Src::Imm }, "if {d} & {imm} goto {joff}", "if dst & imm (64-bit) then pc += off"),
    (0x4d, Any, Jset64Reg, Jmp { cond: JmpCond::Set, width: Width::W64, src: Src::Reg }, "if {d} & {s} goto {joff}", "if dst & src (64-bit) then pc += off"),
    (0x55, Any, Jne64Imm, Jmp { cond: JmpCond::Ne, width: Width::W64, src: Src::Imm }, "if {d} != {imm} goto {joff}", "if dst != imm (64-bit) then pc += off"),
    (0x5d, Any, Jne64Reg, Jmp { cond: JmpCond::Ne, width: Width::W64, src: Src::Reg }, "if {d} != {s} goto {joff}", "if dst != src (64-bit) then pc += off"),
    (0x65, Any, Jsgt64Imm, Jmp { cond: JmpCond::Sgt, width: Width::W64, src: Src::Imm }, "if {d} s> {imm} goto {joff}", "if dst s> imm (64-bit) then pc += off"),
    (0x6d, Any, Jsgt64Reg, Jmp { cond: JmpCond::Sgt, width: Width::W64, src: Src::Reg }, "if {d} s> {s} goto {joff}", "if dst s> src (64-bit) then pc += off"),
    (0x75, Any, Jsge64Imm, Jmp { cond: JmpCond::Sge, width: Width::W64, src: Src::Imm }, "if {d} s>= {imm} goto {joff}", "if dst s>= imm (64-bit) then pc += off"),
    (0x7d, Any, Jsge64Reg, Jmp { cond: JmpCond::Sge, width: Width::W64, src: Src::Reg }, "if {d} s>= {s} goto {joff}", "if dst s>= src (64-bit) then pc += off"),
    (0xa5, Any, Jlt64Imm, Jmp { cond: JmpCond::Lt, width: Width::W64, src: Src::Imm }, "if {d} < {imm} goto {joff}", "if dst < imm (64-bit) then pc += off"),
    (0xad, Any, Jlt64Reg, Jmp { cond: JmpCond::Lt, width: Width::W64, src: Src::Reg }, "if {d} < {s} goto {joff}", "if dst < src (64-bit) then pc += off"),
    (0xb5, Any, Jle64Imm, Jmp { cond: JmpCond::Le, width: Width::W64, src: Src::Imm }, "if {d} <= {imm} goto {joff}", "if dst <= imm (64-bit) then pc += off"),
    (0xbd, Any, Jle64Reg, Jmp { cond: JmpCond::Le, width: Width::W64, src: Src::Reg }, "if {d} <= {s} goto {joff}", "if dst <= src (64-bit) then pc += off"),
    (0xc5, Any, Jslt64Imm, Jmp { cond: JmpCond::Slt, width: Width::W64, src: Src::Imm }, "if {d} s< {imm} goto {joff}", "if dst s< imm (64-bit) then pc += off"),
    (0xcd, Any, Jslt64Reg, Jmp { cond: JmpCond::Slt, width: Width::W64, src: Src::Reg }, "if {d} s< {s} goto {joff}", "if dst s< src (64-bit) then pc += off"),
    (0xd5, Any, Jsle64Imm, Jmp { cond: JmpCond::Sle, width: Width::W64, src: Src::Imm }, "if {d} s<= {imm} goto {joff}", "if dst s<= imm (64-bit) then pc += off"),
    (0xdd, Any, Jsle64Reg, Jmp { cond: JmpCond::Sle, width: Width::W64, src: Src::Reg }, "if {d} s<= {s} goto {joff}", "if dst s<= src (64-bit) then pc += off"),
    (0x16, Any, Jeq32Imm, Jmp { cond: JmpCond::Eq, width: Width::W32, src: Src::Imm }, "if {wd} == {imm} goto {joff}", "if dst == imm (32-bit) then pc += off"),
    (0x1e, Any, Jeq32Reg, Jmp { cond: JmpCond::Eq, width: Width::W32, src: Src::Reg }, "if {wd} == {ws} goto {joff}", "if dst == src (32-bit) then pc += off"),
    (0x26, Any, Jgt32Imm, Jmp { cond: JmpCond::Gt, width: Width::W32, src: Src::Imm }, "if {wd} > {imm} goto {joff}", "if dst > imm (32-bit) then pc += off"),
    (0x2e, Any, Jgt32Reg, Jmp { cond: JmpCond::Gt, width: Width::W32, src: Src::Reg }, "if {wd} > {ws} goto {joff}", "if dst > src (32-bit) then pc += off"),
    (0x36, Any, Jge32Imm, Jmp { cond: JmpCond::Ge, width: Width::W32, src: Src::Imm }, "if {wd} >= {imm} goto {joff}", "if dst >= imm (32-bit) then pc += off"),
    (0x3e, Any, Jge32Reg, Jmp { cond: JmpCond::Ge, width: Width::W32, src: Src::Reg }, "if {wd} >= {ws} goto {joff}", "if dst >= src (32-bit) then pc += off"),
    (0x46, Any, Jset32Imm, Jmp { cond: JmpCond::Set, width: Width::W32, src: Src::Imm }, "if {wd} & {imm} goto {joff}", "if dst & imm (32-bit) then pc += off"),
    (0x4e, Any, Jset32Reg, Jmp { cond: JmpCond::Set, width: Width::W32, src: Src::Reg }, "if {wd} & {ws} goto {joff}", "if dst & src (32-bit) then pc += off"),
    (0x56, Any, Jne32Imm, Jmp { cond: JmpCond::Ne, width: Width::W32, src: Src::Imm }, "if {wd} != {imm} goto {joff}", "if dst != imm (32-bit) then pc += off"),
    (0x5e, Any, Jne32Reg, Jmp { cond: JmpCond::Ne, width: Width::W32, src: Src::Reg }, "if {wd} != {ws} goto {joff}", "if dst != src (32-bit) then pc += off"),
    (0x66, Any, Jsgt32Imm, Jmp { cond: JmpCond::Sgt, width: Width::W32, src: Src::Imm }, "if {wd} s> {imm} goto {joff}", "if dst s> imm (32-bit) then pc += off"),
    (0x6e, Any, Jsgt32Reg, Jmp { cond: JmpCond::Sgt, width: Width::W32, src: Src::Reg }, "if {wd} s> {ws} goto {joff}", "if dst s> src (32-bit) then pc += off"),
    (0x76, Any, Jsge32Imm, Jmp { cond: JmpCond::Sge, width: Width::W32, src: Src::Imm }, "if {wd} s>= {imm} goto {joff}", "if dst s>= imm (32-bit) then pc += off"),
    (0x7e, Any, Jsge32Reg, Jmp { cond: JmpCond::Sge, width: Width::W32, src: Src::Reg }, "if {wd} s>= {ws} goto {joff}", "if dst s>= src (32-bit) then pc += off"),
    (0xa6, Any, Jlt32Imm, Jmp { cond: JmpCond::Lt, width: Width::W32, src: Src::Imm }, "if {wd} < {imm} goto {joff}", "if dst < imm (32-bit) then pc += off"),
    (0xae, Any, Jlt32Reg, Jmp { cond: JmpCond::Lt, width: Width::W32, src: Src::Reg }, "if {wd} < {ws} goto {joff}", "if dst < src (32-bit) then pc += off"),
    (0xb6, Any, Jle32Imm, Jmp { cond: JmpCond::Le, width: Width::W32, src: Src::Imm }, "if {wd} <= {imm} goto {joff}", "if dst <= imm (32-bit) then pc += off"),
    (0xbe, Any, Jle32Reg, Jmp { cond: JmpCond::Le, width: Width::W32, src: Src::Reg }, "if {wd} <= {ws} goto {joff}", "if dst <= src (32-bit) then pc += off"),
    (0xc6, Any, Jslt32Imm, Jmp { cond: JmpCond::Slt, width: Width::W32, src: Src::Imm }, "if {wd} s< {imm} goto {joff}", "if dst s< imm (32-bit) then pc += off"),
    (0xce, Any, Jslt32Reg, Jmp { cond: JmpCond::Slt, width: Width::W32, src: Src::Reg }, "if {wd} s< {ws} goto {joff}", "if dst s< src (32-bit) then pc += off"),
    (0xd6, Any, Jsle32Imm, Jmp { cond: JmpCond::Sle, width: Width::W32, src: Src::Imm }, "if {wd} s<= {imm} goto {joff}", "if dst s<= imm (32-bit) then pc += off"),
    (0xde, Any, Jsle32Reg, Jmp { cond: JmpCond::Sle, width: Width::W32, src: Src::Reg }, "if {wd} s<= {ws} goto {joff}", "if dst s<= src (32-bit) then pc += off"),
    (0x85, Src(0), Call, Call, "call {helper}", "call helper imm"),
    (0x85, Src(1), CallLocal, CallLocal, "call {jimm}", "call local function at pc + imm + 1"),
    (0x85, Src(2), CallKfunc, CallKfunc, "call kfunc[{imm}]", "call kernel function by BTF id imm"),
    (0x8d, Any, Callx, Callx, "callx {d}", "call the helper whose id is the value of dst"),
    (0x95, Any, Exit, Exit, "exit", "return r0 to the caller"),
}
