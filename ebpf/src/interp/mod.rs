//! The reference interpreter: memory-safe execution of (possibly unverified) programs.
//!
//! ```text
//! Program ──Vm::new──▶ predecoded slots (one per insn slot, + a fell-off-the-end sentinel)
//!                      jump targets absolute, ld_imm64 values and map addresses resolved
//!          run_job / run_mem ──▶ hot loop over slots ──▶ r0 | ExecError
//! ```
//!
//! Decoding happens once in [`Vm::new`]: every slot becomes a 16-byte `decode::Slot` with
//! an internal opcode the hot loop matches on. Every load, store and atomic checks its
//! address range against the regions the program may touch:
//!
//! | region                      | access      | from                          |
//! |-----------------------------|-------------|-------------------------------|
//! | stack (live frames)         | read/write  | 512 bytes per frame, 8 frames |
//! | job ctx                     | read        | [`Vm::run_job`]               |
//! | input `data..data_end`      | read        | [`Vm::run_job`]               |
//! | output `out..out_end`       | read/write  | [`Vm::run_job`]               |
//! | mem block                   | read/write  | [`Vm::run_mem`]               |
//! | map values                  | read/write¹ | [`MapOps::regions`]           |
//! | live ring buffer records    | read/write  | `ringbuf_reserve`             |
//!
//! ¹ read-only for `.rodata` global data. Helpers check their pointer arguments the same way.
//! Semantics follow RFC 9669 (division by zero gives 0, modulo by zero leaves dst, shift
//! counts masked, 32-bit results zero-extended).
//!
//! A [`Vm`] is immutable and `Send + Sync`: worker threads share one and each brings its own
//! [`Env`] (worker id, stack, trace sink, random state). The instruction budget
//! ([`Env::max_insns`]) is charged one straight-line run at a time, when control enters
//! it, so the count is exact for runs that complete and a run that faults part-way is
//! charged in full.

mod decode;
mod exec;
mod helpers;
pub mod native;
pub mod printk;

pub use helpers::monotonic_ns;
pub use native::{HelperOutcome, NativeEntry, NativeRun};
pub use printk::{PrintkError, format_printk};

use crate::maps::MapOps;
use crate::program::{InsnLoc, Program};
use std::sync::Arc;

/// A run-time failure, at an instruction.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{loc}: {insn}: {msg}")]
pub struct ExecError {
    /// Where.
    pub loc: InsnLoc,
    /// The instruction, disassembled.
    pub insn: String,
    /// What went wrong.
    pub msg: String,
}

/// Default instruction budget of one run.
pub const DEFAULT_MAX_INSNS: u64 = 10_000_000;
/// Maximum call depth (frames), the entry function included.
pub const MAX_FRAMES: usize = 8;
/// Bytes of stack per frame.
pub const FRAME_SIZE: usize = crate::isa::STACK_SIZE;
/// Maximum live ring buffer reservations per run.
pub const MAX_RESERVATIONS: usize = 64;

/// Where trace output (`trace_printk`, `puts`) goes.
pub enum TraceSink {
    /// Collected into [`Env::trace`].
    Collect,
    /// Passed to a callback, line by line.
    Callback(Box<dyn FnMut(&str) + Send>),
    /// Dropped.
    Discard,
}

/// Per-thread execution environment: worker id, GPU geometry emulation, trace output,
/// random state, budget, and reusable scratch (stack) so runs do not allocate.
pub struct Env {
    /// Worker (thread) id: selects per-thread map slots and is `get_sm_id`.
    pub thread: usize,
    /// Emulated GPU block size for helpers 503–511 (default 256).
    pub block_dim: u64,
    /// Instruction budget per run.
    pub max_insns: u64,
    /// Where trace output goes.
    pub sink: TraceSink,
    /// Collected trace lines when `sink` is [`TraceSink::Collect`].
    pub trace: Vec<String>,
    /// `get_prandom_u32` state (splitmix64); set it to reproduce a run.
    pub prandom: u64,
    /// Instructions executed by the last run.
    pub last_insns: u64,
    /// What `get_globaltimer` returns: `None` reads the wall clock (ns since 1970, the
    /// scale of a GPU's %globaltimer); a value fixes it (tests, replays).
    pub clock: Option<u64>,
    /// The application's process, for `get_stack` and `probe_read_user` (host probes).
    pub host: Option<HostAccess>,
    pub(crate) stack: Vec<u64>,
    pub(crate) resv: Vec<exec::Resv>,
    pub(crate) frames: [exec::Frame; MAX_FRAMES],
}

/// What the host-only helpers reach: the process a host probe runs in (see
/// `crate::helpers`). Plain function pointers, so an [`Env`] stays cheap and `Send`.
#[derive(Clone, Copy, Debug)]
pub struct HostAccess {
    /// Writes the calling thread's user stack, return addresses innermost first (the
    /// probed call's caller first), into `out`; returns how many it wrote.
    pub user_stack: fn(&mut [u64]) -> usize,
    /// Reads `out.len()` bytes of the process's memory at `addr`, without faulting;
    /// false when some byte is not readable.
    pub read_user: fn(u64, &mut [u8]) -> bool,
}

impl Default for Env {
    fn default() -> Self {
        Env::new(0)
    }
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("thread", &self.thread)
            .field("block_dim", &self.block_dim)
            .field("max_insns", &self.max_insns)
            .field("trace", &self.trace)
            .field("prandom", &self.prandom)
            .finish_non_exhaustive()
    }
}

