//! What a loaded program is: instructions, kind, the maps it references, and the job ctx.
//!
//! The ELF loader ([`crate::elf`]) and the raw-bytecode loader produce [`Program`]s; the
//! verifier, interpreter and JIT consume them. Map references inside the instructions are
//! always the index form of `ld_imm64` (`src = 5` map by index, `src = 6` value by index),
//! indexing [`Program::maps`]. Turning a [`MapDef`] into live storage is the caller's job.

use serde::Serialize;

/// Map types, with the Linux `BPF_MAP_TYPE_*` ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MapKind {
    /// `BPF_MAP_TYPE_HASH` (1): fixed capacity hash table.
    Hash,
    /// `BPF_MAP_TYPE_ARRAY` (2): fixed-size array indexed by a `u32` key.
    Array,
    /// `BPF_MAP_TYPE_PERCPU_ARRAY` (6): here, one slot per worker thread (per GPU thread on
    /// the device), updated without atomics.
    PerThreadArray,
    /// `BPF_MAP_TYPE_RINGBUF` (27): many producers, one consumer.
    RingBuf,
}

impl MapKind {
    /// The kernel's numeric id.
    pub fn id(self) -> u32 {
        match self {
            MapKind::Hash => 1,
            MapKind::Array => 2,
            MapKind::PerThreadArray => 6,
            MapKind::RingBuf => 27,
        }
    }

    /// The kind for a numeric id, if supported.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            1 => MapKind::Hash,
            2 => MapKind::Array,
            6 => MapKind::PerThreadArray,
            // bpftime's BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP: one value set per GPU thread.
            1502 => MapKind::PerThreadArray,
            27 => MapKind::RingBuf,
            _ => return None,
        })
    }
}

/// Where a map definition came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MapOrigin {
    /// A BTF-defined map in `.maps`.
    Btf,
    /// A legacy `struct bpf_map_def` in `maps`.
    Legacy,
    /// A global-data section (`.rodata*`, `.data*`, `.bss*`) exposed as a one-entry array.
    GlobalData {
        /// Whether the program may write to it (`.data`, `.bss`) or not (`.rodata`).
        writable: bool,
    },
    /// Declared by a caller (raw bytecode, tests).
    Manual,
}

/// A map as declared by the program.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MapDef {
    /// Symbol or section name.
    pub name: String,
    /// The map type.
    pub kind: MapKind,
    /// Key size in bytes (4 for arrays, 0 for ring buffers).
    pub key_size: u32,
    /// Value size in bytes (0 for ring buffers).
    pub value_size: u32,
    /// Entry count; for ring buffers the data size in bytes (a power of two).
    pub max_entries: u32,
    /// `map_flags`.
    pub flags: u32,
    /// Where the definition came from.
    pub origin: MapOrigin,
    /// Initial contents of entry 0 for global-data maps (`.bss` is all zeros).
    #[serde(skip)]
    pub init: Option<Vec<u8>>,
}

impl MapDef {
    /// Whether the program may write to values of this map.
    pub fn writable_by_prog(&self) -> bool {
        !matches!(self.origin, MapOrigin::GlobalData { writable: false })
    }
}

/// What a program is for, from its section-name prefix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "target")]
pub enum ProgKind {
    /// `offload`, `offload/...`: an offload job over records (the [`JobCtx`] contract).
    Offload,
    /// `kprobe/<kernel>`: GPU kernel entry probe.
    Kprobe(String),
    /// `kretprobe/<kernel>`: GPU kernel exit probe.
    Kretprobe(String),
    /// `memprobe/<kernel>`, `memprobe.load/<kernel>`, `memprobe.store/<kernel>`: GPU
    /// memory-access probe (the [`MemCtx`] contract); the section's prefix says which
    /// accesses.
    Memprobe(String),
    /// `uprobe/<library>:<function>`: host probe at a function's entry.
    Uprobe(String),
    /// `uretprobe/<library>:<function>`: host probe at a function's return.
    Uretprobe(String),
    /// Any other section (`xdp`, `socket`, ...); runnable when chosen by name, with the job
    /// ctx contract.
    Other(String),
}

