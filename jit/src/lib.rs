//! The eBPF compilers of bpftime-super: one front end (`lower::decode`, functions split at
//! call targets), two back ends: PTX for GPUs (this page) and native CPU code through
//! Cranelift ([`cpu`]: x86-64, aarch64, with the interpreter as fallback).
//!
//! ```text
//! ebpf::Program → [lower] → ptx::Module → [passes] → [emit] → PTX text
//!                    │
//!                    └── prelude: helper bodies, inlined at call sites as `{ }` blocks
//!                        (within `lower::INLINE_BUDGET`), else `.func`s
//!
//! app PTX text (nvcc, NVRTC, Numba, Triton, CuPy) → [ptx::parse] → PtxFile (byte spans)
//!     → [passes::probe] ← probe blocks (PTX text, e.g. from `compile`) → instrumented PTX text
//! ```
//!
//! The input is a *verified* program: the JIT trusts the verifier and emits no memory bounds
//! checks (the interpreter checks every access; the JIT does not). Arithmetic semantics equal
//! the interpreter's (`ebpf::interp`) bit for bit.
//!
//! | stage        | module        | what it does                                                     |
//! |--------------|---------------|------------------------------------------------------------------|
//! | lower        | [`lower`]     | one PTX `.func` per eBPF function, every opcode of `Opcode::ALL`  |
//! | prelude      | [`prelude`]   | helpers (maps, ring buffer, time, trace, GPU ids): inline blocks or `.func`s |
//! | passes       | [`passes`]    | clean-ups on the IR (unused labels)                               |
//! | emit         | [`emit`]      | prints the module                                                 |
//!
//! Instrumenting an application's own PTX (the second line of the diagram):
//!
//! | stage        | module            | what it does                                                |
//! |--------------|-------------------|-------------------------------------------------------------|
//! | parse        | [`ptx::parse`]    | foreign PTX → [`ptx::parse::PtxFile`]: header, `.file` table, globals, functions, params, statements with `.loc`, byte spans |
//! | probe        | [`passes::probe`] | splices probe blocks at each kernel's entry and before each `ret`/`exit`; every other byte unchanged |
//!
//! The output holds, for a program `name`:
//! - `.visible .func (.param .b64 r0) bpf_prog_<name>(.param .b64 ctx)`: one run, callable by a
//!   persistent runtime in the same module;
//! - `.visible .entry bpf_entry_<name>(in_base, in_size, out_base, out_size, n, arg0..arg3,
//!   results)`: one thread per record; it computes the [`ebpf::program::JobCtx`] words in
//!   registers, runs the program's body inline (ptxas does not inline calls; see
//!   [`ptx::InlineBody`]), and writes r0 to `results[i]` when `results` is not 0;
//! - with [`JitOptions::chunk_loop`] instead of the entry: `bpf_loop_<name>` (records
//!   `first, first + stride, … < end`, the body inline) and `bpf_one_<name>` (record 0 of a
//!   one-record job, the ctx words in registers, job buffers through generic addresses),
//!   which a persistent runtime calls once per chunk and once per one-record job.
//!
//! Maps are addressed by the 64-bit base addresses in [`JitOptions::maps`], baked in as
//! immediates: the module never references another module's globals (GPU-FACTS §3).
//!
//! Testing: every opcode, every C test program and random programs assemble with `ptxas`
//! (`scripts/ptxas`). On a GPU, `bench/gpu/jit_diff.sh` runs the differential test, which
//! lives in `bench/` because it also runs the device's interpreter: `bench/src/bin/gpu_diff.rs`
//! generates 10,000 programs plus the C test programs with the interpreter's results (r0 of
//! every thread, output records, maps), `bench/gpu/run_cases.cu` runs them, `gpu_diff check`
//! compares (`bench/results/jit_gpu_diff.md`). Benchmarks: `bench/gpu/run.sh`
//! (`bench/results/jit_gpu_bench.md`).

#![deny(missing_docs)]

pub mod cpu;
pub mod emit;
pub mod fuzz;
pub mod lower;
pub mod passes;
pub mod prelude;
pub mod ptx;

