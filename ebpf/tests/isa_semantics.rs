//! Semantics of every opcode of `Opcode::ALL`, against hand-computed results.
//!
//! Each case is `(opcode under test, program, expected r0)`; the expected values were worked
//! out by hand from RFC 9669, not by running anything. Programs run in `--mem` mode with r1
//! pointing to 64 bytes `0x80, 0x81, ..., 0xbf` and in an `Env` whose worker id is 3.
//! Every run goes to both CPU engines, the interpreter and the native JIT, which must agree
//! (`engines/mod.rs`).
//! `every_opcode_has_a_semantics_test` fails when an opcode has no case (or no rejection
//! test, for the forms the interpreter refuses at load time).

mod engines;

use ebpf::asm::assemble;
use ebpf::interp::{Env, ExecError, Vm};
use ebpf::isa::Opcode;
use ebpf::maps::create_local;
use ebpf::program::{MapDef, MapKind, MapOrigin, Program};
use proptest::prelude::*;
use std::collections::BTreeSet;

const M1: u64 = u64::MAX; // -1

fn mem_pattern() -> [u8; 64] {
    std::array::from_fn(|i| 0x80 + i as u8)
}

fn prog(src: &str) -> Program {
    let insns = assemble(src).unwrap_or_else(|e| panic!("assembling {src:?}: {e}"));
    Program::from_insns("t", insns)
}

fn try_run(src: &str) -> Result<u64, ExecError> {
    let vm = Vm::new(&prog(src), vec![])?;
    let mut mem = mem_pattern();
    let mut env = Env::new(3);
    engines::run_mem(&vm, &mut mem, &mut env)
}

fn run(src: &str) -> u64 {
    try_run(src).unwrap_or_else(|e| panic!("running {src:?}: {e}"))
}

/// `r0 = 1; <setup>; if <cond> goto +1; r0 = 2; exit`: 1 when taken, 2 when not.
fn jmp(setup: &str, cond: &str) -> String {
    format!("r0 = 1\n{setup}\nif {cond} goto +1\nr0 = 2\nexit")
}

use Opcode::*;