impl ProgKind {
    /// Classifies a section name.
    pub fn from_section(section: &str) -> Self {
        let rest = |p: &str| section.strip_prefix(p).unwrap_or("").to_string();
        if section == "offload"
            || section.starts_with("offload/")
            || section.starts_with("offload.")
        {
            ProgKind::Offload
        } else if section.starts_with("kprobe/") {
            ProgKind::Kprobe(rest("kprobe/"))
        } else if section.starts_with("kretprobe/") {
            ProgKind::Kretprobe(rest("kretprobe/"))
        } else if let Some(t) = ["memprobe/", "memprobe.load/", "memprobe.store/"]
            .iter()
            .find_map(|p| section.strip_prefix(p))
        {
            ProgKind::Memprobe(t.to_string())
        } else if section.starts_with("uprobe/") || section == "uprobe" {
            ProgKind::Uprobe(rest("uprobe/"))
        } else if section.starts_with("uretprobe/") || section == "uretprobe" {
            ProgKind::Uretprobe(rest("uretprobe/"))
        } else {
            ProgKind::Other(section.to_string())
        }
    }

    /// Whether a section of this kind is a program when nobody asked for it by name.
    pub fn is_known(&self) -> bool {
        !matches!(self, ProgKind::Other(_))
    }
}

/// One program ready for the verifier: bpf-to-bpf callees already appended, map references
/// in index form.
#[derive(Clone, Debug)]
pub struct Program {
    /// Function (symbol) name.
    pub name: String,
    /// ELF section it came from (`"raw"` for bytecode).
    pub section: String,
    /// File it came from, for error locations.
    pub file: String,
    /// Kind from the section prefix.
    pub kind: ProgKind,
    /// Instruction slots; the entry is slot 0.
    pub insns: Vec<crate::isa::Insn>,
    /// Maps referenced by index from `ld_imm64` with `src` 5 or 6.
    pub maps: Vec<MapDef>,
    /// License string from the `license` section, if any.
    pub license: Option<String>,
}

impl Program {
    /// Whether each of `maps` (by index) is named by some `ld_imm64` of the program (a map
    /// pointer or a map value's address); an object's programs list every map of the
    /// object, used or not.
    pub fn maps_referenced(&self) -> Vec<bool> {
        let mut used = vec![false; self.maps.len()];
        let mut pc = 0;
        while pc < self.insns.len() {
            let i = &self.insns[pc];
            if i.code == 0x18 {
                if matches!(i.src, 5 | 6)
                    && let Some(u) = usize::try_from(i.imm).ok().and_then(|m| used.get_mut(m))
                {
                    *u = true;
                }
                pc += 2;
            } else {
                pc += 1;
            }
        }
        used
    }

    /// Whether the program may call one of the helpers `ids`: a `call` of one, or a
    /// `callx` in a program that moves one of the ids into a register (where a `callx`
    /// takes its id from).
    pub fn may_call(&self, ids: &[i32]) -> bool {
        use crate::isa::Opcode;
        let any = |f: &dyn Fn(Opcode, &crate::isa::Insn) -> bool| {
            self.insns
                .iter()
                .any(|i| Opcode::decode(i).is_ok_and(|op| f(op, i)))
        };
        any(&|op, i| op == Opcode::Call && ids.contains(&i.imm))
            || (any(&|op, _| op == Opcode::Callx)
                && any(&|op, i| {
                    matches!(op, Opcode::Mov64Imm | Opcode::Mov32Imm) && ids.contains(&i.imm)
                }))
    }

    /// The most instructions one run can take when that follows from the code alone: its
    /// length when it has no backward jump and no call of a local function (each
    /// instruction then runs at most once); `None` otherwise (loops are bounded only by the
    /// verifier's proof or the runtime's instruction budget).
    pub fn straight_line_len(&self) -> Option<u64> {
        use crate::isa::Opcode;
        let back = self.insns.iter().any(|i| match Opcode::decode(i) {
            Ok(Opcode::CallLocal) => true,
            Ok(Opcode::Gotol) => i.imm < 0,
            Ok(op) => {
                matches!(
                    op.kind(),
                    crate::isa::OpKind::Ja | crate::isa::OpKind::Jmp { .. }
                ) && i.off < 0
            }
            Err(_) => false,
        });
        (!back).then_some(self.insns.len() as u64)
    }

    /// A program from raw instructions, with no maps.
    pub fn from_insns(name: &str, insns: Vec<crate::isa::Insn>) -> Self {
        Program {
            name: name.to_string(),
            section: "raw".to_string(),
            file: name.to_string(),
            kind: ProgKind::Offload,
            insns,
            maps: Vec::new(),
            license: None,
        }
    }