use ebpf::program::{InsnLoc, MapKind, Program};

/// Memory scope of atomic operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum AtomicScope {
    /// `.sys`: coherent with the host and other GPUs (maps in host-mapped memory).
    #[default]
    Sys,
    /// `.gpu`: coherent within the device (maps in device memory, not touched by the host
    /// while the program runs).
    Gpu,
    /// `.cta`: coherent within one thread block.
    Cta,
}

impl AtomicScope {
    /// The PTX scope qualifier.
    pub fn ptx(self) -> &'static str {
        match self {
            AtomicScope::Sys => ".sys",
            AtomicScope::Gpu => ".gpu",
            AtomicScope::Cta => ".cta",
        }
    }

    fn rank(self) -> u8 {
        match self {
            AtomicScope::Cta => 0,
            AtomicScope::Gpu => 1,
            AtomicScope::Sys => 2,
        }
    }
}

/// Where a map of the program lives, as the device sees it.
///
/// The layouts at `base_addr` are those of `shm-maps` (`shm-maps/src/maps/`): a 64-byte
/// header, then the kind's storage; see [`prelude`] for the offsets the helpers use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapBinding {
    /// Map kind (must equal the program's map definition).
    pub kind: MapKind,
    /// Device-visible address of the map's header (64-byte aligned).
    pub base_addr: u64,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Entries (ring buffer: data bytes, a power of two).
    pub max_entries: u32,
    /// Value sets of a per-thread array (1 for the others).
    pub threads: u32,
    /// Scope of the atomics that touch this map.
    pub scope: AtomicScope,
    /// Copies of the map, `stripe_stride` bytes apart from `base_addr`, that 64-bit atomic
    /// adds spread over by SM (`%smid % stripes`, a power of two); 1: none. Only for maps
    /// the program touches by adds alone ([`ebpf::verifier::Verified::maps_add_only`]),
    /// whose owner sums the copies word by word: lookups and every other access use the
    /// first copy.
    pub stripes: u32,
    /// Bytes between stripes.
    pub stripe_stride: u64,
    /// An emulated slower memory tier that every helper access to the map pays
    /// (`map_lookup_elem`, `map_update_elem`, `map_delete_elem`); `None`: local.
    pub tier: Option<MapTier>,
}

/// An emulated memory tier on the GPU, as [`prelude`] waits it out at a map helper: the
/// access waits until `%globaltimer` passes `max(start + latency_ns, end)`, where `end` is
/// when the tier's link has carried the access's bytes (`ps_per_byte` each) behind every
/// earlier access of the tier (the link's next free time, a `u64` of `%globaltimer` ns at
/// `tat_addr`, taken with `atom.add`; an idle link restarts at `start`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapTier {
    /// Nanoseconds added to every access.
    pub latency_ns: u64,
    /// Picoseconds per byte at the bandwidth cap; 0: no cap.
    pub ps_per_byte: u64,
    /// Device address of the link's next free time (8 bytes, zeroed; unused without a cap).
    pub tat_addr: u64,
}

impl MapBinding {
    /// A binding for `def` at `base_addr`, with `threads` value sets (per-thread arrays) and
    /// `.sys` atomics.
    pub fn for_def(def: &ebpf::program::MapDef, base_addr: u64, threads: u32) -> Self {
        MapBinding {
            kind: def.kind,
            base_addr,
            key_size: def.key_size,
            value_size: def.value_size,
            max_entries: def.max_entries,
            threads: if def.kind == MapKind::PerThreadArray {
                threads.max(1)
            } else {
                1
            },
            scope: AtomicScope::Sys,
            stripes: 1,
            stripe_stride: 0,
            tier: None,
        }
    }
}

