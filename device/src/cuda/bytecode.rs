//! Relocated bytecode and descriptors for the device interpreter (`kernel/bpf_interp.cuh`).
//!
//! The persistent kernel's instant tier interprets a program straight from device-visible
//! memory. The host prepares three things, whose layouts are the C structs at the top of
//! `bpf_interp.cuh`, mirrored here with `#[repr(C)]` and compile-time size/offset checks:
//!
//! | C struct              | Rust        | bytes | what                                          |
//! |-----------------------|-------------|-------|-----------------------------------------------|
//! | `struct bpf_map_desc` | [`MapDesc`] | 56    | one map: header address, kind id, geometry, tier |
//! | `struct bpf_prog_desc`| [`ProgDesc`]| 32    | bytecode address and length, maps, frame size |
//! | `struct bpf_env`      | [`Env`]     | 32    | per thread: trace ring, budget, thread, pid   |
//!
//! ```text
//! Program ──relocate(maps)──▶ Vec<u64> slots (ld_imm64 map forms → plain imm64 addresses)
//! MapBinding ──map_desc──▶ MapDesc            (the interpreter finds a map by its base)
//! ```
//!
//! Relocation rewrites the two map forms of `ld_imm64` (see `ebpf::program`):
//!
//! | form                        | becomes (src = 0)                                           |
//! |-----------------------------|-------------------------------------------------------------|
//! | src 5 `map_idx[i]`          | the header address of map `i` (`MapBinding::base_addr`)       |
//! | src 6 `map_idx_value[i][o]` | address of value 0 of array map `i`, plus `o`               |
//! |                             | (`jit::prelude::array_value_addr`)                          |
//!
//! Every other slot is copied unchanged; the interpreter itself rejects other `ld_imm64`
//! forms (`BPF_INTERP_ELDIMM`).

use ebpf::isa::{Insn, Ld64Kind, OpKind, Opcode};
use ebpf::program::{InsnLoc, MapKind, Program};
use jit::MapBinding;
use std::mem::{offset_of, size_of};

/// `struct bpf_map_desc`: one map of a program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapDesc {
    /// Device-visible address of the map header (shm-maps layout).
    pub base: u64,
    /// `MapKind::id()`.
    pub kind: u32,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Entries (ring buffer: data bytes, a power of two).
    pub max_entries: u32,
    /// Value sets of a per-thread array (1 for the others).
    pub threads: u32,
    /// Map flags (unused by the interpreter).
    pub flags: u32,
    /// The emulated tier's latency per helper access (`jit::MapTier`; 0: none).
    pub tier_ns: u64,
    /// The tier's picoseconds per byte at its cap (0: no cap).
    pub tier_ps: u64,
    /// Address of the tier link's next free time.
    pub tier_tat: u64,
}

/// `struct bpf_prog_desc`: one program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgDesc {
    /// Address of `n_insns` relocated 8-byte slots.
    pub insns: u64,
    /// Address of `n_maps` [`MapDesc`]s.
    pub maps: u64,
    /// Slots.
    pub n_insns: u32,
    /// Maps.
    pub n_maps: u32,
    /// Stack bytes per frame (from the verifier, at most 512; 0 means 512).
    pub stack_size: u32,
    /// Zero.
    pub reserved: u32,
}

/// `struct bpf_env`: the per-thread run environment.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Env {
    /// Trace ring address (layout in `jit::prelude`); 0 drops trace output.
    pub trace_buf: u64,
    /// Instruction budget per run; 0 is unlimited.
    pub max_insns: u64,
    /// Value-set index for per-thread arrays, not reduced: a thread at or beyond a map's
    /// `threads` gets NULL / `-E2BIG`, as the JIT does with its global thread id.
    pub thread: u32,
    /// The pid written into shared-map lock words (`JitOptions::lock_pid`).
    pub lock_pid: u32,
    /// r2 at entry: 0 for jobs; the block length in `--mem` mode.
    pub r2: u64,
}