    /// The location of instruction `pc`, for error messages.
    pub fn loc(&self, pc: usize) -> InsnLoc {
        InsnLoc {
            file: self.file.clone(),
            section: self.section.clone(),
            pc,
        }
    }
}

/// A program location, printed `file:section: insn N`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InsnLoc {
    /// Source file.
    pub file: String,
    /// ELF section.
    pub section: String,
    /// Instruction slot index.
    pub pc: usize,
}

impl std::fmt::Display for InsnLoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: insn {}", self.file, self.section, self.pc)
    }
}

/// The offload job context, `struct bpftime_job_ctx` in `include/bpftime_super.h`.
///
/// r1 points to one of these for each record. `data..data_end` is the record's read-only
/// input, `out..out_end` its writable output, `index` the record number in `0..n`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct JobCtx {
    /// Start of this record's input.
    pub data: u64,
    /// One past the end of this record's input.
    pub data_end: u64,
    /// Start of this record's output.
    pub out: u64,
    /// One past the end of this record's output.
    pub out_end: u64,
    /// Record number.
    pub index: u64,
    /// Record count of the job.
    pub n: u64,
    /// Job arguments.
    pub args: [u64; 4],
}

impl JobCtx {
    /// Size in bytes.
    pub const SIZE: usize = 80;
    /// Offset of `data`.
    pub const DATA: i64 = 0;
    /// Offset of `data_end`.
    pub const DATA_END: i64 = 8;
    /// Offset of `out`.
    pub const OUT: i64 = 16;
    /// Offset of `out_end`.
    pub const OUT_END: i64 = 24;
    /// Offset of `index`.
    pub const INDEX: i64 = 32;
    /// Offset of `n`.
    pub const N: i64 = 40;
    /// Offset of `args[0]`.
    pub const ARGS: i64 = 48;
}

const _: () = {
    assert!(std::mem::size_of::<JobCtx>() == JobCtx::SIZE);
    assert!(std::mem::offset_of!(JobCtx, data_end) == JobCtx::DATA_END as usize);
    assert!(std::mem::offset_of!(JobCtx, out) == JobCtx::OUT as usize);
    assert!(std::mem::offset_of!(JobCtx, out_end) == JobCtx::OUT_END as usize);
    assert!(std::mem::offset_of!(JobCtx, index) == JobCtx::INDEX as usize);
    assert!(std::mem::offset_of!(JobCtx, n) == JobCtx::N as usize);
    assert!(std::mem::offset_of!(JobCtx, args) == JobCtx::ARGS as usize);
};

/// The x86-64 user-space `struct pt_regs` (`<asm/ptrace.h>`): the head of every probe ctx, so
/// libbpf's `PT_REGS_PARM1..6`, `PT_REGS_RC` and `BPF_KPROBE`/`BPF_KRETPROBE` (built with
/// `-D__TARGET_ARCH_x86`) read the right words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PtRegs {
    #[expect(missing_docs, reason = "register names")]
    pub r15: u64,
    #[expect(missing_docs, reason = "register names")]
    pub r14: u64,
    #[expect(missing_docs, reason = "register names")]
    pub r13: u64,
    #[expect(missing_docs, reason = "register names")]
    pub r12: u64,
    #[expect(missing_docs, reason = "register names")]
    pub rbp: u64,
    #[expect(missing_docs, reason = "register names")]
    pub rbx: u64,
    #[expect(missing_docs, reason = "register names")]
    pub r11: u64,
    #[expect(missing_docs, reason = "register names")]
    pub r10: u64,
    /// Parameter 6.
    pub r9: u64,
    /// Parameter 5.
    pub r8: u64,
    /// Return value (`PT_REGS_RC`).
    pub rax: u64,
    /// Parameter 4.
    pub rcx: u64,
    /// Parameter 3.
    pub rdx: u64,
    /// Parameter 2.
    pub rsi: u64,
    /// Parameter 1.
    pub rdi: u64,
    #[expect(missing_docs, reason = "register names")]
    pub orig_rax: u64,
    #[expect(missing_docs, reason = "register names")]
    pub rip: u64,
    #[expect(missing_docs, reason = "register names")]
    pub cs: u64,
    #[expect(missing_docs, reason = "register names")]
    pub eflags: u64,
    #[expect(missing_docs, reason = "register names")]
    pub rsp: u64,
    #[expect(missing_docs, reason = "register names")]
    pub ss: u64,
}