/// Options of one compilation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitOptions {
    /// PTX ISA version, `(major, minor)`; default 8.0.
    pub ptx_version: (u32, u32),
    /// SM architecture number: 90 gives `.target sm_90` (the default).
    pub sm: u32,
    /// Stack bytes of each frame, from the verifier. `None`: computed by a conservative scan
    /// of r10-relative accesses ([`lower::stack_depth`]).
    pub stack_size: Option<u32>,
    /// Maps, indexed like `Program::maps`.
    pub maps: Vec<MapBinding>,
    /// Device address of the trace ring ([`prelude`] documents its layout) for
    /// `trace_printk`/`puts`; 0: those helpers drop their records and return 0.
    pub trace_buf: u64,
    /// The pid the device writes into shared-map lock words: the host process that owns the
    /// CUDA context (its death ends the device's work too, so stealing the lock is right).
    pub lock_pid: u32,
    /// Emit the `.entry bpf_entry_<name>` stand-alone wrapper (default true).
    pub entry: bool,
    /// Emit `.func (.param .b64 r0) bpf_loop_<name>(in_base, in_size, out_base, out_size, n,
    /// arg0..arg3, results, first, end, stride)`: runs records `first, first + stride, …
    /// < end` with the body inline and the ctx in registers, and returns the last r0. A
    /// persistent runtime calls it once per chunk instead of the program's `.func` once per
    /// record. With it comes `.func (.param .b64 ret) bpf_one_<name>(in_base, in_size,
    /// out_base, out_size, arg0..arg3)`: record 0 of a one-record job, the body inline and
    /// the ctx in registers, its input and output reached by generic accesses (anywhere,
    /// shared memory included); it returns r0. Needs `entry: false` (the entry inlines the
    /// same body). Default false.
    pub chunk_loop: bool,
    /// Split 2-, 4- and 8-byte loads and stores not based on r10 into byte accesses. GPUs
    /// fault (and kill the context) on misaligned accesses, which the CPU interpreter
    /// allows; set this when records are not 8-byte aligned (record sizes that are not
    /// multiples of 8) or programs read packed data at odd offsets. Default false.
    pub unaligned: bool,
    /// Warp-aggregate atomic adds (without fetch) to map values: lanes adding the same value
    /// to the same address make one `red` for the group (sm_70+). Default true.
    pub warp_aggregate: bool,
    /// Ctx in registers: loads (by pc) that read the ctx at a constant offset (from the
    /// verifier's [`ebpf::verifier::Verified::ctx_loads`]) read `%bt_cw<k>`
    /// ([`lower::CTX_WORD_REGS`]) instead of memory, for a caller that inlines the program's
    /// body where those registers hold the ctx words. The program's `.func` then does not
    /// assemble on its own. A subprogram reading the ctx is a compile error. Where one
    /// point of the body comes before every ctx read and outside any loop through them,
    /// the line [`lower::CTX_POINT`] marks it: the caller may fill the registers there
    /// instead of before the body. Default `None`.
    pub ctx_regs: Option<std::collections::BTreeMap<usize, i64>>,
    /// With `ctx_regs`: wrap each warp-aggregated add between `// @bt_defer_begin ADDR VAL
    /// BITS RED` and `// @bt_defer_end` lines, so that a caller inlining the body may
    /// replace it with a sum kept in registers and added later
    /// ([`lower::aggregated_add_text`] gives the eager form). Default false.
    pub defer_adds: bool,
    /// With `ctx_regs` and a ctx point: the entry function's code from the point on (its
    /// cold part) is a `.func` of its own (`bpf_cold_<name>`), which the body calls there
    /// with the registers, frame and ctx words it reads; the line [`lower::COLD_END`]
    /// follows the call. A caller inlining the body at many sites may store its own live
    /// registers at the point and load them at that line (see the lowering's `Split`).
    /// Default false.
    pub split_cold: bool,
    /// Frame slots in registers: loads and stores (by pc) of slots that only plain
    /// constant-offset accesses reach, with their offset from r10 (the verifier's
    /// [`ebpf::verifier::Verified::stack_registers`]), read and write a register instead of
    /// local memory. ptxas keeps an eBPF program's spills in local memory otherwise
    /// (`STL`/`LDL`, each an L1 round trip on the path). Applies to the entry function
    /// when it is not split ([`JitOptions::split_cold`]) and without
    /// [`JitOptions::unaligned`]. Default `None`.
    pub stack_regs: Option<std::collections::BTreeMap<usize, i64>>,
    /// Lower atomics that return a value (fetch-and-op, exchange, compare-and-swap) as
    /// `atom.relaxed`, not `atom.acq_rel`: they stay atomic but order no other memory
    /// access. eBPF's fetching atomics are fully ordered, and on a GPU that ordering costs
    /// a fence at every one. `attach` sets it for the probes of an object that asks
    /// (`BPFTIME_RELAXED_ATOMICS` in `include/bpftime_super.h`). Default `false`.
    pub relaxed_atomics: bool,
}