const _: () = {
    assert!(size_of::<MapDesc>() == 56);
    assert!(offset_of!(MapDesc, base) == 0);
    assert!(offset_of!(MapDesc, kind) == 8);
    assert!(offset_of!(MapDesc, key_size) == 12);
    assert!(offset_of!(MapDesc, value_size) == 16);
    assert!(offset_of!(MapDesc, max_entries) == 20);
    assert!(offset_of!(MapDesc, threads) == 24);
    assert!(offset_of!(MapDesc, flags) == 28);
    assert!(offset_of!(MapDesc, tier_ns) == 32);
    assert!(offset_of!(MapDesc, tier_ps) == 40);
    assert!(offset_of!(MapDesc, tier_tat) == 48);
    assert!(size_of::<ProgDesc>() == 32);
    assert!(offset_of!(ProgDesc, insns) == 0);
    assert!(offset_of!(ProgDesc, maps) == 8);
    assert!(offset_of!(ProgDesc, n_insns) == 16);
    assert!(offset_of!(ProgDesc, n_maps) == 20);
    assert!(offset_of!(ProgDesc, stack_size) == 24);
    assert!(offset_of!(ProgDesc, reserved) == 28);
    assert!(size_of::<Env>() == 32);
    assert!(offset_of!(Env, trace_buf) == 0);
    assert!(offset_of!(Env, max_insns) == 8);
    assert!(offset_of!(Env, thread) == 16);
    assert!(offset_of!(Env, lock_pid) == 20);
    assert!(offset_of!(Env, r2) == 24);
};

/// Return codes of `bpf_interp_run` (`BPF_INTERP_*` in the header).
pub mod code {
    /// Success; r0 holds the result.
    pub const OK: i32 = 0;
    /// The instruction budget ran out.
    pub const EBUDGET: i32 = 1;
    /// Unknown opcode byte, or a bad discriminator (off/imm/src).
    pub const EOPCODE: i32 = 2;
    /// A register above r10, or a write to r10.
    pub const EREG: i32 = 3;
    /// A jump or call target outside the program, or control fell off the end.
    pub const EJUMP: i32 = 4;
    /// An unknown helper id (or a kfunc call).
    pub const EHELPER: i32 = 5;
    /// More than 8 frames.
    pub const EDEPTH: i32 = 6;
    /// A map helper's r1 is not one of the program's maps (or the wrong kind).
    pub const EMAP: i32 = 7;
    /// A misaligned atomic access.
    pub const EALIGN: i32 = 8;
    /// An unrelocated `ld_imm64` (src != 0) or one missing its second slot.
    pub const ELDIMM: i32 = 9;
    /// An empty program.
    pub const EPROG: i32 = 10;

    /// A short description of `code`.
    pub fn describe(code: i32) -> &'static str {
        match code {
            OK => "ok",
            EBUDGET => "instruction budget exhausted",
            EOPCODE => "unknown opcode",
            EREG => "bad register",
            EJUMP => "jump outside the program",
            EHELPER => "unknown helper",
            EDEPTH => "call stack too deep",
            EMAP => "not a map of the program",
            EALIGN => "misaligned atomic access",
            ELDIMM => "unrelocated ld_imm64",
            EPROG => "empty program",
            _ => "unknown error code",
        }
    }
}

/// The interpreter header's source, for NVRTC (it has no include path).
pub const INTERP_HEADER: &str = include_str!("kernel/bpf_interp.cuh");

/// Why a program could not be relocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelocError {
    /// An instruction that cannot be relocated.
    #[error("{loc}: {insn}: {what}")]
    Insn {
        /// Where.
        loc: InsnLoc,
        /// The instruction, disassembled.
        insn: String,
        /// What was expected and what was found.
        what: String,
    },
    /// The bindings do not match the program's maps.
    #[error("program `{name}`: {what}")]
    Maps {
        /// Program name.
        name: String,
        /// What is wrong.
        what: String,
    },
}

/// The descriptor of a bound map.
pub fn map_desc(b: &MapBinding) -> MapDesc {
    MapDesc {
        base: b.base_addr,
        kind: b.kind.id(),
        key_size: b.key_size,
        value_size: b.value_size,
        max_entries: b.max_entries,
        threads: b.threads.max(1),
        flags: 0,
        tier_ns: b.tier.map_or(0, |t| t.latency_ns),
        tier_ps: b.tier.map_or(0, |t| t.ps_per_byte),
        tier_tat: b.tier.map_or(0, |t| t.tat_addr),
    }
}

fn slot(i: Insn) -> u64 {
    u64::from_le_bytes(i.to_bytes())
}