impl PtRegs {
    /// Byte offsets of the argument registers, parameter 1 first (`di, si, dx, cx, r8, r9`).
    pub const PARAM_OFFSETS: [usize; 6] = [
        std::mem::offset_of!(PtRegs, rdi),
        std::mem::offset_of!(PtRegs, rsi),
        std::mem::offset_of!(PtRegs, rdx),
        std::mem::offset_of!(PtRegs, rcx),
        std::mem::offset_of!(PtRegs, r8),
        std::mem::offset_of!(PtRegs, r9),
    ];
    /// Byte offset of the return value register.
    pub const RC_OFFSET: usize = std::mem::offset_of!(PtRegs, rax);
}

/// What r1 points to in a GPU kernel probe (`kprobe/<kernel>`, `kretprobe/<kernel>`):
/// `struct bpftime_probe_ctx` of `include/bpftime_super.h`, one per thread and site.
///
/// | bytes    | field | value |
/// |----------|-------|-------|
/// | 0..168   | `regs` | [`PtRegs`]: `rdi, rsi, rdx, rcx, r8, r9` = kernel parameters 1..6, `rax` = 0 |
/// | 168..296 | `params[16]` | kernel parameters 1..16, zero-extended (0 for parameters over 8 bytes) |
/// | 296      | `nparams` | number of kernel parameters |
/// | 304..352 | `thread_idx, block_idx, block_dim, grid_dim` | `u32[3]` each |
/// | 352      | `global_thread_id` | linear block id × threads per block + linear thread id |
/// | 360      | `timer` | `%globaltimer` at the probe (ns) |
/// | 368..384 | `sm_id, warp_id, lane_id, site` | `u32`; site 0 = entry, 1 = exit |
/// | 384      | `kernel_id` | FNV-1a 64 of the kernel's (mangled) name: [`ProbeCtx::kernel_id`] |
/// | 392      | `correlation_id` | launch number given by the shim (0 when not passed) |
/// | 400      | `launch_time` | host time of the launch call, on the GPU's `%globaltimer` clock (0 when not passed) |
///
/// Read-only by contract (writes change a thread-private copy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ProbeCtx {
    /// Kernel parameters 1..6 in the argument registers.
    pub regs: PtRegs,
    /// Kernel parameters 1..16.
    pub params: [u64; 16],
    /// Number of kernel parameters.
    pub nparams: u64,
    /// `%tid`.
    pub thread_idx: [u32; 3],
    /// `%ctaid`.
    pub block_idx: [u32; 3],
    /// `%ntid`.
    pub block_dim: [u32; 3],
    /// `%nctaid`.
    pub grid_dim: [u32; 3],
    /// Linear thread id in the grid.
    pub global_thread_id: u64,
    /// `%globaltimer` at the probe.
    pub timer: u64,
    /// `%smid`.
    pub sm_id: u32,
    /// `%warpid`.
    pub warp_id: u32,
    /// `%laneid`.
    pub lane_id: u32,
    /// 0 at entry, 1 at exit.
    pub site: u32,
    /// FNV-1a 64 of the mangled kernel name.
    pub kernel_id: u64,
    /// Launch number from the shim, 0 when not passed.
    pub correlation_id: u64,
    /// Host launch time on the `%globaltimer` clock, 0 when not passed.
    pub launch_time: u64,
}

impl ProbeCtx {
    /// Size in bytes.
    pub const SIZE: usize = 408;
    /// Offset of `params`.
    pub const PARAMS: usize = std::mem::offset_of!(ProbeCtx, params);
    /// Offset of `nparams`.
    pub const NPARAMS: usize = std::mem::offset_of!(ProbeCtx, nparams);
    /// Offset of `thread_idx`.
    pub const THREAD_IDX: usize = std::mem::offset_of!(ProbeCtx, thread_idx);
    /// Offset of `block_idx`.
    pub const BLOCK_IDX: usize = std::mem::offset_of!(ProbeCtx, block_idx);
    /// Offset of `block_dim`.
    pub const BLOCK_DIM: usize = std::mem::offset_of!(ProbeCtx, block_dim);
    /// Offset of `grid_dim`.
    pub const GRID_DIM: usize = std::mem::offset_of!(ProbeCtx, grid_dim);
    /// Offset of `global_thread_id`.
    pub const GLOBAL_THREAD_ID: usize = std::mem::offset_of!(ProbeCtx, global_thread_id);
    /// Offset of `timer`.
    pub const TIMER: usize = std::mem::offset_of!(ProbeCtx, timer);
    /// Offset of `sm_id`.
    pub const SM_ID: usize = std::mem::offset_of!(ProbeCtx, sm_id);
    /// Offset of `warp_id`.
    pub const WARP_ID: usize = std::mem::offset_of!(ProbeCtx, warp_id);
    /// Offset of `lane_id`.
    pub const LANE_ID: usize = std::mem::offset_of!(ProbeCtx, lane_id);
    /// Offset of `site`.
    pub const SITE: usize = std::mem::offset_of!(ProbeCtx, site);
    /// Offset of `kernel_id`.
    pub const KERNEL_ID: usize = std::mem::offset_of!(ProbeCtx, kernel_id);
    /// Offset of `correlation_id`.
    pub const CORRELATION_ID: usize = std::mem::offset_of!(ProbeCtx, correlation_id);
    /// Offset of `launch_time`.
    pub const LAUNCH_TIME: usize = std::mem::offset_of!(ProbeCtx, launch_time);