impl Env {
    /// An environment for worker `thread`, with defaults: block_dim 256, 10M instruction
    /// budget, trace collected, fixed random seed.
    pub fn new(thread: usize) -> Env {
        Env {
            thread,
            block_dim: 256,
            max_insns: DEFAULT_MAX_INSNS,
            sink: TraceSink::Collect,
            trace: Vec::new(),
            prandom: 0x853c_49e6_748f_ea9b ^ thread as u64,
            last_insns: 0,
            clock: None,
            host: None,
            stack: vec![0u64; MAX_FRAMES * FRAME_SIZE / 8],
            resv: Vec::with_capacity(8),
            frames: [exec::Frame::default(); MAX_FRAMES],
        }
    }

    /// Sets the random seed.
    pub fn with_seed(mut self, seed: u64) -> Env {
        self.prandom = seed;
        self
    }

    /// Fixes what `get_globaltimer` returns.
    pub fn with_clock(mut self, ns: u64) -> Env {
        self.clock = Some(ns);
        self
    }

    /// Sets the instruction budget.
    pub fn with_max_insns(mut self, n: u64) -> Env {
        self.max_insns = n;
        self
    }

    pub(crate) fn emit(&mut self, line: &str) {
        match &mut self.sink {
            TraceSink::Collect => self.trace.push(line.to_string()),
            TraceSink::Callback(f) => f(line),
            TraceSink::Discard => {}
        }
    }

    pub(crate) fn next_random(&mut self) -> u32 {
        // splitmix64
        self.prandom = self.prandom.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.prandom;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as u32
    }
}

/// A memory region the program may access.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Region {
    pub(crate) start: u64,
    pub(crate) len: u64,
    pub(crate) writable: bool,
    pub(crate) name: &'static str,
}

impl Region {
    /// The ctx of one job record over `input` and `output`.
    pub(crate) fn job_ctx(
        input: &[u8],
        output: &mut [u8],
        index: u64,
        n: u64,
        args: [u64; 4],
    ) -> crate::program::JobCtx {
        let data = input.as_ptr() as u64;
        let out = output.as_mut_ptr() as u64;
        crate::program::JobCtx {
            data,
            data_end: data + input.len() as u64,
            out,
            out_end: out + output.len() as u64,
            index,
            n,
            args,
        }
    }

    /// The fixed regions of a job record run: the ctx (at `ctx_addr`, read-only), the input
    /// (read-only) and the output it names.
    pub(crate) fn job(ctx_addr: u64, ctx: &crate::program::JobCtx) -> [Region; 3] {
        [
            Region {
                start: ctx_addr,
                len: crate::program::JobCtx::SIZE as u64,
                writable: false,
                name: "ctx",
            },
            Region {
                start: ctx.data,
                len: ctx.data_end - ctx.data,
                writable: false,
                name: "input data",
            },
            Region {
                start: ctx.out,
                len: ctx.out_end - ctx.out,
                writable: true,
                name: "output",
            },
        ]
    }

    /// The fixed regions of a memory-block run: the block, writable, and nothing else.
    pub(crate) fn mem(start: u64, len: u64) -> [Region; 3] {
        let empty = Region {
            start: 0,
            len: 0,
            writable: false,
            name: "",
        };
        [
            Region {
                start,
                len,
                writable: true,
                name: "mem block",
            },
            empty,
            empty,
        ]
    }
}

/// A program prepared for execution, with its maps bound.
pub struct Vm {
    prog: Program,
    code: Vec<decode::Slot>,
    /// [`decode::run_lengths`] of `code`.
    run_len: Vec<u32>,
    maps: Vec<Arc<dyn MapOps>>,
    /// `(key_size, value_size)` of each map, so helpers avoid a virtual call.
    map_sizes: Vec<(u64, u64)>,
    map_regions: Vec<Region>,
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm")
            .field("prog", &self.prog.name)
            .field("slots", &self.code.len())
            .field("maps", &self.maps.len())
            .finish()
    }
}

/// The value `ld_imm64 map_idx[i]` loads: an opaque map handle, never a valid address.
pub const MAP_HANDLE_BASE: u64 = 0xffff_b0f0_0000_0000;

impl Vm {
    /// Prepares `prog` with live `maps` (indexed like `prog.maps`): decodes every
    /// instruction once. Unknown opcodes, bad registers, jumps out of the program, unknown
    /// helpers and unresolvable map references are errors here.
    pub fn new(prog: &Program, maps: Vec<Arc<dyn MapOps>>) -> Result<Vm, ExecError> {
        let mut map_regions = Vec::new();
        for m in &maps {
            let writable = m.def().writable_by_prog();
            for (start, len) in m.regions() {
                map_regions.push(Region {
                    start: start as u64,
                    len: len as u64,
                    writable,
                    name: "map value",
                });
            }
        }
        let code = decode::decode(prog, &maps)?;
        let map_sizes = maps
            .iter()
            .map(|m| (m.def().key_size as u64, m.def().value_size as u64))
            .collect();
        let run_len = decode::run_lengths(&code);
        Ok(Vm {
            prog: prog.clone(),
            code,
            run_len,
            maps,
            map_sizes,
            map_regions,
        })
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.prog
    }

    /// The bound maps.
    pub fn maps(&self) -> &[Arc<dyn MapOps>] {
        &self.maps
    }

    pub(crate) fn error(&self, pc: usize, msg: impl Into<String>) -> ExecError {
        make_error(&self.prog, pc, msg.into())
    }
}

pub(crate) fn make_error(prog: &Program, pc: usize, msg: String) -> ExecError {
    ExecError {
        loc: prog.loc(pc),
        insn: if pc < prog.insns.len() {
            crate::asm::disasm_insn(&prog.insns, pc)
        } else {
            "<end of program>".to_string()
        },
        msg,
    }
}

#[cfg(test)]
mod tests;
