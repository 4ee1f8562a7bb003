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
    /// `uprobe/...`: host probe.
    Uprobe(String),
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
        } else if section.starts_with("uprobe/") || section == "uprobe" {
            ProgKind::Uprobe(rest("uprobe/"))
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