fn cases() -> Vec<(Opcode, String, u64)> {
    let c = |op: Opcode, src: &str, want: u64| (op, src.to_string(), want);
    let t = |op: Opcode, setup: &str, cond: &str, taken: bool| {
        (op, jmp(setup, cond), if taken { 1 } else { 2 })
    };
    vec![
        // ---- ALU64 ----
        c(Add64Imm, "r0 = 5\nr0 += -7\nexit", 0xffff_ffff_ffff_fffe),
        c(Add64Reg, "r0 = -1\nr1 = 2\nr0 += r1\nexit", 1),
        c(Sub64Imm, "r0 = 3\nr0 -= 5\nexit", 0xffff_ffff_ffff_fffe),
        c(Sub64Reg, "r0 = 10\nr1 = 4\nr0 -= r1\nexit", 6),
        c(Mul64Imm, "r0 = 0x40000000\nr0 *= 8\nexit", 0x2_0000_0000),
        c(
            Mul64Reg,
            "r0 = -3\nr1 = 7\nr0 *= r1\nexit",
            0xffff_ffff_ffff_ffeb,
        ),
        c(Div64Imm, "r0 = 100\nr0 /= 7\nexit", 14),
        c(Div64Imm, "r0 = 100\nr0 /= 0\nexit", 0),
        c(Div64Imm, "r0 = -1\nr0 /= -1\nexit", 1),
        c(Div64Reg, "r0 = 100\nr1 = 0\nr0 /= r1\nexit", 0),
        c(
            Div64Reg,
            "r0 = -1\nr1 = 2\nr0 /= r1\nexit",
            0x7fff_ffff_ffff_ffff,
        ),
        c(Sdiv64Imm, "r0 = 7\nr0 s/= -2\nexit", 0xffff_ffff_ffff_fffd),
        c(Sdiv64Imm, "r0 = 5\nr0 s/= 0\nexit", 0),
        c(
            Sdiv64Imm,
            "r0 = 0x8000000000000000 ll\nr0 s/= -1\nexit",
            0x8000_0000_0000_0000,
        ),
        c(
            Sdiv64Reg,
            "r0 = -100\nr1 = 7\nr0 s/= r1\nexit",
            0xffff_ffff_ffff_fff2,
        ),
        c(
            Sdiv64Reg,
            "r0 = 0x8000000000000000 ll\nr1 = -1\nr0 s/= r1\nexit",
            0x8000_0000_0000_0000,
        ),
        c(Sdiv64Reg, "r0 = -9\nr1 = 0\nr0 s/= r1\nexit", 0),
        c(Or64Imm, "r0 = 1\nr0 |= -256\nexit", 0xffff_ffff_ffff_ff01),
        c(Or64Reg, "r0 = 0x0f\nr1 = 0xf0\nr0 |= r1\nexit", 0xff),
        c(And64Imm, "r0 = -1\nr0 &= 0x7f0\nexit", 0x7f0),
        c(
            And64Imm,
            "r0 = 0x100000005 ll\nr0 &= -2\nexit",
            0x1_0000_0004,
        ),
        c(
            And64Reg,
            "r0 = 0xff00ff ll\nr1 = 0xffff\nr0 &= r1\nexit",
            0xff,
        ),
        c(Lsh64Imm, "r0 = 1\nr0 <<= 63\nexit", 0x8000_0000_0000_0000),
        c(Lsh64Imm, "r0 = 1\nr0 <<= 65\nexit", 2),
        c(Lsh64Reg, "r0 = 3\nr1 = 64\nr0 <<= r1\nexit", 3),
        c(Lsh64Reg, "r0 = 3\nr1 = 4\nr0 <<= r1\nexit", 48),
        c(Rsh64Imm, "r0 = -1\nr0 >>= 60\nexit", 0xf),
        c(
            Rsh64Reg,
            "r0 = -1\nr1 = 68\nr0 >>= r1\nexit",
            0x0fff_ffff_ffff_ffff,
        ),
        c(Mod64Imm, "r0 = 100\nr0 %= 7\nexit", 2),
        c(Mod64Imm, "r0 = -5\nr0 %= 0\nexit", 0xffff_ffff_ffff_fffb),
        c(
            Mod64Reg,
            "r0 = 0x123456789 ll\nr1 = 0\nr0 %= r1\nexit",
            0x1_2345_6789,
        ),
        c(Mod64Reg, "r0 = -1\nr1 = 10\nr0 %= r1\nexit", 5), // 18446744073709551615 % 10
        c(Smod64Imm, "r0 = -7\nr0 s%= 2\nexit", M1),
        c(Smod64Imm, "r0 = 7\nr0 s%= -2\nexit", 1),
        c(Smod64Imm, "r0 = -7\nr0 s%= 0\nexit", 0xffff_ffff_ffff_fff9),
        c(Smod64Imm, "r0 = 0x8000000000000000 ll\nr0 s%= -1\nexit", 0),
        c(Smod64Reg, "r0 = -7\nr1 = -3\nr0 s%= r1\nexit", M1),
        c(
            Smod64Reg,
            "r0 = 0x8000000000000000 ll\nr1 = -1\nr0 s%= r1\nexit",
            0,
        ),
        c(Xor64Imm, "r0 = 0xff\nr0 ^= -1\nexit", 0xffff_ffff_ffff_ff00),
        c(Xor64Reg, "r0 = 0xf0f0\nr1 = 0xff00\nr0 ^= r1\nexit", 0x0ff0),
        c(Mov64Imm, "r0 = -2\nexit", 0xffff_ffff_ffff_fffe),
        c(
            Mov64Reg,
            "r1 = 0x123456789abcdef0 ll\nr0 = r1\nexit",
            0x1234_5678_9abc_def0,
        ),
        c(
            Mov64Sx8,
            "r1 = 0x180\nr0 = (s8)r1\nexit",
            0xffff_ffff_ffff_ff80,
        ),
        c(Mov64Sx8, "r1 = 0x17f\nr0 = (s8)r1\nexit", 0x7f),
        c(
            Mov64Sx16,
            "r1 = 0x18000\nr0 = (s16)r1\nexit",
            0xffff_ffff_ffff_8000,
        ),
        c(
            Mov64Sx32,
            "r1 = 0x180000000 ll\nr0 = (s32)r1\nexit",
            0xffff_ffff_8000_0000,
        ),
        c(
            Mov64Sx32,
            "r1 = 0x17fffffff ll\nr0 = (s32)r1\nexit",
            0x7fff_ffff,
        ),
        c(
            Arsh64Imm,
            "r0 = -16\nr0 s>>= 2\nexit",
            0xffff_ffff_ffff_fffc,
        ),
        c(
            Arsh64Imm,
            "r0 = -16\nr0 s>>= 66\nexit",
            0xffff_ffff_ffff_fffc,
        ),
        c(
            Arsh64Reg,
            "r0 = 0x8000000000000000 ll\nr1 = 63\nr0 s>>= r1\nexit",
            M1,
        ),
        c(Neg64, "r0 = 5\nr0 = -r0\nexit", 0xffff_ffff_ffff_fffb),
        c(
            Neg64,
            "r0 = 0x8000000000000000 ll\nr0 = -r0\nexit",
            0x8000_0000_0000_0000,
        ),
        // ---- ALU32: results zero-extended, operands are low halves ----
        c(Add32Imm, "r0 = 0xffffffff00000005 ll\nw0 += 3\nexit", 8),
        c(
            Add32Reg,
            "r0 = 0x1ffffffff ll\nr1 = 0x100000001 ll\nw0 += w1\nexit",
            0,
        ),
        c(Sub32Imm, "w0 = 0\nw0 -= 1\nexit", 0xffff_ffff),
        c(
            Sub32Reg,
            "r0 = 0x500000003 ll\nw1 = 5\nw0 -= w1\nexit",
            0xffff_fffe,
        ),
        c(Mul32Imm, "w0 = 0x10000\nw0 *= 0x10001\nexit", 0x10000),
        c(Mul32Reg, "r0 = -1\nr1 = -1\nw0 *= w1\nexit", 1),
        c(Div32Imm, "r0 = -1\nw0 /= 2\nexit", 0x7fff_ffff),
        c(Div32Imm, "r0 = -1\nw0 /= 0\nexit", 0),
        c(Div32Imm, "w0 = -1\nw0 /= -1\nexit", 1),
        c(Div32Reg, "r0 = -1\nr1 = 0x100000000 ll\nw0 /= w1\nexit", 0),
        c(
            Div32Reg,
            "r0 = 0x300000064 ll\nr1 = 0x100000005 ll\nw0 /= w1\nexit",
            20,
        ),
        c(Sdiv32Imm, "w0 = -7\nw0 s/= 2\nexit", 0xffff_fffd),
        c(
            Sdiv32Imm,
            "r0 = 0x100000007 ll\nw0 s/= -2\nexit",
            0xffff_fffd,
        ),
        c(Sdiv32Imm, "w0 = -2147483648\nw0 s/= -1\nexit", 0x8000_0000),
        c(Sdiv32Imm, "w0 = -5\nw0 s/= 0\nexit", 0),
        c(Sdiv32Reg, "w0 = 100\nw1 = -7\nw0 s/= w1\nexit", 0xffff_fff2),
        c(
            Sdiv32Reg,
            "w0 = 100\nr1 = 0x100000000 ll\nw0 s/= w1\nexit",
            0,
        ),
        c(Or32Imm, "r0 = 0xffffffff00000000 ll\nw0 |= 1\nexit", 1),
        c(
            Or32Reg,
            "r0 = 0x100000000 ll\nr1 = 0x200000002 ll\nw0 |= w1\nexit",
            2,
        ),
        c(And32Imm, "r0 = -1\nw0 &= 0xff\nexit", 0xff),
        c(And32Imm, "r0 = -1\nw0 &= -16\nexit", 0xffff_fff0),
        c(And32Reg, "r0 = -1\nr1 = -1\nw0 &= w1\nexit", 0xffff_ffff),
        c(Lsh32Imm, "w0 = 1\nw0 <<= 31\nexit", 0x8000_0000),
        c(Lsh32Imm, "w0 = 1\nw0 <<= 33\nexit", 2),
        c(Lsh32Imm, "w0 = -1\nw0 <<= 4\nexit", 0xffff_fff0),
        c(Lsh32Reg, "w0 = 3\nr1 = 32\nw0 <<= w1\nexit", 3),
        c(Rsh32Imm, "r0 = -1\nw0 >>= 4\nexit", 0x0fff_ffff),
        c(Rsh32Reg, "r0 = -1\nr1 = 36\nw0 >>= w1\nexit", 0x0fff_ffff),
        c(Mod32Imm, "w0 = 100\nw0 %= 7\nexit", 2),
        c(Mod32Imm, "r0 = 0xffffffff00000009 ll\nw0 %= 0\nexit", 9),
        c(
            Mod32Reg,
            "r0 = 0x100000005 ll\nr1 = 0x100000000 ll\nw0 %= w1\nexit",
            5,
        ),
        c(Mod32Reg, "w0 = -1\nw1 = 10\nw0 %= w1\nexit", 5), // 4294967295 % 10
        c(Smod32Imm, "w0 = -7\nw0 s%= 2\nexit", 0xffff_ffff),
        c(
            Smod32Imm,
            "r0 = 0xaaaaaaaafffffff9 ll\nw0 s%= 0\nexit",
            0xffff_fff9,
        ),
        c(Smod32Imm, "w0 = -2147483648\nw0 s%= -1\nexit", 0),
        c(Smod32Reg, "w0 = 7\nw1 = -3\nw0 s%= w1\nexit", 1),
        c(
            Smod32Reg,
            "r0 = 0x12345678fffffff9 ll\nr1 = 0x100000000 ll\nw0 s%= w1\nexit",
            0xffff_fff9,
        ),
        c(Xor32Imm, "r0 = -1\nw0 ^= 0xf\nexit", 0xffff_fff0),
        c(
            Xor32Reg,
            "r0 = 0x1000000ff ll\nr1 = 0x2000000f0 ll\nw0 ^= w1\nexit",
            0x0f,
        ),
        c(Mov32Imm, "w0 = -1\nexit", 0xffff_ffff),
        c(Mov32Reg, "r1 = -1\nw0 = w1\nexit", 0xffff_ffff),
        c(Mov32Sx8, "w1 = 0x80\nw0 = (s8)w1\nexit", 0xffff_ff80),
        c(Mov32Sx8, "r1 = 0x1ff ll\nw0 = (s8)w1\nexit", 0xffff_ffff),
        c(Mov32Sx16, "w1 = 0x8001\nw0 = (s16)w1\nexit", 0xffff_8001),
        c(Mov32Sx16, "w1 = 0x17fff\nw0 = (s16)w1\nexit", 0x7fff),
        c(Arsh32Imm, "w0 = -16\nw0 s>>= 2\nexit", 0xffff_fffc),
        c(
            Arsh32Imm,
            "r0 = 0x180000000 ll\nw0 s>>= 4\nexit",
            0xf800_0000,
        ),
        c(
            Arsh32Reg,
            "w0 = -16\nr1 = 0x100000022 ll\nw0 s>>= w1\nexit",
            0xffff_fffc,
        ),
        c(Neg32, "r0 = 0x100000001 ll\nw0 = -w0\nexit", 0xffff_ffff),
        c(Neg32, "w0 = 0\nw0 = -w0\nexit", 0),
        // ---- byte order ----
        c(
            Le16,
            "r0 = 0x1122334455667788 ll\nr0 = le16 r0\nexit",
            0x7788,
        ),
        c(
            Le32,
            "r0 = 0x1122334455667788 ll\nr0 = le32 r0\nexit",
            0x5566_7788,
        ),
        c(
            Le64,
            "r0 = 0x1122334455667788 ll\nr0 = le64 r0\nexit",
            0x1122_3344_5566_7788,
        ),
        c(
            Be16,
            "r0 = 0x1122334455667788 ll\nr0 = be16 r0\nexit",
            0x8877,
        ),
        c(
            Be32,
            "r0 = 0x1122334455667788 ll\nr0 = be32 r0\nexit",
            0x8877_6655,
        ),
        c(
            Be64,
            "r0 = 0x1122334455667788 ll\nr0 = be64 r0\nexit",
            0x8877_6655_4433_2211,
        ),
        c(
            Bswap16,
            "r0 = 0x1122334455667788 ll\nr0 = bswap16 r0\nexit",
            0x8877,
        ),
        c(
            Bswap32,
            "r0 = 0x1122334455667788 ll\nr0 = bswap32 r0\nexit",
            0x8877_6655,
        ),
        c(
            Bswap64,
            "r0 = 0x1122334455667788 ll\nr0 = bswap64 r0\nexit",
            0x8877_6655_4433_2211,
        ),
        // ---- ld_imm64 ----
        c(
            Lddw,
            "r0 = 0x8000000000000001 ll\nexit",
            0x8000_0000_0000_0001,
        ),
        c(Lddw, "r0 = 0xffffffff ll\nexit", 0xffff_ffff),
        // ---- loads (r1 = 0x80, 0x81, ...) ----
        c(LdxB, "r0 = *(u8 *)(r1 + 3)\nexit", 0x83),
        c(LdxSxB, "r0 = *(s8 *)(r1 + 3)\nexit", 0xffff_ffff_ffff_ff83),
        c(
            LdxSxB,
            "*(u8 *)(r10 - 1) = 0x7f\nr0 = *(s8 *)(r10 - 1)\nexit",
            0x7f,
        ),
        c(LdxH, "r0 = *(u16 *)(r1 + 2)\nexit", 0x8382),
        c(LdxSxH, "r0 = *(s16 *)(r1 + 2)\nexit", 0xffff_ffff_ffff_8382),
        c(LdxW, "r0 = *(u32 *)(r1 + 4)\nexit", 0x8786_8584),
        c(LdxSxW, "r0 = *(s32 *)(r1 + 4)\nexit", 0xffff_ffff_8786_8584),
        c(
            LdxSxW,
            "*(u32 *)(r10 - 4) = 0x7fffffff\nr0 = *(s32 *)(r10 - 4)\nexit",
            0x7fff_ffff,
        ),
        c(LdxDw, "r0 = *(u64 *)(r1 + 8)\nexit", 0x8f8e_8d8c_8b8a_8988),
        c(
            LdxDw,
            "r1 += 56\nr0 = *(u64 *)(r1 - 1)\nexit",
            0xbebd_bcbb_bab9_b8b7,
        ),
        // ---- stores ----
        c(
            StB,
            "*(u64 *)(r10 - 8) = 0\n*(u8 *)(r10 - 7) = -1\nr0 = *(u64 *)(r10 - 8)\nexit",
            0xff00,
        ),
        c(
            StxB,
            "r2 = 0x1234\n*(u8 *)(r1 + 0) = r2\nr0 = *(u16 *)(r1 + 0)\nexit",
            0x8134,
        ),
        c(
            StH,
            "*(u16 *)(r10 - 8) = -2\nr0 = *(u64 *)(r10 - 8)\nexit",
            0xfffe,
        ),
        c(
            StxH,
            "r2 = 0x12345\n*(u16 *)(r1 + 2) = r2\nr0 = *(u32 *)(r1 + 0)\nexit",
            0x2345_8180,
        ),
        c(
            StW,
            "*(u32 *)(r10 - 8) = -2\nr0 = *(u64 *)(r10 - 8)\nexit",
            0xffff_fffe,
        ),
        c(
            StxW,
            "r2 = 0x1122334455667788 ll\n*(u32 *)(r1 + 4) = r2\nr0 = *(u64 *)(r1 + 0)\nexit",
            0x5566_7788_8382_8180,
        ),
        c(
            StDw,
            "*(u64 *)(r10 - 8) = -2\nr0 = *(u64 *)(r10 - 8)\nexit",
            0xffff_ffff_ffff_fffe,
        ),
        c(
            StDw,
            "*(u64 *)(r1 + 3) = 0x7fffffff\nr0 = *(u64 *)(r1 + 3)\nexit",
            0x7fff_ffff,
        ),
        c(
            StxDw,
            "r2 = -3\n*(u64 *)(r10 - 16) = r2\nr0 = *(u64 *)(r10 - 16)\nexit",
            0xffff_ffff_ffff_fffd,
        ),
        // ---- atomics (32-bit ones leave the neighbouring word alone) ----
        c(
            AtomicAdd32,
            "*(u64 *)(r10 - 8) = -2\nr2 = 3\nlock *(u32 *)(r10 - 8) += w2\nr0 = *(u64 *)(r10 - 8)\nexit",
            0xffff_ffff_0000_0001,
        ),
        c(
            AtomicFetchAdd32,
            "*(u32 *)(r10 - 8) = 10\nr2 = 0x100000005 ll\nw2 = atomic_fetch_add((u32 *)(r10 - 8), w2)\nr0 = *(u32 *)(r10 - 8)\nr0 <<= 32\nr0 |= r2\nexit",
            0xf_0000_000a,
        ),
        c(
            AtomicOr32,
            "*(u32 *)(r10 - 8) = 0x0f\nr2 = 0xf0\nlock *(u32 *)(r10 - 8) |= w2\nr0 = *(u64 *)(r10 - 8)\nexit",
            0xff,
        ),
        c(
            AtomicFetchOr32,
            "*(u32 *)(r10 - 8) = 0x0f\nr2 = 0xf0\nw2 = atomic_fetch_or((u32 *)(r10 - 8), w2)\nr0 = *(u32 *)(r10 - 8)\nr0 <<= 32\nr0 |= r2\nexit",
            0xff_0000_000f,
        ),
        c(
            AtomicAnd32,
            "*(u32 *)(r10 - 8) = 0x3c\nr2 = 0x0f\nlock *(u32 *)(r10 - 8) &= w2\nr0 = *(u64 *)(r10 - 8)\nexit",
            0x0c,
        ),
        c(
            AtomicFetchAnd32,
            "*(u32 *)(r10 - 8) = 0x3c\nr2 = 0x0f\nw2 = atomic_fetch_and((u32 *)(r10 - 8), w2)\nr0 = *(u32 *)(r10 - 8)\nr0 <<= 32\nr0 |= r2\nexit",
            0xc_0000_003c,
        ),
        c(
            AtomicXor32,
            "*(u32 *)(r10 - 8) = 0x3c\nr2 = 0x0f\nlock *(u32 *)(r10 - 8) ^= w2\nr0 = *(u64 *)(r10 - 8)\nexit",
            0x33,
        ),
        c(
            AtomicFetchXor32,
            "*(u32 *)(r10 - 8) = 0x3c\nr2 = 0x0f\nw2 = atomic_fetch_xor((u32 *)(r10 - 8), w2)\nr0 = *(u32 *)(r10 - 8)\nr0 <<= 32\nr0 |= r2\nexit",
            0x33_0000_003c,
        ),
        c(
            Xchg32,
            "*(u32 *)(r10 - 8) = 7\nr2 = 0x300000009 ll\nw2 = xchg32_32(r10 - 8, w2)\nr0 = *(u32 *)(r10 - 8)\nr0 <<= 32\nr0 |= r2\nexit",
            0x9_0000_0007,
        ),
        // success: w0 (low half of r0) matches, r0 gets the zero-extended old value
        c(
            Cmpxchg32,
            "*(u32 *)(r10 - 8) = 7\nr0 = 0x100000007 ll\nr2 = 9\nw0 = cmpxchg32_32(r10 - 8, w0, w2)\nr3 = *(u32 *)(r10 - 8)\nr3 <<= 32\nr0 |= r3\nexit",
            0x9_0000_0007,
        ),
        // failure: memory unchanged, r0 = old value
        c(
            Cmpxchg32,
            "*(u32 *)(r10 - 8) = 7\nr0 = 8\nr2 = 9\nw0 = cmpxchg32_32(r10 - 8, w0, w2)\nr3 = *(u32 *)(r10 - 8)\nr3 <<= 32\nr0 |= r3\nexit",
            0x7_0000_0007,
        ),
        c(
            AtomicAdd64,
            "*(u64 *)(r10 - 8) = -2\nr2 = 3\nlock *(u64 *)(r10 - 8) += r2\nr0 = *(u64 *)(r10 - 8)\nexit",
            1,
        ),
        c(
            AtomicFetchAdd64,
            "*(u64 *)(r10 - 8) = 10\nr2 = 5\nr2 = atomic_fetch_add((u64 *)(r10 - 8), r2)\nr0 = *(u64 *)(r10 - 8)\nr0 *= 100\nr0 += r2\nexit",
            1510,
        ),
        c(
            AtomicOr64,
            "r2 = 0x100000000 ll\n*(u64 *)(r10 - 8) = 1\nlock *(u64 *)(r10 - 8) |= r2\nr0 = *(u64 *)(r10 - 8)\nexit",
            0x1_0000_0001,
        ),
        c(
            AtomicFetchOr64,
            "*(u64 *)(r10 - 8) = 1\nr2 = 2\nr2 = atomic_fetch_or((u64 *)(r10 - 8), r2)\nr0 = *(u64 *)(r10 - 8)\nr0 *= 100\nr0 += r2\nexit",
            301,
        ),
        c(
            AtomicAnd64,
            "*(u64 *)(r10 - 8) = -1\nr2 = 0x1000000ff ll\nlock *(u64 *)(r10 - 8) &= r2\nr0 = *(u64 *)(r10 - 8)\nexit",
            0x1_0000_00ff,
        ),
        c(
            AtomicFetchAnd64,
            "*(u64 *)(r10 - 8) = 6\nr2 = 3\nr2 = atomic_fetch_and((u64 *)(r10 - 8), r2)\nr0 = *(u64 *)(r10 - 8)\nr0 *= 100\nr0 += r2\nexit",
            206,
        ),
        c(
            AtomicXor64,
            "*(u64 *)(r10 - 8) = -1\nr2 = 0xff\nlock *(u64 *)(r10 - 8) ^= r2\nr0 = *(u64 *)(r10 - 8)\nexit",
            0xffff_ffff_ffff_ff00,
        ),
        c(
            AtomicFetchXor64,
            "*(u64 *)(r10 - 8) = 6\nr2 = 3\nr2 = atomic_fetch_xor((u64 *)(r10 - 8), r2)\nr0 = *(u64 *)(r10 - 8)\nr0 *= 100\nr0 += r2\nexit",
            506,
        ),
        c(
            Xchg64,
            "*(u64 *)(r10 - 8) = 7\nr2 = 9\nr2 = xchg_64(r10 - 8, r2)\nr0 = *(u64 *)(r10 - 8)\nr0 *= 100\nr0 += r2\nexit",
            907,
        ),
        c(
            Cmpxchg64,
            "*(u64 *)(r10 - 8) = 7\nr0 = 7\nr2 = 9\nr0 = cmpxchg_64(r10 - 8, r0, r2)\nr3 = *(u64 *)(r10 - 8)\nr3 *= 100\nr0 += r3\nexit",
            907,
        ),
        c(
            Cmpxchg64,
            "*(u64 *)(r10 - 8) = 7\nr0 = 0x100000007 ll\nr2 = 9\nr0 = cmpxchg_64(r10 - 8, r0, r2)\nr3 = *(u64 *)(r10 - 8)\nr3 *= 100\nr0 += r3\nexit",
            707,
        ),
        c(
            AtomicAdd32,
            "r2 = 1\nlock *(u32 *)(r1 + 4) += w2\nr0 = *(u32 *)(r1 + 4)\nexit",
            0x8786_8585,
        ),
        // ---- jumps ----
        c(Ja, "r0 = 1\ngoto +1\nr0 = 2\nexit", 1),
        c(Gotol, "r0 = 1\ngotol +1\nr0 = 2\nexit", 1),
        c(
            Gotol,
            "r0 = 0\nr1 = 3\nloop:\nr0 += r1\nr1 -= 1\nif r1 == 0 goto out\ngotol loop\nout:\nexit",
            6,
        ),
        t(Jeq64Imm, "r1 = -5", "r1 == -5", true),
        t(Jeq64Imm, "r1 = 0xfffffffb ll", "r1 == -5", false),
        t(Jeq64Reg, "r1 = 4\nr2 = 4", "r1 == r2", true),
        t(Jeq64Reg, "r1 = 0x100000004 ll\nr2 = 4", "r1 == r2", false),
        t(Jgt64Imm, "r1 = -1", "r1 > 5", true),
        t(Jgt64Imm, "r1 = 5", "r1 > -2", false),
        t(Jgt64Reg, "r1 = -1\nr2 = 1", "r1 > r2", true),
        t(Jgt64Reg, "r1 = 1\nr2 = 1", "r1 > r2", false),
        t(Jge64Imm, "r1 = 5", "r1 >= 5", true),
        t(Jge64Imm, "r1 = 4", "r1 >= 5", false),
        t(Jge64Reg, "r1 = -1\nr2 = -1", "r1 >= r2", true),
        t(Jge64Reg, "r1 = 1\nr2 = -1", "r1 >= r2", false),
        t(Jset64Imm, "r1 = 0x100000000 ll", "r1 & -1", true),
        t(Jset64Imm, "r1 = 0x100000000 ll", "r1 & 0x7fffffff", false),
        t(Jset64Reg, "r1 = 6\nr2 = 2", "r1 & r2", true),
        t(Jset64Reg, "r1 = 6\nr2 = 9", "r1 & r2", false),
        t(Jne64Imm, "r1 = 0x100000000 ll", "r1 != 0", true),
        t(Jne64Imm, "r1 = -1", "r1 != -1", false),
        t(Jne64Reg, "r1 = 1\nr2 = 2", "r1 != r2", true),
        t(Jne64Reg, "r1 = 2\nr2 = 2", "r1 != r2", false),
        t(Jsgt64Imm, "r1 = -1", "r1 s> -2", true),
        t(Jsgt64Imm, "r1 = -1", "r1 s> 5", false),
        t(Jsgt64Reg, "r1 = 1\nr2 = -1", "r1 s> r2", true),
        t(Jsgt64Reg, "r1 = -3\nr2 = -1", "r1 s> r2", false),
        t(Jsge64Imm, "r1 = -2", "r1 s>= -2", true),
        t(Jsge64Imm, "r1 = -3", "r1 s>= -2", false),
        t(Jsge64Reg, "r1 = 0\nr2 = -1", "r1 s>= r2", true),
        t(
            Jsge64Reg,
            "r1 = 0x8000000000000000 ll\nr2 = 0",
            "r1 s>= r2",
            false,
        ),
        t(Jlt64Imm, "r1 = 4", "r1 < 5", true),
        t(Jlt64Imm, "r1 = -1", "r1 < 5", false),
        t(Jlt64Reg, "r1 = 1\nr2 = -1", "r1 < r2", true),
        t(Jlt64Reg, "r1 = -1\nr2 = 1", "r1 < r2", false),
        t(Jle64Imm, "r1 = -2", "r1 <= -2", true),
        t(Jle64Imm, "r1 = -1", "r1 <= -2", false),
        t(Jle64Reg, "r1 = 3\nr2 = 3", "r1 <= r2", true),
        t(Jle64Reg, "r1 = 4\nr2 = 3", "r1 <= r2", false),
        t(Jslt64Imm, "r1 = -1", "r1 s< 0", true),
        t(Jslt64Imm, "r1 = 0xffffffff ll", "r1 s< 0", false),
        t(
            Jslt64Reg,
            "r1 = 0x8000000000000000 ll\nr2 = 0x7fffffffffffffff ll",
            "r1 s< r2",
            true,
        ),
        t(Jslt64Reg, "r1 = 0\nr2 = -1", "r1 s< r2", false),
        t(Jsle64Imm, "r1 = -7", "r1 s<= -7", true),
        t(Jsle64Imm, "r1 = 0", "r1 s<= -7", false),
        t(Jsle64Reg, "r1 = -1\nr2 = 0", "r1 s<= r2", true),
        t(Jsle64Reg, "r1 = 1\nr2 = 0", "r1 s<= r2", false),
        // JMP32: only the low halves count
        t(Jeq32Imm, "r1 = 0x100000000 ll", "w1 == 0", true),
        t(Jeq32Imm, "r1 = 1", "w1 == 0", false),
        t(Jeq32Reg, "r1 = 0x500000007 ll\nr2 = 7", "w1 == w2", true),
        t(Jeq32Reg, "r1 = 6\nr2 = 7", "w1 == w2", false),
        t(Jgt32Imm, "r1 = 0xffffffff ll", "w1 > 5", true),
        t(Jgt32Imm, "r1 = 0x1000000000 ll", "w1 > 5", false),
        t(Jgt32Reg, "r1 = 0x8\nr2 = 0x700000009 ll", "w1 > w2", false),
        t(Jgt32Reg, "r1 = 0x10\nr2 = 0x700000009 ll", "w1 > w2", true),
        t(Jge32Imm, "r1 = 0x100000005 ll", "w1 >= 5", true),
        t(Jge32Imm, "r1 = 0x100000004 ll", "w1 >= 5", false),
        t(Jge32Reg, "r1 = 3\nr2 = 3", "w1 >= w2", true),
        t(Jge32Reg, "r1 = 2\nr2 = 3", "w1 >= w2", false),
        t(Jset32Imm, "r1 = 0x100000002 ll", "w1 & 2", true),
        t(Jset32Imm, "r1 = 0x100000000 ll", "w1 & -1", false),
        t(Jset32Reg, "r1 = 0x100000001 ll\nr2 = 1", "w1 & w2", true),
        t(
            Jset32Reg,
            "r1 = 0x100000000 ll\nr2 = 0x100000000 ll",
            "w1 & w2",
            false,
        ),
        t(Jne32Imm, "r1 = 0x100000000 ll", "w1 != 0", false),
        t(Jne32Imm, "r1 = 1", "w1 != 0", true),
        t(Jne32Reg, "r1 = 0x100000003 ll\nr2 = 3", "w1 != w2", false),
        t(Jne32Reg, "r1 = 4\nr2 = 3", "w1 != w2", true),
        t(Jsgt32Imm, "r1 = 0x80000000 ll", "w1 s> 0", false),
        t(Jsgt32Imm, "r1 = 0xffffffff00000001 ll", "w1 s> 0", true),
        t(Jsgt32Reg, "r1 = 1\nr2 = 0xffffffff ll", "w1 s> w2", true),
        t(Jsgt32Reg, "r1 = 0xffffffff ll\nr2 = 1", "w1 s> w2", false),
        t(Jsge32Imm, "r1 = 0xfffffffe ll", "w1 s>= -2", true),
        t(Jsge32Imm, "r1 = 0xfffffffd ll", "w1 s>= -2", false),
        t(Jsge32Reg, "r1 = 0\nr2 = 0x80000000 ll", "w1 s>= w2", true),
        t(Jsge32Reg, "r1 = 0x80000000 ll\nr2 = 0", "w1 s>= w2", false),
        t(Jlt32Imm, "r1 = 0x100000004 ll", "w1 < 5", true),
        t(Jlt32Imm, "r1 = 0xffffffff ll", "w1 < 5", false),
        t(Jlt32Reg, "r1 = 1\nr2 = 0xffffffff ll", "w1 < w2", true),
        t(Jlt32Reg, "r1 = 0xffffffff ll\nr2 = 1", "w1 < w2", false),
        t(Jle32Imm, "r1 = 0xfffffffe ll", "w1 <= -2", true),
        t(Jle32Imm, "r1 = 0xffffffff ll", "w1 <= -2", false),
        t(Jle32Reg, "r1 = 3\nr2 = 0x100000003 ll", "w1 <= w2", true),
        t(Jle32Reg, "r1 = 4\nr2 = 0x100000003 ll", "w1 <= w2", false),
        t(Jslt32Imm, "r1 = 0x80000000 ll", "w1 s< 0", true),
        t(Jslt32Imm, "r1 = -0x80000000", "w1 s< 0", true),
        t(Jslt32Imm, "r1 = 0xffffffff7fffffff ll", "w1 s< 0", false),
        t(Jslt32Reg, "r1 = 0xffffffff ll\nr2 = 0", "w1 s< w2", true),
        t(Jslt32Reg, "r1 = 0\nr2 = 0xffffffff ll", "w1 s< w2", false),
        t(Jsle32Imm, "r1 = 0xfffffff9 ll", "w1 s<= -7", true),
        t(Jsle32Imm, "r1 = 0xfffffffa ll", "w1 s<= -7", false),
        t(Jsle32Reg, "r1 = 5\nr2 = 5", "w1 s<= w2", true),
        t(Jsle32Reg, "r1 = 5\nr2 = 0xfffffffb ll", "w1 s<= w2", false),
        // ---- calls ----
        c(Call, "call get_sm_id\nexit", 3),
        c(Call, "r1 = 0\ncall get_lane_id\nexit", 0),
        // callx: the helper id is the register's value (get_sm_id = the worker, 3).
        c(Callx, "r1 = 509\ncallx r1\nexit", 3),
        c(Callx, "r1 = 0\nr6 = 511\ncallx r6\nexit", 0),
        c(Callx, "r6 = -7\nr6 += 516\ncallx r6\nr0 += 1\nexit", 4),
        c(
            CallLocal,
            "r1 = 20\ncall sub\nr0 += 1\nexit\nsub:\nr0 = r1\nr0 *= 2\nexit",
            41,
        ),
        c(Exit, "r0 = 42\nexit", 42),
        c(Exit, "r0 = -1\nexit\nr0 = 5\nexit", M1),
    ]
}