impl Default for JitOptions {
    fn default() -> Self {
        JitOptions {
            ptx_version: (8, 0),
            sm: 90,
            stack_size: None,
            maps: Vec::new(),
            trace_buf: 0,
            lock_pid: 0,
            entry: true,
            chunk_loop: false,
            unaligned: false,
            warp_aggregate: true,
            ctx_regs: None,
            defer_adds: false,
            split_cold: false,
            stack_regs: None,
            relaxed_atomics: false,
        }
    }
}

impl JitOptions {
    /// Scope used by eBPF atomic instructions: the widest scope among the bound maps (`.sys`
    /// when none is bound), since the JIT cannot always tell which map a pointer points into.
    pub fn insn_atomic_scope(&self) -> AtomicScope {
        self.maps
            .iter()
            .map(|m| m.scope)
            .max_by_key(|s| s.rank())
            .unwrap_or(AtomicScope::Sys)
    }
}

/// Why a program could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// An instruction the JIT does not support (or a malformed one).
    #[error("{loc}: {insn}: {what}")]
    Unsupported {
        /// Where.
        loc: InsnLoc,
        /// The instruction, disassembled.
        insn: String,
        /// What is unsupported, and what was expected.
        what: String,
    },
    /// A map of the program has no usable binding in [`JitOptions::maps`].
    #[error("map {index} `{name}`: {what}")]
    MapBinding {
        /// Map index.
        index: usize,
        /// Map name.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// The native code generator failed (a Cranelift error or an internal error).
    #[error("native code generator: {what}")]
    Backend {
        /// What failed.
        what: String,
    },
    /// The program is empty.
    #[error("program `{name}` has no instructions")]
    Empty {
        /// Program name.
        name: String,
    },
}

/// Compiled PTX.
#[derive(Clone, Debug)]
pub struct PtxModule {
    module: ptx::Module,
    prog_func: String,
    entry_func: Option<String>,
    loop_func: Option<String>,
    one_func: Option<String>,
}

impl PtxModule {
    /// The PTX text.
    pub fn text(&self) -> String {
        emit::module(&self.module)
    }

    /// The IR.
    pub fn module(&self) -> &ptx::Module {
        &self.module
    }

    /// Name of the `.func` running one job: `bpf_prog_<name>`.
    pub fn prog_func(&self) -> &str {
        &self.prog_func
    }

    /// Name of the stand-alone `.entry`, when emitted: `bpf_entry_<name>`.
    pub fn entry_func(&self) -> Option<&str> {
        self.entry_func.as_deref()
    }

    /// Name of the chunk loop, when emitted: `bpf_loop_<name>`.
    pub fn loop_func(&self) -> Option<&str> {
        self.loop_func.as_deref()
    }

    /// Name of the one-record run, emitted with the chunk loop: `bpf_one_<name>`.
    pub fn one_func(&self) -> Option<&str> {
        self.one_func.as_deref()
    }
}

/// Compiles a verified program to PTX.
pub fn compile(prog: &Program, opts: &JitOptions) -> Result<PtxModule, CompileError> {
    let lowered = lower::lower(prog, opts)?;
    let mut module = lowered.module;
    passes::run(&mut module);
    Ok(PtxModule {
        module,
        prog_func: lowered.prog_func,
        entry_func: lowered.entry_func,
        loop_func: lowered.loop_func,
        one_func: lowered.one_func,
    })
}

/// A PTX identifier made from `name`: characters other than `[A-Za-z0-9_]` become `_`.
pub fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() {
        s.push('_');
    }
    s
}