    /// The `kernel_id` of a kernel: FNV-1a 64 over its mangled name's bytes.
    pub fn kernel_id(name: &str) -> u64 {
        name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }
}

/// What r1 points to in a GPU memory-access probe (`memprobe/<kernel>`): `struct
/// bpftime_mem_ctx` of `include/bpftime_super.h`, one per thread and access.
///
/// | bytes  | field | value |
/// |--------|-------|-------|
/// | 0      | `addr` | the address accessed, in the instruction's state space (generic for generic accesses) |
/// | 8      | `value` | the access's low 8 bytes, elements packed little-endian: after a load, before a store; an atomic's operand |
/// | 16     | `value_hi` | bytes 8..16 of a 16-byte or larger access, else 0 |
/// | 24     | `size` | bytes accessed (vector width × element size) |
/// | 28     | `op` | [`MemCtx::LOAD`], [`MemCtx::STORE`], [`MemCtx::ATOMIC`] or [`MemCtx::COPY`] (`cp.async`) |
/// | 32     | `space` | [`MemCtx::GLOBAL`], [`MemCtx::SHARED`], [`MemCtx::LOCAL`]; generic addresses are classified at run time ([`MemCtx::OTHER`] when none fits) |
/// | 36     | `site_id` | the site: an index into the session's site table (PTX line, source line) |
/// | 40..64 | `thread_idx, block_idx` | `%tid`, `%ctaid` (`u32[3]` each) |
/// | 64     | `timer` | `%globaltimer` at the access (ns) |
/// | 72..80 | `sm_id, lane_id` | `%smid`, `%laneid` |
/// | 80     | `warp_active` | lanes of the warp making this access (bit per lane) |
/// | 84     | `warp_sectors` | distinct 32-byte sectors the warp's request touches (Nsight Compute's sectors per request) |
/// | 88     | `leader` | 1 in the lowest lane of `warp_active`, else 0 |
/// | 92     | `flags` | bit 0: the address is a generic one |
/// | 96     | `kernel_id` | as [`ProbeCtx::kernel_id`] |
/// | 104    | `correlation_id` | launch number from the shim (0 when not passed) |
///
/// Only the fields a program reads are computed. Read-only by contract.
///
/// Where they are computed: at the site, or, when the site has one probe and every path
/// of the probe to a ctx read passes one first read (its *ctx point*), at that read. Then
/// `timer` is read there, and `warp_active`, `warp_sectors` and `leader` count the lanes
/// that reach it together: the same lanes when what the probe does before its first ctx
/// read decides alike for the whole warp (a configuration check), fewer when it filters
/// lanes by themselves (a lane id, a random draw) before reading the ctx. With sampling,
/// they count the sampled lanes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct MemCtx {
    /// Address accessed.
    pub addr: u64,
    /// Low 8 bytes of the value.
    pub value: u64,
    /// Bytes 8..16 of the value.
    pub value_hi: u64,
    /// Bytes accessed.
    pub size: u32,
    /// Load, store, atomic or copy.
    pub op: u32,
    /// State space.
    pub space: u32,
    /// Site id.
    pub site_id: u32,
    /// `%tid`.
    pub thread_idx: [u32; 3],
    /// `%ctaid`.
    pub block_idx: [u32; 3],
    /// `%globaltimer`.
    pub timer: u64,
    /// `%smid`.
    pub sm_id: u32,
    /// `%laneid`.
    pub lane_id: u32,
    /// Lanes making this access.
    pub warp_active: u32,
    /// Distinct 32-byte sectors of the warp's request.
    pub warp_sectors: u32,
    /// 1 in the lowest active lane.
    pub leader: u32,
    /// Bit 0: generic address.
    pub flags: u32,
    /// FNV-1a 64 of the mangled kernel name.
    pub kernel_id: u64,
    /// Launch number.
    pub correlation_id: u64,
}