/// Forms the interpreter refuses at load time (only the verifier-free index forms of map
/// references exist in a `Program`; kfuncs are never accepted).
fn rejected() -> Vec<(Opcode, &'static str)> {
    vec![
        (LddwMapFd, "r1 = map_fd[3] ll\nr0 = 0\nexit"),
        (LddwMapValue, "r1 = map_value[3][0] ll\nr0 = 0\nexit"),
        (LddwVarAddr, "r1 = var_addr[3] ll\nr0 = 0\nexit"),
        (LddwCodeAddr, "r1 = code_addr[3] ll\nr0 = 0\nexit"),
        (CallKfunc, "call kfunc[7]\nexit"),
    ]
}

/// Opcodes covered by tests in this file that need maps (see `map_references`).
const MAP_TESTED: &[Opcode] = &[LddwMapIdx, LddwMapIdxValue];

#[test]
fn every_case_gives_its_hand_computed_result() {
    let mut failures = Vec::new();
    for (op, src, want) in cases() {
        match try_run(&src) {
            Ok(got) if got == want => {}
            Ok(got) => failures.push(format!("{op:?}: {src:?}: got {got:#x}, want {want:#x}")),
            Err(e) => failures.push(format!("{op:?}: {src:?}: error {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_case_contains_its_opcode() {
    for (op, src, _) in cases() {
        let insns = assemble(&src).unwrap();
        assert!(
            insns.iter().any(|i| Opcode::decode(i) == Ok(op)),
            "case for {op:?} does not contain it: {src:?}"
        );
    }
}

#[test]
fn every_opcode_has_a_semantics_test() {
    let mut tested: BTreeSet<String> = cases().iter().map(|c| format!("{:?}", c.0)).collect();
    tested.extend(rejected().iter().map(|c| format!("{:?}", c.0)));
    tested.extend(MAP_TESTED.iter().map(|o| format!("{o:?}")));
    let missing: Vec<_> = Opcode::ALL
        .iter()
        .filter(|o| !tested.contains(&format!("{o:?}")))
        .collect();
    assert!(
        missing.is_empty(),
        "opcodes without a semantics test: {missing:?}"
    );
}

#[test]
fn unsupported_forms_are_load_errors() {
    for (op, src) in rejected() {
        let insns = assemble(src).unwrap();
        assert_eq!(Opcode::decode(&insns[0]), Ok(op));
        let e = Vm::new(&Program::from_insns("t", insns), vec![]).unwrap_err();
        assert_eq!(e.loc.pc, 0, "{op:?}: {e}");
        assert!(!e.insn.is_empty() && !e.msg.is_empty(), "{op:?}: {e}");
    }
}

fn map_def(name: &str, kind: MapKind, ks: u32, vs: u32, n: u32, origin: MapOrigin) -> MapDef {
    MapDef {
        name: name.into(),
        kind,
        key_size: ks,
        value_size: vs,
        max_entries: n,
        flags: 0,
        origin,
        init: None,
    }
}

#[test]
fn map_references() {
    let mut rodata = map_def(
        ".rodata",
        MapKind::Array,
        4,
        16,
        1,
        MapOrigin::GlobalData { writable: false },
    );
    rodata.init = Some((1..=16).collect());
    let arr = map_def("arr", MapKind::Array, 4, 8, 4, MapOrigin::Manual);
    let src = "
        r1 = map_idx_value[0][4] ll
        r6 = *(u32 *)(r1 + 0)        ; bytes 5,6,7,8 of .rodata
        *(u32 *)(r10 - 4) = 2
        *(u64 *)(r10 - 16) = 77
        r1 = map_idx[1] ll
        r2 = r10
        r2 += -4
        r3 = r10
        r3 += -16
        r4 = 0
        call map_update_elem
        r1 = map_idx[1] ll
        r2 = r10
        r2 += -4
        call map_lookup_elem
        if r0 == 0 goto fail
        r0 = *(u64 *)(r0 + 0)
        r0 <<= 32
        r0 |= r6
        exit
    fail:
        r0 = -1
        exit";
    let mut p = prog(src);
    p.maps = vec![rodata.clone(), arr.clone()];
    let maps = vec![
        create_local(&rodata, 1).unwrap(),
        create_local(&arr, 1).unwrap(),
    ];
    let vm = Vm::new(&p, maps).unwrap();
    let mut mem = [0u8; 8];
    let got = engines::run_mem(&vm, &mut mem, &mut Env::new(0)).unwrap();
    assert_eq!(got, (77 << 32) | 0x0807_0605);

    // .rodata is read-only to the program.
    let mut p = prog("r1 = map_idx_value[0][0] ll\n*(u8 *)(r1 + 0) = 1\nr0 = 0\nexit");
    p.maps = vec![rodata.clone()];
    let vm = Vm::new(&p, vec![create_local(&rodata, 1).unwrap()]).unwrap();
    let e = engines::run_mem(&vm, &mut [], &mut Env::new(0)).unwrap_err();
    assert!(e.msg.contains("read-only"), "{e}");

    // A map index beyond the table is a load error.
    let mut p = prog("r1 = map_idx[5] ll\nr0 = 0\nexit");
    p.maps = vec![arr.clone()];
    assert!(Vm::new(&p, vec![create_local(&arr, 1).unwrap()]).is_err());
}

#[test]
fn local_calls_preserve_r6_to_r9_and_have_their_own_frames() {
    let src = "
        r6 = 1
        r7 = 2
        r8 = 3
        r9 = 4
        *(u64 *)(r10 - 8) = 100
        r1 = r10
        r1 += -16
        call sub
        r1 = *(u64 *)(r10 - 8)      ; caller slot untouched: 100
        r2 = *(u64 *)(r10 - 16)     ; written by the callee through r1: 9
        r0 += r1
        r0 += r2
        r0 += r6
        r0 += r7
        r0 += r8
        r0 += r9
        exit
    sub:
        r0 = *(u64 *)(r10 - 8)      ; fresh frame is zeroed
        r6 = 10
        r7 = 20
        r8 = 30
        r9 = 40
        *(u64 *)(r10 - 8) = 555
        *(u64 *)(r1 + 0) = 9
        r0 += *(u64 *)(r10 - 8)
        exit";
    // `r0 += *(...)` is not an instruction; build the callee result with a load instead.
    let src = src.replace(
        "r0 += *(u64 *)(r10 - 8)",
        "r5 = *(u64 *)(r10 - 8)\n        r0 += r5",
    );
    assert_eq!(run(&src), 555 + 100 + 9 + 1 + 2 + 3 + 4);
}

#[test]
fn call_depth_is_limited_to_8_frames() {
    // entry + 7 nested calls = 8 frames is fine; one more is not.
    let ok = "r1 = 6\ncall f\nexit\nf:\nr0 = 0\nif r1 == 0 goto done\nr1 -= 1\ncall f\ndone:\nexit";
    assert_eq!(run(ok), 0);
    let deep =
        "r1 = 7\ncall f\nexit\nf:\nr0 = 0\nif r1 == 0 goto done\nr1 -= 1\ncall f\ndone:\nexit";
    let e = try_run(deep).unwrap_err();
    assert!(e.msg.contains("call stack too deep"), "{e}");
    assert!(e.insn.starts_with("call pc"), "{e}");
}

#[test]
fn stack_of_a_returned_frame_is_not_accessible() {
    let src = "call f\nr0 = *(u64 *)(r10 - 520)\nexit\nf:\nr0 = 0\nexit";
    let e = try_run(src).unwrap_err();
    assert!(
        e.msg.contains("invalid memory access: read of 8 bytes"),
        "{e}"
    );
}

// ---- memory safety ----

fn job_err(src: &str, input: &[u8], out: &mut [u8]) -> ExecError {
    let vm = Vm::new(&prog(src), vec![]).unwrap();
    engines::run_job(&vm, input, out, 0, 1, [0; 4], &mut Env::new(0)).unwrap_err()
}

#[test]
fn out_of_bounds_stack() {
    let e = try_run("r0 = *(u64 *)(r10 - 520)\nexit").unwrap_err();
    assert!(
        e.msg
            .starts_with("invalid memory access: read of 8 bytes at 0x"),
        "{e}"
    );
    assert!(e.msg.contains("not in any region"), "{e}");
    assert_eq!(e.loc.pc, 0);
    assert_eq!(e.insn, "r0 = *(u64 *)(r10 - 520)");
    let e = try_run("*(u64 *)(r10 - 4) = 1\nr0 = 0\nexit").unwrap_err();
    assert!(e.msg.contains("write of 8 bytes"), "{e}");
    let e = try_run("r0 = *(u8 *)(r10 + 0)\nexit").unwrap_err();
    assert!(e.msg.contains("read of 1 bytes"), "{e}");
}

#[test]
fn ctx_is_read_only() {
    let e = job_err("*(u64 *)(r1 + 32) = 1\nr0 = 0\nexit", &[1, 2], &mut [0; 4]);
    assert!(
        e.msg.contains("write of 8 bytes") && e.msg.contains("ctx is read-only"),
        "{e}"
    );
}

#[test]
fn input_is_read_only() {
    let e = job_err(
        "r2 = *(u64 *)(r1 + 0)\n*(u8 *)(r2 + 0) = 1\nr0 = 0\nexit",
        &[1, 2],
        &mut [0; 4],
    );
    assert!(e.msg.contains("input data is read-only"), "{e}");
    assert_eq!(e.loc.pc, 1);
}

#[test]
fn wild_pointer() {
    let e = try_run("r2 = 0x1000 ll\nr0 = *(u8 *)(r2 + 0)\nexit").unwrap_err();
    assert!(
        e.msg
            .contains("read of 1 bytes at 0x1000 (not in any region)"),
        "{e}"
    );
    let e = try_run("r2 = 0\n*(u32 *)(r2 + 0) = 1\nexit").unwrap_err();
    assert!(e.msg.contains("write of 4 bytes at 0x0"), "{e}");
}

#[test]
fn output_out_of_bounds() {
    let e = job_err(
        "r2 = *(u64 *)(r1 + 16)\n*(u64 *)(r2 + 8) = 1\nr0 = 0\nexit",
        &[],
        &mut [0; 8],
    );
    assert!(e.msg.contains("write of 8 bytes"), "{e}");
    // straddling the end of the output
    let e = job_err(
        "r2 = *(u64 *)(r1 + 16)\n*(u64 *)(r2 + 4) = 1\nr0 = 0\nexit",
        &[],
        &mut [0; 8],
    );
    assert!(e.msg.contains("runs past the end of the output"), "{e}");
    // in bounds works, and reaches the caller's buffer
    let vm = Vm::new(
        &prog(
            "r2 = *(u64 *)(r1 + 16)\n*(u32 *)(r2 + 4) = 0x11223344\nr0 = *(u64 *)(r1 + 32)\nexit",
        ),
        vec![],
    )
    .unwrap();
    let mut out = [0u8; 8];
    assert_eq!(
        engines::run_job(&vm, &[], &mut out, 9, 10, [0; 4], &mut Env::new(0)).unwrap(),
        9
    );
    assert_eq!(out, [0, 0, 0, 0, 0x44, 0x33, 0x22, 0x11]);
}

#[test]
fn input_out_of_bounds_read() {
    let e = job_err(
        "r2 = *(u64 *)(r1 + 0)\nr0 = *(u8 *)(r2 + 3)\nexit",
        &[1, 2, 3],
        &mut [],
    );
    assert!(e.msg.contains("read of 1 bytes"), "{e}");
}

#[test]
fn misaligned_atomic_faults() {
    let e = try_run("r2 = 1\nlock *(u64 *)(r10 - 12) += r2\nr0 = 0\nexit").unwrap_err();
    assert!(e.msg.contains("misaligned atomic"), "{e}");
}

#[test]
fn instruction_limit_and_falling_off() {
    let vm = Vm::new(&prog("r0 = 0\nloop:\nr0 += 1\ngoto loop"), vec![]).unwrap();
    let mut env = Env::new(0).with_max_insns(1000);
    let e = engines::run_mem(&vm, &mut [], &mut env).unwrap_err();
    assert!(e.msg.contains("instruction limit exceeded"), "{e}");
    let e = try_run("r0 = 1").unwrap_err();
    assert!(e.msg.contains("fell off the end"), "{e}");
}

#[test]
fn callx_of_no_helper_is_a_run_time_error() {
    // The id is the register as a signed 64-bit value; both engines report it the same way.
    for (src, id) in [
        ("r6 = 4\ncallx r6\nexit", "4"),
        ("r6 = -1\ncallx r6\nexit", "-1"),
        ("r6 = 0x100000005 ll\ncallx r6\nexit", "4294967301"),
        ("r6 = 0x80000000 ll\ncallx r6\nexit", "2147483648"),
        ("r6 = 0xffffffff7fffffff ll\ncallx r6\nexit", "-2147483649"),
    ] {
        let e = try_run(src).unwrap_err();
        assert_eq!(e.msg, format!("unknown helper id {id}"), "{src}");
        assert!(e.insn.starts_with("callx r6"), "{e}");
    }
}

#[test]
fn bad_programs_are_load_errors_not_panics() {
    use ebpf::isa::Insn;
    let cases: Vec<Vec<Insn>> = vec![
        vec![],
        vec![Insn::new(0x00, 0, 0, 0, 0)], // unknown opcode
        vec![Insn::new(0xb7, 11, 0, 0, 0), Insn::new(0x95, 0, 0, 0, 0)], // bad register
        vec![Insn::new(0xb7, 10, 0, 0, 0), Insn::new(0x95, 0, 0, 0, 0)], // write r10
        vec![Insn::new(0x05, 0, 0, 5, 0), Insn::new(0x95, 0, 0, 0, 0)], // jump out
        vec![
            Insn::new(0x05, 0, 0, 1, 0),
            Insn::new(0x18, 0, 0, 0, 1),
            Insn::new(0, 0, 0, 0, 0),
            Insn::new(0x95, 0, 0, 0, 0),
        ], // jump into lddw
        vec![Insn::new(0x18, 0, 0, 0, 1)], // truncated lddw
        vec![Insn::new(0x85, 0, 0, 0, 4), Insn::new(0x95, 0, 0, 0, 0)], // unknown helper
    ];
    for insns in cases {
        let p = Program::from_insns("bad", insns.clone());
        assert!(Vm::new(&p, vec![]).is_err(), "{insns:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    /// Random instruction streams never panic: `Vm::new` rejects them or the run ends in a
    /// value or an `ExecError`.
    #[test]
    fn random_programs_never_panic(
        raw in prop::collection::vec(
            (prop_oneof![
                3 => prop::sample::select(ebpf::isa::TABLE.iter().map(|r| r.code).collect::<Vec<_>>()),
                1 => any::<u8>(),
            ], 0u8..12, 0u8..12, -8i16..8, prop_oneof![any::<i32>(), -16i32..16, Just(0xe1), Just(0xf1), Just(1)]),
            1..40,
        ),
        input in prop::collection::vec(any::<u8>(), 0..32),
    ) {
        let insns: Vec<_> = raw.iter().map(|&(c, d, s, o, i)| ebpf::isa::Insn::new(c, d, s, o, i)).collect();
        let p = Program::from_insns("rand", insns);
        if let Ok(vm) = Vm::new(&p, vec![]) {
            let mut env = Env::new(0).with_max_insns(5000);
            let mut out = [0u8; 16];
            let _ = engines::run_job_lenient(&vm, &input, &mut out, 3, 8, [1, 2, 3, 4], &mut env);
            let mut mem = [0u8; 32];
            let _ = engines::run_mem_lenient(&vm, &mut mem, &mut env);
        }
    }
}

/// `clang -O2 -target bpf -mcpu=v3` (Debian clang 14) output for the C below, section
/// `prog`, extracted with `llvm-objcopy -O binary --only-section=prog`. The expected values
/// come from the same C compiled natively (`cc -O2`, x86-64) and run on the same buffers.
///
/// ```c
/// u64 run(u8 *mem, u64 len) {
///     u64 h = 0xcbf29ce484222325ULL;
///     for (u64 i = 0; i < len; i++) { h ^= mem[i]; h *= 0x100000001b3ULL; }
///     s32 acc = 0;
///     for (u32 i = 0; i + 4 <= len; i += 4) {
///         s32 v = *(s32 *)(mem + i);
///         acc += v >> 3;
///         acc ^= (u32)v / 7u;
///         if ((s32)acc < -1000) acc = -acc % 1000003;
///     }
///     s64 sacc = acc;
///     u64 r = h ^ (u64)sacc;
///     r = (r << 13) | (r >> 51);
///     __sync_fetch_and_add((u64 *)mem, r);
///     __sync_fetch_and_xor((u32 *)(mem + 8), (u32)r);
///     u32 old = __sync_val_compare_and_swap((u32 *)(mem + 12), *(u32 *)(mem + 12), 77u);
///     return r + old + (u64)(*(u64 *)mem % 1000);
/// }
/// ```
const CLANG_PROG: &str = "b404000000000000180300002523228400000000e49cf2cb1502260000000000b705000000000000180300002523228400000000e49cf2cb18000000b30100000000000000010000bf160000000000000f560000000000007166000000000000af630000000000002f030000000000000705000001000000ad25f9ff00000000a502190004000000b405000000000000b4000000000000000500070000000000bc5000000000000004000000040000000405000008000000bc56000000000000bc05000000000000bc400000000000002d260f0000000000bf140000000000000f540000000000006146000000000000bc64000000000000c4040000030000000c040000000000003406000007000000ac640000000000006604f0ff17fcffff8404000000000000bc400000000000003400000043420f002400000043420f001c040000000000000500eaff000000006704000020000000c704000020000000af43000000000000bf320000000000007702000033000000670300000d0000004f23000000000000bf32000000000000db21000000000000bc32000000000000c3210800a0000000b40200004d00000061100c0000000000c3210c00f1000000bc020000000000000f230000000000007911000000000000bf1200000000000037020000e803000027020000e80300001f210000000000000f13000000000000bf300000000000009500000000000000";

#[test]
fn clang_compiled_program_matches_native_c() {
    // (len, mul, add, r0, first 16 bytes of memory after the run); mem[i] = i * mul + add.
    let cases: [(usize, usize, usize, u64, &str); 4] = [
        (
            64,
            37,
            5,
            0xf6d510c686d25006,
            "7d8f15cb5fcfb8ff5537b1ca4d000000",
        ),
        (
            40,
            255,
            3,
            0x2f88826a5245012c,
            "200a505d6881862ce6f2b6a54d000000",
        ),
        (
            16,
            1,
            0,
            0x9b928e210b9d7f4c,
            "907091ff249398a2986685f74d000000",
        ),
        (
            23,
            91,
            200,
            0x7e955899cfdc3400,
            "a2ed978bcee77fc47a324f034d000000",
        ),
    ];
    let bytes: Vec<u8> = (0..CLANG_PROG.len() / 2)
        .map(|i| u8::from_str_radix(&CLANG_PROG[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let insns = ebpf::isa::insns_from_bytes(&bytes).unwrap();
    let vm = Vm::new(&Program::from_insns("p.o", insns), vec![]).unwrap();
    for (len, mul, add, want, mem_after) in cases {
        let mut mem: Vec<u8> = (0..len).map(|i| (i * mul + add) as u8).collect();
        let got = engines::run_mem(&vm, &mut mem, &mut Env::new(0)).unwrap();
        assert_eq!(got, want, "len {len}");
        let hex: String = mem[..16].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, mem_after, "len {len}");
    }
}