/// Relocates `prog` against `maps` (indexed like `prog.maps`): the program's slots as
/// little-endian u64s, map references replaced by addresses (see the module doc).
pub fn relocate(prog: &Program, maps: &[MapBinding]) -> Result<Vec<u64>, RelocError> {
    if maps.len() != prog.maps.len() {
        return Err(RelocError::Maps {
            name: prog.name.clone(),
            what: format!(
                "expected {} map bindings, found {}",
                prog.maps.len(),
                maps.len()
            ),
        });
    }
    for (i, (d, b)) in prog.maps.iter().zip(maps).enumerate() {
        if d.kind != b.kind || d.key_size != b.key_size || d.value_size != b.value_size {
            return Err(RelocError::Maps {
                name: prog.name.clone(),
                what: format!(
                    "map {i} `{}`: expected {:?} key {} value {}, binding is {:?} key {} value {}",
                    d.name, d.kind, d.key_size, d.value_size, b.kind, b.key_size, b.value_size
                ),
            });
        }
    }
    let insns = &prog.insns;
    let err = |pc: usize, what: String| RelocError::Insn {
        loc: prog.loc(pc),
        insn: ebpf::asm::disasm_insn(insns, pc),
        what,
    };
    let mut out: Vec<u64> = insns.iter().map(|&i| slot(i)).collect();
    let mut pc = 0;
    while pc < insns.len() {
        let insn = insns[pc];
        let Ok(op) = Opcode::decode(&insn) else {
            // Left for the interpreter to reject at run time (it never traps).
            pc += 1;
            continue;
        };
        let OpKind::Ld64(kind) = op.kind() else {
            pc += 1;
            continue;
        };
        let Some(next) = insns.get(pc + 1) else {
            return Err(err(pc, "ld_imm64 is missing its second slot".into()));
        };
        let addr = match kind {
            Ld64Kind::MapIdx | Ld64Kind::MapIdxValue => {
                let i = insn.imm as u32 as usize;
                let Some(b) = maps.get(i) else {
                    return Err(err(
                        pc,
                        format!("map index {i} out of range (expected < {})", maps.len()),
                    ));
                };
                if kind == Ld64Kind::MapIdx {
                    Some(b.base_addr)
                } else {
                    if b.kind != MapKind::Array {
                        return Err(err(
                            pc,
                            format!("map_idx_value needs an array map, map {i} is {:?}", b.kind),
                        ));
                    }
                    Some(
                        jit::prelude::array_value_addr(b, 0, 0)
                            .wrapping_add(next.imm as i64 as u64),
                    )
                }
            }
            _ => None,
        };
        if let Some(a) = addr {
            let mut lo = insn;
            lo.src = 0;
            lo.imm = a as u32 as i32;
            let mut hi = *next;
            hi.imm = (a >> 32) as u32 as i32;
            out[pc] = slot(lo);
            out[pc + 1] = slot(hi);
        }
        pc += 2;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebpf::asm::assemble;
    use ebpf::program::{MapDef, MapOrigin};

    fn def(kind: MapKind, vs: u32) -> MapDef {
        MapDef {
            name: "m".into(),
            kind,
            key_size: 4,
            value_size: vs,
            max_entries: 2,
            flags: 0,
            origin: MapOrigin::Manual,
            init: None,
        }
    }

    #[test]
    fn relocates_map_forms() {
        let insns =
            assemble("r1 = map_idx[1] ll\nr2 = map_idx_value[0][12] ll\nr0 = 7\nexit").unwrap();
        let mut p = Program::from_insns("t", insns);
        p.maps = vec![def(MapKind::Array, 20), def(MapKind::Hash, 8)];
        let b: Vec<MapBinding> = vec![
            MapBinding::for_def(&p.maps[0], 0x1234_5678_0000_0040, 1),
            MapBinding::for_def(&p.maps[1], 0xabcd_0000_1000, 1),
        ];
        let r = relocate(&p, &b).unwrap();
        assert_eq!(r.len(), 6);
        // map_idx[1]: code 0x18, dst r1, src 0, imm = low half; second slot imm = high half.
        assert_eq!(r[0], 0x18 | (1 << 8) | (0x0000_1000u64 << 32));
        assert_eq!(r[1], 0x0000_abcdu64 << 32);
        // Array of 2 values, 1 thread: values at round_up(64 + 16, 64) = 128, + 12.
        let v = 0x1234_5678_0000_0040u64 + 128 + 12;
        assert_eq!(r[2], 0x18 | (2 << 8) | ((v & 0xffff_ffff) << 32));
        assert_eq!(r[3], (v >> 32) << 32);
        assert_eq!(r[4], slot(p.insns[4]));
    }

    #[test]
    fn rejects_bad_references() {
        let insns = assemble("r1 = map_idx_value[0][0] ll\nexit").unwrap();
        let mut p = Program::from_insns("t", insns);
        p.maps = vec![def(MapKind::Hash, 8)];
        let b = vec![MapBinding::for_def(&p.maps[0], 0x1000, 1)];
        let e = relocate(&p, &b).unwrap_err().to_string();
        assert!(e.contains("needs an array map"), "{e}");
        assert!(e.contains("insn 0"), "{e}");
        let e = relocate(&p, &[]).unwrap_err().to_string();
        assert!(e.contains("expected 1 map bindings, found 0"), "{e}");
    }
}