impl MemCtx {
    /// Size in bytes.
    pub const SIZE: usize = 112;
    /// `op` of a load (`ld`, `ldu`).
    pub const LOAD: u32 = 0;
    /// `op` of a store (`st`).
    pub const STORE: u32 = 1;
    /// `op` of an atomic (`atom`, `red`).
    pub const ATOMIC: u32 = 2;
    /// `op` of an asynchronous copy from global memory (`cp.async`): `addr` is the source.
    pub const COPY: u32 = 3;
    /// `space`: none of the below (a generic address outside them).
    pub const OTHER: u32 = 0;
    /// `space`: global memory.
    pub const GLOBAL: u32 = 1;
    /// `space`: shared memory.
    pub const SHARED: u32 = 2;
    /// `space`: local memory.
    pub const LOCAL: u32 = 3;
    /// Offset of `addr`.
    pub const ADDR: usize = std::mem::offset_of!(MemCtx, addr);
    /// Offset of `value`.
    pub const VALUE: usize = std::mem::offset_of!(MemCtx, value);
    /// Offset of `value_hi`.
    pub const VALUE_HI: usize = std::mem::offset_of!(MemCtx, value_hi);
    /// Offset of `size` (with `op` in the same word).
    pub const SIZE_OP: usize = std::mem::offset_of!(MemCtx, size);
    /// Offset of `space` (with `site_id` in the same word).
    pub const SPACE_SITE: usize = std::mem::offset_of!(MemCtx, space);
    /// Offset of `thread_idx`.
    pub const THREAD_IDX: usize = std::mem::offset_of!(MemCtx, thread_idx);
    /// Offset of `block_idx`.
    pub const BLOCK_IDX: usize = std::mem::offset_of!(MemCtx, block_idx);
    /// Offset of `timer`.
    pub const TIMER: usize = std::mem::offset_of!(MemCtx, timer);
    /// Offset of `sm_id` (with `lane_id`).
    pub const SM_LANE: usize = std::mem::offset_of!(MemCtx, sm_id);
    /// Offset of `warp_active` (with `warp_sectors`).
    pub const WARP: usize = std::mem::offset_of!(MemCtx, warp_active);
    /// Offset of `leader` (with `flags`).
    pub const LEADER_FLAGS: usize = std::mem::offset_of!(MemCtx, leader);
    /// Offset of `kernel_id`.
    pub const KERNEL_ID: usize = std::mem::offset_of!(MemCtx, kernel_id);
    /// Offset of `correlation_id`.
    pub const CORRELATION_ID: usize = std::mem::offset_of!(MemCtx, correlation_id);
}

const _: () = {
    assert!(std::mem::size_of::<MemCtx>() == MemCtx::SIZE);
    assert!(MemCtx::SIZE_OP == 24);
    assert!(MemCtx::SPACE_SITE == 32);
    assert!(MemCtx::THREAD_IDX == 40);
    assert!(MemCtx::BLOCK_IDX == 52);
    assert!(MemCtx::TIMER == 64);
    assert!(MemCtx::SM_LANE == 72);
    assert!(MemCtx::WARP == 80);
    assert!(MemCtx::LEADER_FLAGS == 88);
    assert!(MemCtx::KERNEL_ID == 96);
    assert!(MemCtx::CORRELATION_ID == 104);
};

const _: () = {
    assert!(std::mem::size_of::<PtRegs>() == 168);
    assert!(std::mem::size_of::<ProbeCtx>() == ProbeCtx::SIZE);
    assert!(ProbeCtx::PARAMS == 168);
    assert!(ProbeCtx::NPARAMS == 296);
    assert!(ProbeCtx::THREAD_IDX == 304);
    assert!(ProbeCtx::GLOBAL_THREAD_ID == 352);
    assert!(ProbeCtx::TIMER == 360);
    assert!(ProbeCtx::SITE == 380);
    assert!(ProbeCtx::KERNEL_ID == 384);
    assert!(ProbeCtx::LAUNCH_TIME == 400);
};
