//! Lowering: eBPF instructions → PTX IR, one `.func` per eBPF function.
//!
//! ```text
//! Program.insns ──split at call targets──▶ functions [start, end)
//!     each: labels at jump targets, r0..r10 = %rd0..%rd10, r10 = cvta.local(stack) + N
//!     each insn: `match` on OpKind (no `_ =>` arm) ──▶ PTX instructions
//! ```
//!
//! | eBPF                       | PTX                                                         |
//! |----------------------------|-------------------------------------------------------------|
//! | ALU64 / ALU32              | `add.s64` …; 32-bit add/sub/mul/and/or/xor/neg as the 64-bit op + `and.b64 0xffffffff`, the others on `cvt.u32.u64` halves, result `cvt.u64.u32` (zero-extends) |
//! | div / mod                  | divisor 0 replaced by 1, result selected (`/0 → 0`, `%0 → dst`); `sdiv` by −1 is `neg` (so `MIN / −1 = MIN`, `MIN % −1 = 0`) |
//! | shifts                     | count `& 63` / `& 31`                                        |
//! | `movsx`                    | `shl` + `shr.s` (8, 16 bits), `cvt.s64.s32`                  |
//! | `le` / `be` / `bswap`      | `and` (truncate), `prmt.b32 …, 0x0123` per 32-bit half        |
//! | `ld_imm64`                 | `mov.b64` of the constant, the map's base address, or its value address |
//! | load / store               | generic `ld.u8…u64` / `ld.s8…s32` / `st` at `[reg+off]`       |
//! | atomics                    | `atom.acq_rel<scope>` (fetch, xchg, `atom.cas`; `atom.relaxed` with `JitOptions::relaxed_atomics`, memory probes), `red.relaxed<scope>` (no fetch) |
//! | jumps (64 and 32 bits)     | `setp` + `@p bra`                                             |
//! | `call` helper              | the helper's body inlined as a `{ }` block (`prelude::inline_block`; per map when r1's map is known, else a compare chain over the bound maps), or `call.uni` of its `.func` past [`INLINE_BUDGET`] |
//! | r10-relative load / store  | `ld.local` / `st.local` at `[stack+depth+off]` (ptxas forwards and keeps these) |
//! | atomic on a `map_lookup_elem` result | `red`/`atom` `.global`, no `isspacep` check; an add without fetch is warp-aggregated (`match.any` on address and value, one `red` per group) |
//! | `callx`                    | `call` of the id when the register was set to a constant on the same stretch; else a compare chain on the register over the helpers the GPU can run, each arm that `call`, `trap` past the end |
//! | `call` local               | `call.uni` of the callee's `.func` with r1..r5; r0 comes back |
//! | `exit`                     | `st.param.b64 [r0]`, `ret`                                    |
//!
//! No bounds checks are emitted: the verifier proved every access.

use crate::prelude;
use crate::ptx::{FuncKind, Function, LocalArray, Module, Operand, Reg, RegClass, Stmt};
use crate::{CompileError, JitOptions, sanitize};
use ebpf::isa::{
    AluOp, AtomicOp, EndOp, FRAME_PTR, Insn, JmpCond, Ld64Kind, OpKind, Opcode, STACK_SIZE, Size,
    Src, Width,
};
use ebpf::program::{JobCtx, MapKind, Program};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

/// `Opcode::decode` without its per-call allocations (the hot path of compilation): the
/// table's rows grouped by opcode byte, tried in table order; a slot no row accepts goes to
/// `Opcode::decode` for its error.
pub fn decode(insn: &Insn) -> Result<Opcode, ebpf::isa::DecodeError> {
    /// Rows in one flat array, `start[code]..start[code + 1]` for each opcode byte.
    struct Rows {
        start: [u16; 257],
        rows: Vec<(ebpf::isa::Discr, Opcode)>,
        /// The opcode of a byte with a single row that takes any slot.
        single: [Option<Opcode>; 256],
    }
    static ROWS: LazyLock<Rows> = LazyLock::new(|| {
        let mut start = [0u16; 257];
        let mut rows = Vec::with_capacity(ebpf::isa::TABLE.len());
        for (code, st) in start.iter_mut().enumerate().take(256) {
            *st = rows.len() as u16;
            rows.extend(
                ebpf::isa::TABLE
                    .iter()
                    .filter(|r| r.code as usize == code)
                    .map(|r| (r.discr, r.opcode)),
            );
        }
        start[256] = rows.len() as u16;
        let mut single = [None; 256];
        for (code, one) in single.iter_mut().enumerate() {
            if let [(ebpf::isa::Discr::Any, op)] =
                rows[start[code] as usize..start[code + 1] as usize]
            {
                *one = Some(op);
            }
        }
        Rows {
            start,
            rows,
            single,
        }
    });
    let t = &*ROWS;
    let c = insn.code as usize;
    if let Some(op) = t.single[c] {
        return Ok(op);
    }
    for &(d, op) in &t.rows[t.start[c] as usize..t.start[c + 1] as usize] {
        let ok = match d {
            ebpf::isa::Discr::Any => true,
            ebpf::isa::Discr::Off(v) => insn.off == v,
            ebpf::isa::Discr::Imm(v) => insn.imm == v,
            ebpf::isa::Discr::Src(v) => insn.src == v,
        };
        if ok {
            return Ok(op);
        }
    }
    Opcode::decode(insn)
}

/// The result of lowering.
pub struct Lowered {
    /// The module, prelude included.
    pub module: Module,
    /// `bpf_prog_<name>`.
    pub prog_func: String,
    /// Name of the chunk loop (`bpf_loop_<name>`), when emitted.
    pub loop_func: Option<String>,
    /// `bpf_entry_<name>`, when emitted.
    pub entry_func: Option<String>,
    /// Name of the one-record run (`bpf_one_<name>`), emitted with the chunk loop.
    pub one_func: Option<String>,
}

/// A decoded slot: opcode, instruction, and for `ld_imm64` the second slot's imm.
#[derive(Clone, Copy)]
struct Dec {
    op: Opcode,
    insn: Insn,
    next_imm: i32,
}

struct Ctx<'a> {
    prog: &'a Program,
    opts: &'a JitOptions,
    dec: Vec<Option<Dec>>,
    used: BTreeSet<prelude::Use>,
    func_names: Vec<(usize, String)>,
    scope: &'static str,
    /// Helper uses inlined at some call site.
    inlined: BTreeSet<prelude::Use>,
    /// Bytes of inlined helper text in the function being lowered.
    inlined_bytes: usize,
    /// Frame size of the function being lowered: r10 is `stack + depth`.
    depth: u32,
    /// Some reachable call may run helper 507 (`exit`), which ends the thread.
    ends_thread: bool,
    /// The function being lowered is the program's entry function (pc 0).
    in_main: bool,
    /// While an [`aligned_run`]'s fast path is lowered: the register whose accesses are
    /// known to be aligned there, so they skip [`JitOptions::unaligned`]'s check.
    aligned_base: Option<u8>,
    /// While an [`aligned_run`]'s 16-byte path is lowered: its paired loads.
    vec: VecPlan,
    /// The function being lowered reaches the frame through r10, a generic pointer into
    /// its caller's frame (a cold part, [`JitOptions::split_cold`]), not `stack`.
    stack_generic: bool,
    /// Frame slots kept in registers in the function being lowered
    /// ([`JitOptions::stack_regs`]): offset from r10 → register. Empty where none are.
    slot_regs: BTreeMap<i64, Reg>,
    /// Whether the function being lowered keeps [`JitOptions::stack_regs`]'s slots in
    /// registers.
    promote: bool,
}

/// Most bytes of helper text inlined into one function; calls past it go to the `.func`s.
/// Inlined bodies are 1-10 KB; the budget bounds the growth of programs with many helper
/// calls (ptxas time grows with function size), which then pay a `CALL` per call.
pub const INLINE_BUDGET: usize = 64 * 1024;

/// What the lowering knows about each register on the current straight-line stretch
/// (reset at labels and calls).
#[derive(Clone, Copy)]
struct Known {
    /// The map whose address the register holds (`ld_imm64` of `map_idx`).
    map: [Option<usize>; 11],
    /// The register is `r10 + offset`.
    stack: [Option<i64>; 11],
    /// The register is a map value pointer from `map_lookup_elem` (or NULL, which the
    /// verifier makes the program test before any access): global memory, never the stack.
    val: [bool; 11],
    /// The map of such a value pointer, when its lookup named one.
    val_map: [Option<usize>; 11],
    /// The register's value is this constant (a `mov` or `ld_imm64` of it): a `callx`
    /// through it is the static call.
    konst: [Option<u64>; 11],
    /// The register holds the entry's ctx pointer (8-byte aligned wherever a program runs).
    ctx: [bool; 11],
    /// The register points into global memory: a job's input or output (from the job
    /// ctx, [`JitOptions::chunk_loop`]), or something derived from it by adding.
    global: [bool; 11],
}

impl Known {
    fn new() -> Known {
        let mut stack = [None; 11];
        stack[FRAME_PTR as usize] = Some(0);
        Known {
            map: [None; 11],
            stack,
            val: [false; 11],
            val_map: [None; 11],
            konst: [None; 11],
            ctx: [false; 11],
            global: [false; 11],
        }
    }

    /// An access through `base` may say `.global` (faster than a generic one).
    fn global(&self, base: u8) -> bool {
        let b = base as usize;
        b < 11 && (self.global[b] || self.val[b])
    }

    /// An access of `size` bytes at `base + off` is aligned, as far as this stretch knows:
    /// through r10, through a register at a known place in the frame, or through the ctx.
    fn aligned(&self, base: u8, off: i16, size: Size) -> bool {
        let (b, n) = (base as usize & 15, size.bytes() as i64);
        b == FRAME_PTR as usize
            || b < 11 && self.stack[b].is_some_and(|o| (o + off as i64) % n == 0)
            || b < 11 && self.ctx[b] && off as i64 % n == 0
    }

    fn forget(&mut self, r: u8) {
        let r = r as usize;
        self.map[r] = None;
        self.stack[r] = None;
        self.val[r] = false;
        self.val_map[r] = None;
        self.konst[r] = None;
        self.ctx[r] = false;
        self.global[r] = false;
    }
}

impl Ctx<'_> {
    fn err(&self, pc: usize, what: impl Into<String>) -> CompileError {
        CompileError::Unsupported {
            loc: self.prog.loc(pc),
            insn: if pc < self.prog.insns.len() {
                ebpf::asm::disasm_insn(&self.prog.insns, pc)
            } else {
                "<end of program>".to_string()
            },
            what: what.into(),
        }
    }

    fn func_name(&self, start: usize) -> Option<&str> {
        self.func_names
            .iter()
            .find(|(s, _)| *s == start)
            .map(|(_, n)| n.as_str())
    }
}

/// Lowers `prog`.
pub fn lower(prog: &Program, opts: &JitOptions) -> Result<Lowered, CompileError> {
    let n = prog.insns.len();
    if n == 0 {
        return Err(CompileError::Empty {
            name: prog.name.clone(),
        });
    }
    check_bindings(prog, opts)?;
    let mut cx = Ctx {
        prog,
        opts,
        dec: vec![None; n],
        used: BTreeSet::new(),
        func_names: Vec::new(),
        scope: opts.insn_atomic_scope().ptx(),
        inlined: BTreeSet::new(),
        inlined_bytes: 0,
        depth: 0,
        in_main: true,
        aligned_base: None,
        vec: VecPlan::new(),
        ends_thread: false,
        stack_generic: false,
        slot_regs: BTreeMap::new(),
        promote: false,
    };
    // Decode every slot once.
    let mut pc = 0;
    let mut starts = BTreeSet::from([0usize]);
    while pc < n {
        let insn = prog.insns[pc];
        let op = decode(&insn).map_err(|e| cx.err(pc, e.to_string()))?;
        if insn.dst > 10 || insn.src > 10 {
            return Err(cx.err(pc, "register out of range (expected r0..r10)"));
        }
        let mut next_imm = 0;
        let wide = op.is_wide();
        if wide {
            let Some(next) = prog.insns.get(pc + 1) else {
                return Err(cx.err(pc, "ld_imm64 is missing its second slot"));
            };
            next_imm = next.imm;
        }
        if op == Opcode::CallLocal {
            let t = pc as i64 + 1 + insn.imm as i64;
            if t < 0 || t >= n as i64 {
                return Err(cx.err(pc, format!("call target {t} outside the program (0..{n})")));
            }
            starts.insert(t as usize);
        }
        cx.dec[pc] = Some(Dec { op, insn, next_imm });
        pc += if wide { 2 } else { 1 };
    }
    let base = sanitize(&prog.name);
    let prog_func = format!("bpf_prog_{base}");
    let starts: Vec<usize> = starts.into_iter().collect();
    for &s in &starts {
        if cx.dec[s].is_none() {
            return Err(cx.err(s, "call target is the second slot of a ld_imm64"));
        }
        let name = if s == 0 {
            prog_func.clone()
        } else {
            format!("bpf_sub_{base}_{s}")
        };
        cx.func_names.push((s, name));
    }
    let mut functions = Vec::with_capacity(starts.len() + 1);
    for (k, &s) in starts.iter().enumerate() {
        let e = starts.get(k + 1).copied().unwrap_or(n);
        let (f, cold) = lower_function(&mut cx, s, e)?;
        functions.push(f);
        functions.extend(cold);
    }
    let entry_func = if opts.entry {
        let name = format!("bpf_entry_{base}");
        let main = &functions[0];
        let w = entry_wrapper(&name, main);
        functions.push(w);
        Some(name)
    } else {
        None
    };
    // Helper 507 ends the thread (`exit`): no loop may run such a body.
    let loop_func = if opts.chunk_loop && !opts.entry && !cx.ends_thread {
        let name = format!("bpf_loop_{base}");
        let main = &functions[0];
        let w = loop_wrapper(&name, main);
        functions.push(w);
        Some(name)
    } else {
        None
    };
    let one_func = loop_func.as_ref().map(|_| {
        let name = format!("bpf_one_{base}");
        let w = one_wrapper(&name, &functions[0]);
        functions.push(w);
        name
    });
    let (prelude_protos, bodies) = prelude::generate(&cx.used, opts);
    let all: BTreeSet<prelude::Use> = cx.used.union(&cx.inlined).copied().collect();
    let mut prelude = prelude::globals(&all);
    prelude.extend(bodies);
    Ok(Lowered {
        module: Module {
            version: opts.ptx_version,
            target: format!("sm_{}", opts.sm),
            prelude,
            prelude_protos,
            functions,
        },
        prog_func,
        entry_func,
        loop_func,
        one_func,
    })
}

fn check_bindings(prog: &Program, opts: &JitOptions) -> Result<(), CompileError> {
    for (i, d) in prog.maps.iter().enumerate() {
        let bad = |what: String| CompileError::MapBinding {
            index: i,
            name: d.name.clone(),
            what,
        };
        let Some(b) = opts.maps.get(i) else {
            return Err(bad(format!(
                "no binding in JitOptions::maps ({} bound)",
                opts.maps.len()
            )));
        };
        if b.kind != d.kind {
            return Err(bad(format!(
                "bound as {:?}, the program declares {:?}",
                b.kind, d.kind
            )));
        }
        if b.key_size != d.key_size || b.value_size != d.value_size {
            return Err(bad(format!(
                "bound with key/value size {}/{}, the program declares {}/{}",
                b.key_size, b.value_size, d.key_size, d.value_size
            )));
        }
        if b.base_addr % 64 != 0 {
            return Err(bad(format!(
                "base address {:#x} is not 64-byte aligned",
                b.base_addr
            )));
        }
        if b.stripes != 1
            && (!b.stripes.is_power_of_two()
                || b.stripes > 1024
                || b.stripe_stride % 64 != 0
                || b.stripe_stride == 0
                || b.stripe_stride > u32::MAX as u64)
        {
            return Err(bad(format!(
                "{} stripes of {} bytes: expected a power of two up to 1024, a stride that is a non-zero multiple of 64 below 4 GiB",
                b.stripes, b.stripe_stride
            )));
        }
        if let Some(t) = b.tier
            && (t.latency_ns > 1_000_000_000
                || (t.ps_per_byte != 0 && (t.tat_addr == 0 || t.tat_addr % 8 != 0)))
        {
            return Err(bad(format!(
                "tier of {} ns and {} ps/byte with its link word at {:#x}: expected a latency of at most 1 s and, with a cap, an 8-byte aligned link word",
                t.latency_ns, t.ps_per_byte, t.tat_addr
            )));
        }
    }
    Ok(())
}

/// A conservative stack depth for the function `[start, end)`: the deepest r10-relative
/// byte any access or derived pointer reaches, rounded up to 16; `STACK_SIZE` when r10
/// escapes in a way the scan cannot follow.
pub fn stack_depth(insns: &[Insn], start: usize, end: usize) -> u32 {
    depth_scan(insns, start, end, |pc| decode(&insns[pc]).ok())
}

/// [`stack_depth`] with the opcodes from `op_at` (the lowering decoded them already).
fn depth_scan(
    insns: &[Insn],
    start: usize,
    end: usize,
    op_at: impl Fn(usize) -> Option<Opcode>,
) -> u32 {
    let mut deepest: i64 = 0;
    // Registers known to hold r10 + offset, on the straight-line path.
    let mut derived: [Option<i64>; 11] = [None; 11];
    derived[10] = Some(0);
    let mut slack: i64 = 0;
    let mut pc = start;
    while pc < end {
        let insn = insns[pc];
        let Some(op) = op_at(pc) else {
            return STACK_SIZE as u32;
        };
        let (d, s) = (insn.dst as usize & 15, insn.src as usize & 15);
        if d > 10 || s > 10 {
            return STACK_SIZE as u32;
        }
        let mut note = |v: i64| deepest = deepest.min(v);
        match op.kind() {
            OpKind::Load { size, .. } => {
                match derived[s] {
                    Some(o) => note(o + insn.off as i64),
                    None if insn.off < 0 => slack = slack.max(-(insn.off as i64)),
                    None => {}
                }
                let _ = size;
                derived[d] = None;
            }
            OpKind::Store { .. } | OpKind::Atomic { .. } => {
                match derived[d] {
                    Some(o) => note(o + insn.off as i64),
                    None if insn.off < 0 => slack = slack.max(-(insn.off as i64)),
                    None => {}
                }
                if let OpKind::Atomic { op, fetch, .. } = op.kind() {
                    if op == AtomicOp::Cmpxchg {
                        derived[0] = None;
                    } else if fetch {
                        derived[s] = None;
                    }
                }
            }
            OpKind::Alu {
                op: aop,
                width,
                src,
            } => {
                if src == Src::Reg && derived[s].is_some() && d != s {
                    match (aop, width) {
                        (AluOp::Mov, Width::W64) => {
                            derived[d] = derived[s];
                            pc += 1;
                            continue;
                        }
                        // Pointer arithmetic the scan cannot follow.
                        _ => return STACK_SIZE as u32,
                    }
                }
                match (aop, width, src, derived[d]) {
                    (AluOp::Add, Width::W64, Src::Imm, Some(o)) => {
                        let v = o + insn.imm as i64;
                        note(v);
                        derived[d] = Some(v);
                    }
                    (AluOp::Sub, Width::W64, Src::Imm, Some(o)) => {
                        let v = o - insn.imm as i64;
                        note(v);
                        derived[d] = Some(v);
                    }
                    (_, _, _, Some(_)) if d == 10 => return STACK_SIZE as u32,
                    // Overwritten: the pointer is gone (what it reached is noted).
                    (AluOp::Mov, _, _, Some(_)) => derived[d] = None,
                    // Any other arithmetic on a stack pointer: not followed.
                    (_, _, _, Some(_)) => return STACK_SIZE as u32,
                    _ => derived[d] = None,
                }
            }
            OpKind::End { .. } | OpKind::Ld64(_) => {
                if d == 10 {
                    return STACK_SIZE as u32;
                }
                derived[d] = None;
            }
            OpKind::Call | OpKind::Callx | OpKind::CallLocal | OpKind::CallKfunc => {
                // Pointers passed in r1..r5 may be used by the callee; r0..r5 die.
                for v in derived.iter_mut().take(6) {
                    if let Some(o) = v.take() {
                        note(o);
                    }
                }
            }
            OpKind::Ja | OpKind::JaLong | OpKind::Jmp { .. } | OpKind::Exit => {}
        }
        pc += if op.is_wide() { 2 } else { 1 };
    }
    // Up to 8 more bytes past the deepest address (the widest access), plus what unknown
    // bases with negative offsets might reach.
    let need = (-deepest + 8 + slack).min(STACK_SIZE as i64);
    (((need + 15) / 16) * 16).clamp(16, STACK_SIZE as i64) as u32
}

fn r(n: u8) -> Reg {
    Function::ebpf_reg(n)
}

fn imm(v: i64) -> Operand {
    Operand::Imm(v)
}

/// Lowers the function `start..end`. With [`JitOptions::split_cold`] and a ctx point `S` in
/// the entry function, its code from `S` on is a function of its own, returned second (see
/// [`Split`]).
fn lower_function(
    cx: &mut Ctx,
    start: usize,
    end: usize,
) -> Result<(Function, Option<Function>), CompileError> {
    let name = cx
        .func_name(start)
        .expect("every start has a name")
        .to_string();
    let mut f = Function::new(name, FuncKind::Func);
    f.body.reserve((end - start) * 2 + 16);
    f.visible = start == 0;
    f.ret = Some("ret0".into());
    f.reserve_labels(end as u32 + 1);
    let is_entry = start == 0;
    if is_entry {
        f.params = vec!["ctx".into()];
    } else {
        f.params = (1..=5).map(|i| format!("a{i}")).collect();
    }
    let depth = match cx.opts.stack_size {
        Some(s) => s.clamp(16, STACK_SIZE as u32).next_multiple_of(16),
        None => depth_scan(&cx.prog.insns, start, end, |pc| cx.dec[pc].map(|d| d.op)),
    };
    f.locals.push(LocalArray {
        name: "stack".into(),
        align: 16,
        size: depth,
    });
    cx.depth = depth;
    cx.in_main = start == 0;
    cx.inlined_bytes = 0;
    cx.stack_generic = false;
    // Jumps inside the function, checked; their targets get labels when the jump is reached.
    let mut jumps = Vec::new();
    for pc in start..end {
        let Some(d) = cx.dec[pc] else { continue };
        let t = match d.op.kind() {
            OpKind::Ja | OpKind::Jmp { .. } => Some(pc as i64 + 1 + d.insn.off as i64),
            OpKind::JaLong => Some(pc as i64 + 1 + d.insn.imm as i64),
            _ => None,
        };
        if let Some(t) = t {
            if t < start as i64 || t >= end as i64 {
                return Err(cx.err(
                    pc,
                    format!("jump target {t} outside its function ({start}..{end})"),
                ));
            }
            if cx.dec[t as usize].is_none() {
                return Err(cx.err(
                    pc,
                    format!("jump target {t} is the second slot of a ld_imm64"),
                ));
            }
            jumps.push((pc, t as usize));
        }
    }
    // Prologue.
    if is_entry {
        f.push("ld.param.b64", [r(1).into(), Operand::SymAddr(&"ctx", 0)]);
        f.push("mov.b64", [r(2).into(), imm(0)]);
    } else {
        for i in 1..=5u8 {
            f.push(
                "ld.param.b64",
                [
                    r(i).into(),
                    Operand::SymAddr(&["a1", "a2", "a3", "a4", "a5"][i as usize - 1], 0),
                ],
            );
        }
    }
    f.push("cvta.local.u64", [r(10).into(), Operand::Sym(&"stack")]);
    f.push("add.s64", [r(10).into(), r(10).into(), imm(depth as i64)]);
    f.push("mov.b64", [r(0).into(), imm(0)]);

    // Instructions no path from the entry reaches are not emitted: they cannot run, and
    // dead blocks after an unconditional branch only give ptxas more to get wrong.
    let mut reach = reachable(cx, start, end);
    let point = if is_entry {
        ctx_point(cx, end, &reach)
    } else {
        None
    };
    let split = match point {
        // A ctx word out of range is `ctx_reg_load`'s error to report: no split then.
        Some(s) if cx.opts.split_cold && cx.opts.ctx_regs.is_some() => {
            Split::new(cx, s, end, &reach)
        }
        _ => None,
    };
    if let Some(o) = &split {
        reach = o.hot.clone();
    }
    // Frame slots in registers: only in the entry function, whose frame nothing else
    // reaches (a cold part reaches it through r10; an aligned run may pair its loads).
    cx.slot_regs.clear();
    cx.promote = is_entry && split.is_none() && !cx.opts.unaligned && cx.opts.stack_regs.is_some();
    if cx.promote {
        // A slot is a register only if every access to it is a plain load or store.
        for &pc in cx.opts.stack_regs.iter().flatten().map(|(pc, _)| pc) {
            let plain =
                cx.dec.get(pc).copied().flatten().is_some_and(|d| {
                    matches!(d.op.kind(), OpKind::Load { .. } | OpKind::Store { .. })
                });
            if !plain {
                return Err(cx.err(
                    pc,
                    "stack_regs names an instruction that is not a plain load or store",
                ));
            }
        }
    }
    let part = Part {
        reach: &reach,
        point,
        split: split.as_ref(),
        entry: None,
    };
    lower_body(cx, &mut f, start, end, &jumps, part)?;
    cx.promote = false;
    let Some(o) = split else {
        return Ok((f, None));
    };
    let g = cold_function(cx, &o, start, end, &jumps)?;
    Ok((f, Some(g)))
}

/// The cold part ([`Split`]) as a function: its values from the
/// caller's array ([`Split::call`]), its frame the caller's (through r10), entered at S.
fn cold_function(
    cx: &mut Ctx,
    o: &Split,
    start: usize,
    end: usize,
    jumps: &[(usize, usize)],
) -> Result<Function, CompileError> {
    let mut g = Function::new(o.func.clone(), FuncKind::Func);
    g.ret = Some("ret0".into());
    g.reserve_labels(end as u32 + 1);
    g.params = vec!["args".into()];
    let mut t = format!(
        "\t.reg .b64 %bt_cw<{}>;\n\t.reg .b64 %cold_args;\n\tld.param.b64 %cold_args, [args];\n",
        o.words.last().map_or(1, |w| w + 1)
    );
    for (k, v) in o.values().iter().enumerate() {
        t.push_str(&format!("\tld.u64 {v}, [%cold_args+{}];\n", 8 * k));
    }
    g.body.push(Stmt::Raw(t.trim_end().to_string()));
    cx.stack_generic = true;
    cx.inlined_bytes = 0;
    g.bra(crate::ptx::Label(o.s as u32), None);
    let part = Part {
        reach: &o.cold,
        point: None,
        split: None,
        entry: Some(o.s),
    };
    lower_body(cx, &mut g, start, end, jumps, part)?;
    cx.stack_generic = false;
    Ok(g)
}

/// The line after the call of the cold part ([`JitOptions::split_cold`]): where the
/// caller's registers stored at the ctx point may be loaded again.
pub const COLD_END: &str = "\t// @bt_cold_end";

/// The entry function split at its ctx point `S` ([`JitOptions::split_cold`]). The hot part
/// is what the entry reaches without passing `S`. The cold part, what `S` reaches, is a
/// `.func` of its own (`bpf_cold_<name>`): at `S`, after the point's marker, the hot part
/// stores the registers the cold part reads (those the hot part may have set), the frame
/// pointer and the ctx words it reads in a local array, calls it with the array's address,
/// and returns what it returns. The cold part reaches the caller's frame through r10 (a
/// generic pointer), never through its own `stack`. Code both parts reach (an early
/// `return 0`) is in both.
///
/// ```text
/// hot (inlined at each site):  …  // @bt_ctx_point
///                              st.local [args+8k], %rdK / %bt_cwW …; call.uni (ret), cold, (args)
///                              // @bt_cold_end
///                              st.param [ret0], r0; ret
/// cold (one per module):       ld.u64 %rdK, [args+8k] …; bra S;  …  S: …
/// ```
///
/// So ptxas gives the kernel the registers of the hot part, and a caller inlining the body
/// at many sites may free its own registers around the call (store them at the point, load
/// them at [`COLD_END`]): with `.maxnreg`, what the cold part needs beyond them spills
/// inside the call, on the path that runs only when the probe does more than return.
struct Split {
    s: usize,
    hot: Vec<bool>,
    cold: Vec<bool>,
    /// The cold function's name.
    func: String,
    /// The eBPF registers passed, ascending; r10 always.
    regs: Vec<u8>,
    /// The ctx words the cold part reads, ascending.
    words: Vec<usize>,
    /// The frame's size: r10 is `stack + depth`.
    depth: u32,
}

impl Split {
    fn new(cx: &Ctx, s: usize, end: usize, reach: &[bool]) -> Option<Split> {
        // Hot: from the entry, not past S. Cold: from S.
        let walk = |from: usize, stop: Option<usize>| {
            let mut seen = vec![false; end];
            let mut work = vec![from];
            while let Some(pc) = work.pop() {
                if pc >= end || seen[pc] || !reach[pc] {
                    continue;
                }
                seen[pc] = true;
                if Some(pc) == stop {
                    continue;
                }
                work.extend(successors(cx, pc, end).into_iter().flatten());
            }
            seen
        };
        let hot = walk(0, Some(s));
        let cold = walk(s, None);
        // Registers the hot part (or the prologue: r0, r1, r2) may set and the cold part
        // may read: each instruction's operands, r1..r5 at calls, r0 at exits and atomics.
        let mut set = [false; 11];
        set[..3].iter_mut().for_each(|x| *x = true);
        let mut read = [false; 11];
        for pc in 0..end {
            let Some(d) = cx.dec[pc] else { continue };
            let (dst, src) = (d.insn.dst as usize, d.insn.src as usize);
            let kind = d.op.kind();
            let call = matches!(
                kind,
                OpKind::Call | OpKind::Callx | OpKind::CallLocal | OpKind::CallKfunc
            );
            if hot[pc] && pc != s {
                if call {
                    set[..6].iter_mut().for_each(|x| *x = true);
                }
                set[dst] = true;
                if let OpKind::Atomic { fetch, .. } = kind {
                    set[0] = true;
                    if fetch {
                        set[src] = true;
                    }
                }
            }
            if cold[pc] {
                // A load writes its dst; a ctx load served from the words reads nothing.
                let ctx_load = cx
                    .opts
                    .ctx_regs
                    .as_ref()
                    .is_some_and(|c| c.contains_key(&pc));
                let load = matches!(kind, OpKind::Load { .. });
                read[dst] |= !load;
                read[src] |= !ctx_load;
                if call {
                    read[1..6].iter_mut().for_each(|x| *x = true);
                }
                if matches!(kind, OpKind::Exit | OpKind::Atomic { .. }) {
                    read[0] = true;
                }
            }
        }
        let mut regs: Vec<u8> = (0..10u8)
            .filter(|&k| set[k as usize] && read[k as usize])
            .collect();
        regs.push(10);
        let mut words = BTreeSet::new();
        for (_, at) in cx
            .opts
            .ctx_regs
            .iter()
            .flatten()
            .filter(|(pc, _)| **pc < end && cold[**pc])
        {
            if *at < 0 || *at / 8 >= CTX_WORD_REGS.len() as i64 {
                return None;
            }
            words.insert((*at / 8) as usize);
        }
        let words: Vec<usize> = words.into_iter().collect();
        Some(Split {
            s,
            hot,
            cold,
            func: format!("bpf_cold_{}", sanitize(&cx.prog.name)),
            regs,
            words,
            depth: cx.depth,
        })
    }

    /// The values passed to a cold function, in its argument array's order: the eBPF
    /// registers, then the ctx words.
    fn values(&self) -> Vec<String> {
        self.regs
            .iter()
            .map(|k| format!("%rd{k}"))
            .chain(self.words.iter().map(|w| CTX_WORD_REGS[*w].to_string()))
            .collect()
    }

    /// The call at S: the values stored in a local array, its address passed, r0 back.
    fn call(&self) -> String {
        let values = self.values();
        // r10 is computed here, not kept from the prologue: read-only, it would otherwise
        // stay live (or spilled) through the hot part for this call alone.
        let mut t = format!(
            "\t{{ // the cold part\n\t.local .align 8 .b8 cold_args[{}];\n\t.reg .b64 %cold_a;\n\tcvta.local.u64 %cold_a, stack;\n\tadd.s64 %cold_a, %cold_a, {};\n",
            8 * values.len(),
            self.depth,
        );
        for (k, v) in values.iter().enumerate() {
            let v = if v == "%rd10" { "%cold_a" } else { v };
            t.push_str(&format!("\tst.local.u64 [cold_args+{}], {v};\n", 8 * k));
        }
        t.push_str(&format!(
            "\tmov.u64 %cold_a, cold_args;\n\tcvta.local.u64 %cold_a, %cold_a;\n\t.param .b64 args;\n\tst.param.b64 [args], %cold_a;\n\t.param .b64 cold_ret;\n\tcall.uni (cold_ret), {}, (args);\n\tld.param.b64 %rd0, [cold_ret];\n\t}}",
            self.func
        ));
        t
    }
}

/// What [`lower_body`] emits of a function.
struct Part<'a> {
    /// The instructions, by pc from the function's start.
    reach: &'a [bool],
    /// The ctx point: its marker line goes there.
    point: Option<usize>,
    /// The split: at S, the call of the cold part instead of S.
    split: Option<&'a Split>,
    /// A pc the function's opening branch names (the cold part's S): it gets a label.
    entry: Option<usize>,
}

/// Lowers the instructions of `start..end` that `part` holds, in order, with labels at the
/// targets of the reached jumps.
fn lower_body(
    cx: &mut Ctx,
    f: &mut Function,
    start: usize,
    end: usize,
    jumps: &[(usize, usize)],
    part: Part<'_>,
) -> Result<(), CompileError> {
    let Part {
        reach,
        point,
        split,
        entry,
    } = part;
    let reachable = &reach[..end - start];
    // Only reached jumps are emitted: a label for an unreached one's target would be unused
    // (and cost the unused-label pass a scan of the body).
    let mut targets = vec![false; end - start];
    for &(pc, t) in jumps {
        if reachable[pc - start] && split.is_none_or(|o| pc != o.s) {
            targets[t - start] = true;
        }
    }
    // The cold part is entered at S, from the hot part's branch.
    if let Some(e) = entry {
        targets[e - start] = true;
    }
    // Which map each register is known to hold (straight-line tracking, reset at labels).
    let mut known = Known::new();
    // The entry's r1 is the ctx until something overwrites it.
    known.ctx[1] = start == 0 && entry.is_none();
    let mut pc = start;
    while pc < end {
        let Some(d) = cx.dec[pc] else {
            pc += 1;
            continue;
        };
        if !reachable[pc - start] {
            pc += if d.op.is_wide() { 2 } else { 1 };
            continue;
        }
        if targets[pc - start] {
            f.place(crate::ptx::Label(pc as u32));
            known = Known::new();
        }
        if point == Some(pc) {
            f.body.push(Stmt::Raw(CTX_POINT.into()));
        }
        if let Some(o) = split.filter(|o| o.s == pc) {
            f.body.push(Stmt::Raw(o.call()));
            f.body.push(Stmt::Raw(COLD_END.into()));
            f.push("st.param.b64", [Operand::SymAddr(&"ret0", 0), r(0).into()]);
            f.push("ret", []);
            pc += if d.op.is_wide() { 2 } else { 1 };
            continue;
        }
        if let Some(run) = cx
            .opts
            .unaligned
            // A run stops before the ctx point, as before a jump target, so that the
            // point's marker is not skipped.
            .then(|| {
                aligned_run(cx, &known, pc, end, |q| {
                    targets[q - start] || point == Some(q)
                })
            })
            .flatten()
        {
            lower_aligned_run(cx, f, pc, &run, &mut known)?;
            pc = run.end;
            continue;
        }
        lower_insn(cx, f, pc, d, &mut known)?;
        pc += if d.op.is_wide() { 2 } else { 1 };
    }
    // Falling off the end is impossible in a verified program; trap rather than run on.
    f.push("trap", []);
    Ok(())
}

/// A straight stretch `[start, end)` of one basic block whose accesses through `base` are
/// all at offsets that are multiples of their size: when `base` is a multiple of
/// `mask + 1` (the widest of them), every one of them is aligned.
struct AlignedRun {
    end: usize,
    base: u8,
    mask: i64,
    /// 8-byte loads through `base` at offsets `o` (a multiple of 16) and `o + 8`, no store
    /// between them: one 16-byte load when `base` is a multiple of 16.
    pairs: Vec<(usize, usize)>,
}

/// During the 16-byte path of an [`AlignedRun`]: the two registers of each pair's vector
/// load, by the pc of each load (`true` at the first, which issues it).
type VecPlan = std::collections::HashMap<usize, (Reg, Reg, bool)>;

/// The [`AlignedRun`] starting at `start`, if there is one with at least two accesses.
///
/// With [`JitOptions::unaligned`] every wider-than-byte access through a pointer checks
/// its address and branches to a byte-by-byte path when it is misaligned. A run of such
/// accesses therefore becomes a chain of branches, each load's use waiting for the load
/// before the next one can issue: a record of eight words cost eight memory round trips.
/// The run is lowered twice instead ([`lower_aligned_run`]): behind one check of `base`,
/// its accesses as plain loads and stores, which ptxas schedules together; else the
/// checked code as before. The run stops before a jump target, a jump, a call, an exit, an
/// atomic, a write to `base`, or an access through another pointer that needs a check.
fn aligned_run(
    cx: &Ctx,
    known: &Known,
    start: usize,
    end: usize,
    target: impl Fn(usize) -> bool,
) -> Option<AlignedRun> {
    let access = |pc: usize| -> Option<(u8, Size, i16, Option<u8>)> {
        let d = cx.dec[pc]?;
        match d.op.kind() {
            OpKind::Load { size, .. }
                if cx
                    .opts
                    .ctx_regs
                    .as_ref()
                    .is_none_or(|c| !c.contains_key(&pc)) =>
            {
                Some((d.insn.src, size, d.insn.off, Some(d.insn.dst)))
            }
            OpKind::Store { size, .. } => Some((d.insn.dst, size, d.insn.off, None)),
            _ => None,
        }
    };
    // Accesses that need no check where the run starts (a register overwritten inside the
    // run before such an access gets its check back when it is lowered).
    let checked = |(b, size, off, _): (u8, Size, i16, Option<u8>)| {
        size != Size::B && !known.aligned(b, off, size)
    };
    let first = access(start).filter(|&a| checked(a))?;
    let base = first.0;
    let (mut count, mut widest, mut pc, mut run_end) = (0u32, 1i64, start, start);
    while pc < end {
        if pc != start && target(pc) {
            break;
        }
        let Some(d) = cx.dec[pc] else { break };
        let mut last = false;
        match (d.op.kind(), access(pc)) {
            (_, Some(a @ (b, size, off, dst))) => {
                if checked(a) {
                    if b != base || off as i64 % size.bytes() as i64 != 0 {
                        break;
                    }
                    count += 1;
                    widest = widest.max(size.bytes() as i64);
                }
                // A load into the base ends the run after it (it reads the old base).
                last = dst == Some(base);
            }
            (OpKind::Alu { .. } | OpKind::End { .. } | OpKind::Ld64(_), _) => {
                if d.insn.dst == base {
                    break;
                }
            }
            // ctx loads served from registers.
            (OpKind::Load { .. }, None) => {
                if d.insn.dst == base {
                    break;
                }
            }
            _ => break,
        }
        pc += if d.op.is_wide() { 2 } else { 1 };
        run_end = pc;
        if last {
            break;
        }
    }
    if count < 2 {
        return None;
    }
    // Pairs of 8-byte loads through the base at o and o + 8 (o a multiple of 16).
    let mut pairs = Vec::new();
    let mut taken = BTreeSet::new();
    let mut q = start;
    while q < run_end {
        let d = cx.dec[q].expect("a run holds decoded instructions");
        let step = if d.op.is_wide() { 2 } else { 1 };
        let dw_load = |pc: usize| match (cx.dec[pc].map(|d| d.op.kind()), access(pc)) {
            (Some(OpKind::Load { size: Size::Dw, .. }), Some(a @ (b, _, off, _)))
                if b == base && checked(a) =>
            {
                Some(off as i64)
            }
            _ => None,
        };
        if let Some(off) = dw_load(q).filter(|o| o % 16 == 0 && !taken.contains(&q)) {
            let mut x = q + step;
            while x < run_end {
                let dx = cx.dec[x].expect("a run holds decoded instructions");
                if matches!(dx.op.kind(), OpKind::Store { .. }) {
                    break;
                }
                if dw_load(x) == Some(off + 8) && !taken.contains(&x) {
                    pairs.push((q, x));
                    taken.insert(q);
                    taken.insert(x);
                    break;
                }
                x += if dx.op.is_wide() { 2 } else { 1 };
            }
        }
        q += step;
    }
    Some(AlignedRun {
        end: run_end,
        base,
        mask: widest - 1,
        pairs,
    })
}

/// Lowers an [`AlignedRun`]: one alignment check of its base, then the run with plain
/// accesses, else the run as [`lower_insn`] lowers it alone.
fn lower_aligned_run(
    cx: &mut Ctx,
    f: &mut Function,
    start: usize,
    run: &AlignedRun,
    known: &mut Known,
) -> Result<(), CompileError> {
    // Paths, each behind its check: 16-byte loads for the pairs (base a multiple of 16),
    // plain accesses (base a multiple of the widest access), the per-access checked code.
    let mut paths: Vec<(Option<i64>, bool)> = Vec::new();
    if !run.pairs.is_empty() {
        paths.push((Some(15), true));
    }
    paths.push((Some(run.mask), false));
    paths.push((None, false));
    let join = f.label();
    let before = *known;
    // (An error ends the whole compile, so the run's state in `cx` needs no unwinding.)
    for (mask, vector) in paths {
        *known = before;
        let next = mask.map(|m| {
            let t = f.reg(RegClass::B64);
            f.push("and.b64", [t.into(), r(run.base).into(), imm(m)]);
            let p = f.reg(RegClass::Pred);
            f.push("setp.ne.u64", [p.into(), t.into(), imm(0)]);
            let next = f.label();
            f.bra(next, Some((p, true)));
            next
        });
        cx.aligned_base = mask.map(|_| run.base);
        cx.vec.clear();
        if vector {
            for &(a, b) in &run.pairs {
                let (lo, hi) = (f.reg(RegClass::B64), f.reg(RegClass::B64));
                cx.vec.insert(a, (lo, hi, true));
                cx.vec.insert(b, (lo, hi, false));
            }
        }
        let mut pc = start;
        while pc < run.end {
            let d = cx.dec[pc].expect("a run holds decoded instructions");
            lower_insn(cx, f, pc, d, known)?;
            pc += if d.op.is_wide() { 2 } else { 1 };
        }
        if let Some(next) = next {
            f.bra(join, None);
            f.place(next);
        }
    }
    cx.aligned_base = None;
    cx.vec.clear();
    f.place(join);
    Ok(())
}

/// Which instructions of the function `start..end` a path from `start` reaches.
fn reachable(cx: &Ctx, start: usize, end: usize) -> Vec<bool> {
    // One forward sweep: a slot is reached when a reached slot before it falls or jumps
    // there. Exact when no reached jump goes backwards (clang's output outside loops);
    // otherwise the worklist below finishes the job from what the sweep found.
    let mut seen = vec![false; end - start];
    seen[0] = true;
    let mut backward = false;
    let mut pc = start;
    while pc < end {
        let Some(d) = cx.dec[pc] else {
            pc += 1;
            continue;
        };
        // `ld_imm64` (two slots) is the only opcode of byte 0x18.
        debug_assert_eq!(d.op.is_wide(), d.insn.code == 0x18);
        let next = pc + if d.insn.code == 0x18 { 2 } else { 1 };
        if seen[pc - start] {
            let (jump, falls) = match d.op.kind() {
                OpKind::Ja => (Some(pc as i64 + 1 + d.insn.off as i64), false),
                OpKind::JaLong => (Some(pc as i64 + 1 + d.insn.imm as i64), false),
                OpKind::Jmp { .. } => (Some(pc as i64 + 1 + d.insn.off as i64), true),
                OpKind::Exit => (None, false),
                _ => (None, true),
            };
            if falls && next < end {
                seen[next - start] = true;
            }
            if let Some(t) = jump
                && t >= start as i64
                && t < end as i64
            {
                backward |= t <= pc as i64;
                seen[t as usize - start] = true;
            }
        }
        pc = next;
    }
    if !backward {
        return seen;
    }
    let mut work: Vec<usize> = (start..end).filter(|&pc| seen[pc - start]).collect();
    seen.iter_mut().for_each(|s| *s = false);
    while let Some(pc) = work.pop() {
        if pc < start || pc >= end || seen[pc - start] {
            continue;
        }
        seen[pc - start] = true;
        let Some(d) = cx.dec[pc] else { continue };
        let next = pc + if d.op.is_wide() { 2 } else { 1 };
        match d.op.kind() {
            OpKind::Ja => work.push((pc as i64 + 1 + d.insn.off as i64) as usize),
            OpKind::JaLong => work.push((pc as i64 + 1 + d.insn.imm as i64) as usize),
            OpKind::Jmp { .. } => {
                work.push((pc as i64 + 1 + d.insn.off as i64) as usize);
                work.push(next);
            }
            OpKind::Exit => {}
            _ => work.push(next),
        }
    }
    seen
}

/// Where control goes after `pc`: the fall-through and the jump target, inside `start..end`.
fn successors(cx: &Ctx, pc: usize, end: usize) -> [Option<usize>; 2] {
    let Some(d) = cx.dec[pc] else {
        return [None, None];
    };
    let next = pc + if d.op.is_wide() { 2 } else { 1 };
    let at = |t: i64| usize::try_from(t).ok().filter(|&t| t < end);
    match d.op.kind() {
        OpKind::Ja => [at(pc as i64 + 1 + d.insn.off as i64), None],
        OpKind::JaLong => [at(pc as i64 + 1 + d.insn.imm as i64), None],
        OpKind::Jmp { .. } => [at(pc as i64 + 1 + d.insn.off as i64), at(next as i64)],
        OpKind::Exit => [None, None],
        _ => [at(next as i64), None],
    }
}

/// The ctx point of the main function with [`JitOptions::ctx_regs`]: the first ctx load
/// `S`, when every path from the entry to a ctx load passes through `S` and no path
/// comes back to it. A caller inlining the body may compute the ctx words there, marked
/// `// @bt_ctx_point`, instead of before the body: a probe that returns early on its
/// configuration alone then never pays for them, warp collectives included (the lanes
/// that reach `S` together are the ones that read the words). `None`: no such point
/// (then the words must be ready before the body).
fn ctx_point(cx: &Ctx, end: usize, reachable: &[bool]) -> Option<usize> {
    let loads = cx.opts.ctx_regs.as_ref()?;
    let s = *loads.keys().find(|&&pc| pc < end && reachable[pc])?;
    // Slots from which a ctx load can be reached: backwards from the loads.
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); end];
    for pc in (0..end).filter(|&pc| reachable[pc]) {
        for t in successors(cx, pc, end).into_iter().flatten() {
            preds[t].push(pc);
        }
    }
    let mut reads = vec![false; end];
    let mut work: Vec<usize> = loads
        .keys()
        .copied()
        .filter(|&pc| pc < end && reachable[pc])
        .collect();
    while let Some(pc) = work.pop() {
        if !std::mem::replace(&mut reads[pc], true) {
            work.extend(preds[pc].iter().copied());
        }
    }
    // Before S, control reaches ctx-reading code past S only through S; from S on, it
    // never comes back to S or before it on a path that reads the ctx again.
    let ok = (0..end).filter(|&pc| reachable[pc]).all(|pc| {
        successors(cx, pc, end).into_iter().flatten().all(|t| {
            let bypass = pc < s && t > s;
            let back = pc >= s && t <= s;
            !((bypass || back) && reads[t])
        })
    });
    ok.then_some(s)
}

fn lower_insn(
    cx: &mut Ctx,
    f: &mut Function,
    pc: usize,
    d: Dec,
    known: &mut Known,
) -> Result<(), CompileError> {
    let insn = d.insn;
    let (dst, src) = (insn.dst, insn.src);
    let imm64 = insn.imm as i64;
    // Any write to dst forgets its map, unless set below.
    let writes_dst = matches!(
        d.op.kind(),
        OpKind::Alu { .. } | OpKind::End { .. } | OpKind::Ld64(_) | OpKind::Load { .. }
    );
    // What src and dst held before this instruction (dst is forgotten below).
    let (sr, dr) = (src as usize & 15, dst as usize & 15);
    let before = (
        known.map[sr],
        known.stack[sr],
        known.val[sr],
        known.stack[dr],
        known.val[dr],
        known.val_map[sr],
        known.val_map[dr],
        known.konst[sr],
    );
    // Before dst is forgotten: whether an access through a register is known aligned.
    let pre = *known;
    if writes_dst {
        if dst == FRAME_PTR {
            return Err(cx.err(pc, "r10 (frame pointer) is read-only"));
        }
        known.forget(dst);
    }
    match d.op.kind() {
        OpKind::Alu { op, width, src: s } => {
            let opnd = match s {
                Src::Imm => imm(imm64),
                Src::Reg => r(src).into(),
            };
            match width {
                Width::W64 => {
                    let d = dr;
                    match (op, s) {
                        (AluOp::Mov, Src::Reg) => {
                            known.ctx[d] = pre.ctx[sr];
                            known.global[d] = pre.global[sr];
                            known.map[d] = before.0;
                            known.stack[d] = before.1;
                            known.val[d] = before.2;
                            known.val_map[d] = before.5;
                            known.konst[d] = before.7;
                        }
                        (AluOp::Mov, Src::Imm) => known.konst[d] = Some(imm64 as u64),
                        // A pointer into a job's buffer moved by a scalar stays there.
                        (AluOp::Add | AluOp::Sub, Src::Reg) if !pre.global[sr] => {
                            known.global[d] = pre.global[d];
                        }
                        (AluOp::Add | AluOp::Sub, Src::Imm) => {
                            known.global[d] = pre.global[d];
                            let delta = if op == AluOp::Add {
                                imm64
                            } else {
                                imm64.wrapping_neg()
                            };
                            known.stack[d] = before.3.map(|o| o.wrapping_add(delta));
                            known.val[d] = before.4;
                            known.val_map[d] = before.6;
                        }
                        _ => {}
                    }
                    alu64(f, op, r(dst), opnd, s, imm64)
                }
                Width::W32 => {
                    if (op, s) == (AluOp::Mov, Src::Imm) {
                        known.konst[dr] = Some(insn.imm as u32 as u64);
                    }
                    alu32(f, op, r(dst), src, s, insn.imm)
                }
            }
        }
        OpKind::End { op, bits } => end(f, op, bits, r(dst)),
        OpKind::Ld64(kind) => {
            let lo = insn.imm as u32 as u64;
            let hi = d.next_imm as u32 as u64;
            let v: u64 = match kind {
                Ld64Kind::Imm => {
                    known.konst[dr] = Some(lo | (hi << 32));
                    lo | (hi << 32)
                }
                Ld64Kind::MapIdx => {
                    let i = insn.imm as u32 as usize;
                    let Some(b) = cx.opts.maps.get(i).filter(|_| i < cx.prog.maps.len()) else {
                        return Err(cx.err(pc, format!("map index {i} has no binding")));
                    };
                    known.map[dst as usize] = Some(i);
                    b.base_addr
                }
                Ld64Kind::MapIdxValue => {
                    let i = insn.imm as u32 as usize;
                    let Some(b) = cx.opts.maps.get(i).filter(|_| i < cx.prog.maps.len()) else {
                        return Err(cx.err(pc, format!("map index {i} has no binding")));
                    };
                    if b.kind != MapKind::Array {
                        return Err(cx.err(
                            pc,
                            format!("map_idx_value needs an array map, map {i} is {:?}", b.kind),
                        ));
                    }
                    // A global variable (`.data`, `.bss`, `.rodata`): device memory.
                    known.global[dr] = true;
                    prelude::array_value_addr(b, 0, 0).wrapping_add(d.next_imm as i64 as u64)
                }
                Ld64Kind::MapFd | Ld64Kind::MapValue | Ld64Kind::VarAddr | Ld64Kind::CodeAddr => {
                    return Err(cx.err(
                        pc,
                        format!(
                            "ld_imm64 form {kind:?} is not supported (expected an immediate or the map index forms, src 0, 5 or 6)"
                        ),
                    ));
                }
            };
            f.push("mov.b64", [r(dst).into(), imm(v as i64)]);
        }
        OpKind::Load { size, sign_extend } => {
            let op = match (size, sign_extend) {
                (Size::B, false) => "ld.u8",
                (Size::H, false) => "ld.u16",
                (Size::W, false) => "ld.u32",
                (Size::Dw, _) => "ld.u64",
                (Size::B, true) => "ld.s8",
                (Size::H, true) => "ld.s16",
                (Size::W, true) => "ld.s32",
            };
            let global = pre.global(src);
            let op = if global { global_op(op) } else { op };
            if let Some(&(lo, hi, first)) = cx.vec.get(&pc) {
                // A pair's 16-byte load, issued at its first load (`known` 16-aligned base).
                if first {
                    f.push(
                        if global {
                            "ld.global.v2.u64"
                        } else {
                            "ld.v2.u64"
                        },
                        [
                            Operand::Vec2(lo, hi),
                            Operand::Addr(r(src), insn.off as i32),
                        ],
                    );
                }
                f.push(
                    "mov.b64",
                    [r(dst).into(), if first { lo } else { hi }.into()],
                );
            } else if let Some(at) = cx.opts.ctx_regs.as_ref().and_then(|c| c.get(&pc)) {
                ctx_reg_load(cx, f, pc, r(dst), *at, size, sign_extend)?;
            } else if let Some(s) = slot_reg(cx, f, pc) {
                // The slot holds its bytes zero-extended (see the store below).
                let bits = 8 * size.bytes() as i64;
                if sign_extend && bits < 64 {
                    f.push("shl.b64", [r(dst).into(), s.into(), imm(64 - bits)]);
                    f.push("shr.s64", [r(dst).into(), r(dst).into(), imm(64 - bits)]);
                } else {
                    f.push("mov.b64", [r(dst).into(), s.into()]);
                }
            } else if cx.opts.unaligned
                && size != Size::B
                && !pre.aligned(src, insn.off, size)
                && cx.aligned_base != Some(src)
            {
                load_bytes(f, op, r(dst), r(src), insn.off as i64, size, sign_extend);
            } else if let Some(a) = stack_addr(cx, src, insn.off, size) {
                f.push(local_op(op), [r(dst).into(), a]);
            } else {
                f.push(op, [r(dst).into(), Operand::Addr(r(src), insn.off as i32)]);
            }
            // The job ctx's data, data_end, out and out_end words point into global memory.
            if cx.opts.chunk_loop
                && pre.ctx[sr]
                && size == Size::Dw
                && [JobCtx::DATA, JobCtx::DATA_END, JobCtx::OUT, JobCtx::OUT_END]
                    .contains(&(insn.off as i64))
            {
                known.global[dr] = true;
            }
        }
        OpKind::Store { size, src: s } => {
            let op = match size {
                Size::B => "st.u8",
                Size::H => "st.u16",
                Size::W => "st.u32",
                Size::Dw => "st.u64",
            };
            let v = match s {
                Src::Reg => r(src),
                Src::Imm => {
                    let t = f.reg(RegClass::B64);
                    f.push("mov.b64", [t.into(), imm(imm64)]);
                    t
                }
            };
            if let Some(s) = slot_reg(cx, f, pc) {
                match size {
                    Size::Dw => f.push("mov.b64", [s.into(), v.into()]),
                    _ => f.push(
                        "and.b64",
                        [s.into(), v.into(), imm((1i64 << (8 * size.bytes())) - 1)],
                    ),
                }
            } else if cx.opts.unaligned
                && size != Size::B
                && !pre.aligned(dst, insn.off, size)
                && cx.aligned_base != Some(dst)
            {
                store_bytes(f, op, r(dst), insn.off as i64, size, v);
            } else if let Some(a) = stack_addr(cx, dst, insn.off, size) {
                f.push(local_op(op), [a, v.into()]);
            } else {
                let op = if pre.global(dst) { global_op(op) } else { op };
                f.push(op, [Operand::Addr(r(dst), insn.off as i32), v.into()]);
            }
        }
        OpKind::Atomic { op, size, fetch } => {
            let stripes = known.val_map[dst as usize]
                .and_then(|m| cx.opts.maps.get(m))
                .filter(|b| b.stripes > 1 && size == Size::Dw)
                .map(|b| (b.stripes, b.stripe_stride));
            let space = if known.val[dst as usize] {
                Space::Global
            } else if dst == FRAME_PTR && !cx.stack_generic {
                Space::Stack(cx.depth)
            } else {
                Space::Unknown
            };
            atomic(
                f,
                cx.scope,
                cx.opts.relaxed_atomics,
                op,
                size,
                fetch,
                r(dst),
                insn.off as i64,
                src,
                space,
                (cx.opts.warp_aggregate && cx.opts.sm >= 70).then_some(Aggregate {
                    stripes,
                    defer: cx.opts.defer_adds && cx.opts.ctx_regs.is_some(),
                    uniform_value: known.konst[src as usize].is_some(),
                }),
            );
            if fetch {
                if op == AtomicOp::Cmpxchg {
                    known.forget(0);
                } else {
                    known.forget(src);
                }
            }
        }
        OpKind::Ja => f.bra(
            crate::ptx::Label((pc as i64 + 1 + insn.off as i64) as u32),
            None,
        ),
        OpKind::JaLong => f.bra(crate::ptx::Label((pc as i64 + 1 + imm64) as u32), None),
        OpKind::Jmp {
            cond,
            width,
            src: s,
        } => {
            let target = crate::ptx::Label((pc as i64 + 1 + insn.off as i64) as u32);
            let p = cond_pred(f, cond, width, r(dst), s, src, insn.imm);
            f.bra(target, Some((p, true)));
        }
        OpKind::Call => {
            let r1_map = known.map[1];
            call_helper(cx, f, pc, insn.imm, known)?;
            *known = Known::new();
            known.val[0] = insn.imm == ebpf::helpers::MAP_LOOKUP_ELEM;
            if known.val[0] {
                known.val_map[0] = r1_map;
            }
        }
        OpKind::Callx => {
            match known.konst[dr].and_then(ebpf::helpers::callx_id) {
                // The id set on this stretch: the static call.
                Some(id) => {
                    call_helper(cx, f, pc, id, known)?;
                    *known = Known::new();
                    known.val[0] = id == ebpf::helpers::MAP_LOOKUP_ELEM;
                }
                None => {
                    callx_chain(cx, f, pc, dst, known)?;
                    *known = Known::new();
                }
            }
        }
        OpKind::CallLocal => {
            let t = (pc as i64 + 1 + imm64) as usize;
            let name = cx
                .func_name(t)
                .expect("call targets are function starts")
                .to_string();
            f.call(name, (1..=5).map(r).collect(), Some(r(0)));
            *known = Known::new();
        }
        OpKind::CallKfunc => {
            return Err(cx.err(pc, "kfunc calls are not supported"));
        }
        OpKind::Exit => {
            f.push("st.param.b64", [Operand::SymAddr(&"ret0", 0), r(0).into()]);
            f.push("ret", []);
        }
    }
    Ok(())
}

/// The line marking the body's ctx point (see `ctx_point`), with
/// [`crate::JitOptions::ctx_regs`].
pub const CTX_POINT: &str = "\t// @bt_ctx_point";

/// Names of the registers holding ctx words with [`crate::JitOptions::ctx_regs`]:
/// `%bt_cw<k>` holds ctx bytes `8k..8k+8`.
pub static CTX_WORD_REGS: [&str; 64] = [
    "%bt_cw0", "%bt_cw1", "%bt_cw2", "%bt_cw3", "%bt_cw4", "%bt_cw5", "%bt_cw6", "%bt_cw7",
    "%bt_cw8", "%bt_cw9", "%bt_cw10", "%bt_cw11", "%bt_cw12", "%bt_cw13", "%bt_cw14", "%bt_cw15",
    "%bt_cw16", "%bt_cw17", "%bt_cw18", "%bt_cw19", "%bt_cw20", "%bt_cw21", "%bt_cw22", "%bt_cw23",
    "%bt_cw24", "%bt_cw25", "%bt_cw26", "%bt_cw27", "%bt_cw28", "%bt_cw29", "%bt_cw30", "%bt_cw31",
    "%bt_cw32", "%bt_cw33", "%bt_cw34", "%bt_cw35", "%bt_cw36", "%bt_cw37", "%bt_cw38", "%bt_cw39",
    "%bt_cw40", "%bt_cw41", "%bt_cw42", "%bt_cw43", "%bt_cw44", "%bt_cw45", "%bt_cw46", "%bt_cw47",
    "%bt_cw48", "%bt_cw49", "%bt_cw50", "%bt_cw51", "%bt_cw52", "%bt_cw53", "%bt_cw54", "%bt_cw55",
    "%bt_cw56", "%bt_cw57", "%bt_cw58", "%bt_cw59", "%bt_cw60", "%bt_cw61", "%bt_cw62", "%bt_cw63",
];

/// A ctx load at constant offset `at`, read from the ctx word registers.
fn ctx_reg_load(
    cx: &Ctx,
    f: &mut Function,
    pc: usize,
    dst: Reg,
    at: i64,
    size: Size,
    sign_extend: bool,
) -> Result<(), CompileError> {
    let bytes = size.bytes() as i64;
    if !cx.in_main {
        return Err(cx.err(
            pc,
            "ctx in registers: a subprogram reads the ctx (only the entry function may)",
        ));
    }
    if at < 0 || at / 8 >= 64 || at % 8 + bytes > 8 {
        return Err(cx.err(
            pc,
            format!("ctx in registers: a {bytes}-byte read at ctx offset {at} spans two words"),
        ));
    }
    let word = Operand::Sym(&CTX_WORD_REGS[(at / 8) as usize]);
    let shift = 8 * (at % 8);
    if bytes == 8 {
        f.push("mov.b64", [dst.into(), word]);
        return Ok(());
    }
    if shift == 0 {
        f.push("mov.b64", [dst.into(), word]);
    } else {
        f.push("shr.u64", [dst.into(), word, imm(shift)]);
    }
    let bits = 8 * bytes;
    if sign_extend {
        f.push("shl.b64", [dst.into(), dst.into(), imm(64 - bits)]);
        f.push("shr.s64", [dst.into(), dst.into(), imm(64 - bits)]);
    } else {
        f.push("and.b64", [dst.into(), dst.into(), imm((1i64 << bits) - 1)]);
    }
    Ok(())
}

/// The register holding the frame slot that the load or store at `pc` accesses, when the
/// function keeps it in one ([`JitOptions::stack_regs`]).
fn slot_reg(cx: &mut Ctx, f: &mut Function, pc: usize) -> Option<Reg> {
    if !cx.promote {
        return None;
    }
    let off = *cx.opts.stack_regs.as_ref()?.get(&pc)?;
    Some(
        *cx.slot_regs
            .entry(off)
            .or_insert_with(|| f.reg(RegClass::B64)),
    )
}

/// `[stack+depth+off]` for an access through r10 that stays inside the frame: a `.local`
/// access ptxas sees as such (an `STL`/`LDL` it can forward and keep in registers, where the
/// generic address `r10 + off` gives a generic `ST.E`/`LD.E` it keeps as is).
/// `None` in a function that reaches the frame through r10 only (`Ctx::stack_generic`).
fn stack_addr(cx: &Ctx, base: u8, off: i16, size: Size) -> Option<Operand> {
    let depth = cx.depth;
    let at = depth as i64 + off as i64;
    (base == FRAME_PTR && !cx.stack_generic && at >= 0 && at + size.bytes() as i64 <= depth as i64)
        .then_some(Operand::SymAddr(&"stack", at as i32))
}

/// The `.local` spelling of a generic load or store opcode.
fn global_op(op: &'static str) -> &'static str {
    match op {
        "ld.u8" => "ld.global.u8",
        "ld.u16" => "ld.global.u16",
        "ld.u32" => "ld.global.u32",
        "ld.u64" => "ld.global.u64",
        "ld.s8" => "ld.global.s8",
        "ld.s16" => "ld.global.s16",
        "ld.s32" => "ld.global.s32",
        "st.u8" => "st.global.u8",
        "st.u16" => "st.global.u16",
        "st.u32" => "st.global.u32",
        "st.u64" => "st.global.u64",
        other => other,
    }
}

fn local_op(op: &'static str) -> &'static str {
    match op {
        "ld.u8" => "ld.local.u8",
        "ld.u16" => "ld.local.u16",
        "ld.u32" => "ld.local.u32",
        "ld.u64" => "ld.local.u64",
        "ld.s8" => "ld.local.s8",
        "ld.s16" => "ld.local.s16",
        "ld.s32" => "ld.local.s32",
        "st.u8" => "st.local.u8",
        "st.u16" => "st.local.u16",
        "st.u32" => "st.local.u32",
        "st.u64" => "st.local.u64",
        other => other,
    }
}

/// Warp aggregation of an atomic add, and the map's stripes (count, stride) if striped.
#[derive(Clone, Copy)]
struct Aggregate {
    stripes: Option<(u32, u64)>,
    /// Mark the add for deferral ([`crate::JitOptions::defer_adds`]).
    defer: bool,
    /// The added value is a constant: the same in every lane.
    uniform_value: bool,
}

/// What an atomic's base register is known to point to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Space {
    /// A map value from `map_lookup_elem`: global memory.
    Global,
    /// r10 of a frame of this many bytes: the thread's stack.
    Stack(u32),
    /// Either: decided at run time with `isspacep.local`.
    Unknown,
}

/// Branches to a fresh label when `base + off` is not a multiple of `size`; returns that
/// label (the slow path) and the join label, for [`JitOptions::unaligned`] accesses.
fn unless_aligned(
    f: &mut Function,
    base: Reg,
    off: i64,
    size: Size,
) -> (crate::ptx::Label, crate::ptx::Label) {
    let a = f.reg(RegClass::B64);
    f.push("add.s64", [a.into(), base.into(), imm(off)]);
    f.push(
        "and.b64",
        [a.into(), a.into(), imm(size.bytes() as i64 - 1)],
    );
    let p = f.reg(RegClass::Pred);
    f.push("setp.ne.u64", [p.into(), a.into(), imm(0)]);
    let (slow, join) = (f.label(), f.label());
    f.bra(slow, Some((p, true)));
    (slow, join)
}

/// A load for [`JitOptions::unaligned`]: one direct load when the address is aligned (the
/// common case), else, on a branch of its own, assembled from byte loads (little-endian).
fn load_bytes(
    f: &mut Function,
    op: &'static str,
    d: Reg,
    base: Reg,
    off: i64,
    size: Size,
    sign_extend: bool,
) {
    let (slow, join) = unless_aligned(f, base, off, size);
    f.push(op, [d.into(), Operand::Addr(base, off as i32)]);
    f.bra(join, None);
    f.place(slow);
    let n = size.bytes() as i64;
    let acc = f.reg(RegClass::B64);
    f.push("ld.u8", [acc.into(), Operand::Addr(base, off as i32)]);
    for k in 1..n {
        let t = f.reg(RegClass::B64);
        f.push("ld.u8", [t.into(), Operand::Addr(base, (off + k) as i32)]);
        f.push("shl.b64", [t.into(), t.into(), imm(8 * k)]);
        f.push("or.b64", [acc.into(), acc.into(), t.into()]);
    }
    if sign_extend && n < 8 {
        let sh = 64 - 8 * n;
        f.push("shl.b64", [acc.into(), acc.into(), imm(sh)]);
        f.push("shr.s64", [d.into(), acc.into(), imm(sh)]);
    } else {
        f.push("mov.b64", [d.into(), acc.into()]);
    }
    f.place(join);
}

/// A store for [`JitOptions::unaligned`]: one direct store when the address is aligned,
/// else, on a branch of its own, byte stores (little-endian).
fn store_bytes(f: &mut Function, op: &'static str, base: Reg, off: i64, size: Size, v: Reg) {
    let (slow, join) = unless_aligned(f, base, off, size);
    f.push(op, [Operand::Addr(base, off as i32), v.into()]);
    f.bra(join, None);
    f.place(slow);
    f.push("st.u8", [Operand::Addr(base, off as i32), v.into()]);
    for k in 1..size.bytes() as i64 {
        let t = f.reg(RegClass::B64);
        f.push("shr.u64", [t.into(), v.into(), imm(8 * k)]);
        f.push("st.u8", [Operand::Addr(base, (off + k) as i32), t.into()]);
    }
    f.place(join);
}

/// Immediate as the 64-bit operand value (sign-extended).
fn alu64(f: &mut Function, op: AluOp, d: Reg, s: Operand, src: Src, imm64: i64) {
    let dd: Operand = d.into();
    match op {
        AluOp::Add => f.push("add.s64", [dd.clone(), dd, s]),
        AluOp::Sub => f.push("sub.s64", [dd.clone(), dd, s]),
        AluOp::Mul => f.push("mul.lo.s64", [dd.clone(), dd, s]),
        AluOp::Or => f.push("or.b64", [dd.clone(), dd, s]),
        AluOp::And => f.push("and.b64", [dd.clone(), dd, s]),
        AluOp::Xor => f.push("xor.b64", [dd.clone(), dd, s]),
        AluOp::Mov => f.push("mov.b64", [dd, s]),
        AluOp::Neg => f.push("neg.s64", [dd.clone(), dd]),
        AluOp::Lsh | AluOp::Rsh | AluOp::Arsh => {
            let opc = match op {
                AluOp::Lsh => "shl.b64",
                AluOp::Rsh => "shr.u64",
                _ => "shr.s64",
            };
            let cnt = shift_count(f, s, src, imm64, 63);
            f.push(opc, [dd.clone(), dd, cnt]);
        }
        AluOp::Div | AluOp::Mod | AluOp::Sdiv | AluOp::Smod => {
            divmod(f, op, d, s, src, imm64, false);
        }
        AluOp::Movsx8 | AluOp::Movsx16 => {
            let sh = if op == AluOp::Movsx8 { 56 } else { 48 };
            let t = f.reg(RegClass::B64);
            f.push("shl.b64", [t.into(), s, imm(sh)]);
            f.push("shr.s64", [dd, t.into(), imm(sh)]);
        }
        AluOp::Movsx32 => {
            let t = f.reg(RegClass::B32);
            f.push("cvt.u32.u64", [t.into(), s]);
            f.push("cvt.s64.s32", [dd, t.into()]);
        }
    }
}

fn shift_count(f: &mut Function, s: Operand, src: Src, imm64: i64, mask: i64) -> Operand {
    match src {
        Src::Imm => imm(imm64 & mask),
        Src::Reg => {
            let c = f.reg(RegClass::B32);
            f.push("cvt.u32.u64", [c.into(), s]);
            f.push("and.b32", [c.into(), c.into(), imm(mask)]);
            c.into()
        }
    }
}

/// Picks the 32- or 64-bit spelling of an opcode.
fn wsel(w32: bool, o32: &'static str, o64: &'static str) -> &'static str {
    if w32 { o32 } else { o64 }
}

/// Division and modulo with the eBPF rules, 64-bit (`w32 == false`, `d` and `s` are the
/// 64-bit operands) or 32-bit (`d`, `s` are already `.b32` registers / a 32-bit imm).
fn divmod(f: &mut Function, op: AluOp, d: Reg, s: Operand, src: Src, imm: i64, w32: bool) {
    let cls = if w32 { RegClass::B32 } else { RegClass::B64 };
    let dd: Operand = d.into();
    let signed = matches!(op, AluOp::Sdiv | AluOp::Smod);
    let is_div = matches!(op, AluOp::Div | AluOp::Sdiv);
    let mov = wsel(w32, "mov.b32", "mov.b64");
    let neg = wsel(w32, "neg.s32", "neg.s64");
    let setp_eq = wsel(w32, "setp.eq.b32", "setp.eq.b64");
    let selp = wsel(w32, "selp.b32", "selp.b64");
    let opc = match (is_div, signed) {
        (true, false) => wsel(w32, "div.u32", "div.u64"),
        (true, true) => wsel(w32, "div.s32", "div.s64"),
        (false, false) => wsel(w32, "rem.u32", "rem.u64"),
        (false, true) => wsel(w32, "rem.s32", "rem.s64"),
    };
    match src {
        Src::Imm => {
            let v = if w32 { imm as i32 as i64 } else { imm };
            if v == 0 {
                if is_div {
                    f.push(mov, [dd, Operand::Imm(0)]);
                }
                // Modulo by zero leaves dst unchanged.
            } else if signed && v == -1 {
                if is_div {
                    f.push(neg, [dd.clone(), dd]);
                } else {
                    f.push(mov, [dd, Operand::Imm(0)]);
                }
            } else {
                f.push(opc, [dd.clone(), dd, Operand::Imm(v)]);
            }
        }
        Src::Reg => {
            // s' = (s == 0 || (signed && s == -1)) ? 1 : s; q = d op s'; then fix up.
            let pz = f.reg(RegClass::Pred);
            f.push(setp_eq, [pz.into(), s.clone(), Operand::Imm(0)]);
            let safe = f.reg(cls);
            f.push(selp, [safe.into(), Operand::Imm(1), s.clone(), pz.into()]);
            let pm = if signed {
                let pm = f.reg(RegClass::Pred);
                f.push(setp_eq, [pm.into(), s, Operand::Imm(-1)]);
                f.push_if(pm, true, mov, [safe.into(), Operand::Imm(1)]);
                Some(pm)
            } else {
                None
            };
            let q = f.reg(cls);
            f.push(opc, [q.into(), dd.clone(), safe.into()]);
            if is_div {
                if let Some(pm) = pm {
                    // d / -1 = -d (wrapping: MIN / -1 = MIN).
                    f.push_if(pm, true, neg, [q.into(), dd.clone()]);
                }
                f.push(selp, [dd, Operand::Imm(0), q.into(), pz.into()]);
            } else {
                // d % -1 = 0, which d % 1 already gave; d % 0 = d.
                f.push(selp, [dd.clone(), dd, q.into(), pz.into()]);
            }
        }
    }
}

fn alu32(f: &mut Function, op: AluOp, d: Reg, src: u8, s: Src, imm32: i32) {
    let dd: Operand = d.into();
    // Moves need no 32-bit copy of dst.
    match op {
        AluOp::Mov | AluOp::Movsx32 => {
            match s {
                Src::Imm => f.push("mov.b64", [dd, imm(imm32 as u32 as i64)]),
                Src::Reg => f.push("and.b64", [dd, r(src).into(), imm(0xffff_ffff)]),
            }
            return;
        }
        AluOp::Movsx8 | AluOp::Movsx16 => {
            let sh = if op == AluOp::Movsx8 { 24 } else { 16 };
            let t = f.reg(RegClass::B32);
            f.push("cvt.u32.u64", [t.into(), r(src).into()]);
            f.push("shl.b32", [t.into(), t.into(), imm(sh)]);
            f.push("shr.s32", [t.into(), t.into(), imm(sh)]);
            f.push("cvt.u64.u32", [dd, t.into()]);
            return;
        }
        _ => {}
    }
    // Operations whose low 32 bits depend only on the operands' low 32 bits: the 64-bit
    // operation, then the upper half cleared. Two instructions instead of four, and it keeps
    // clear of a ptxas -O3 miscompile (12.9 and 13.0, sm_90): `cvt.u32.u64` of a constant,
    // `neg.s32` (or `sub.s32 0, x`, `mul.lo.s32 x, -1`), `cvt.u64.u32` on a conditional path
    // folds to the constant unnegated when it is 0x7fffffff (differential case `alu5440`,
    // `jit/gpu/repro/ptxas_o3_alu5440_77.ptx`).
    let wide = match op {
        AluOp::Add => Some("add.s64"),
        AluOp::Sub => Some("sub.s64"),
        AluOp::Mul => Some("mul.lo.s64"),
        AluOp::Or => Some("or.b64"),
        AluOp::And => Some("and.b64"),
        AluOp::Xor => Some("xor.b64"),
        AluOp::Neg => Some("neg.s64"),
        _ => None,
    };
    if let Some(w) = wide {
        if op == AluOp::Neg {
            f.push(w, [dd.clone(), dd.clone()]);
        } else {
            let b: Operand = match s {
                Src::Imm => imm(imm32 as i64),
                Src::Reg => r(src).into(),
            };
            f.push(w, [dd.clone(), dd.clone(), b]);
        }
        f.push("and.b64", [dd.clone(), dd, imm(0xffff_ffff)]);
        return;
    }
    let a = f.reg(RegClass::B32);
    f.push("cvt.u32.u64", [a.into(), dd.clone()]);
    let b: Operand = match s {
        Src::Imm => imm(imm32 as i64),
        Src::Reg => {
            let b = f.reg(RegClass::B32);
            f.push("cvt.u32.u64", [b.into(), r(src).into()]);
            b.into()
        }
    };
    let aa: Operand = a.into();
    match op {
        AluOp::Lsh | AluOp::Rsh | AluOp::Arsh => {
            let opc = match op {
                AluOp::Lsh => "shl.b32",
                AluOp::Rsh => "shr.u32",
                _ => "shr.s32",
            };
            let cnt = match s {
                Src::Imm => imm(imm32 as i64 & 31),
                Src::Reg => {
                    f.push("and.b32", [b.clone(), b.clone(), imm(31)]);
                    b
                }
            };
            f.push(opc, [aa.clone(), aa, cnt]);
        }
        AluOp::Div | AluOp::Mod | AluOp::Sdiv | AluOp::Smod => {
            divmod(f, op, a, b, s, imm32 as i64, true);
        }
        AluOp::Mov
        | AluOp::Movsx8
        | AluOp::Movsx16
        | AluOp::Movsx32
        | AluOp::Add
        | AluOp::Sub
        | AluOp::Mul
        | AluOp::Or
        | AluOp::And
        | AluOp::Xor
        | AluOp::Neg => {
            unreachable!("handled above")
        }
    }
    f.push("cvt.u64.u32", [dd, a.into()]);
}

fn end(f: &mut Function, op: EndOp, bits: u8, d: Reg) {
    let dd: Operand = d.into();
    let swap = match op {
        EndOp::Le => false,
        EndOp::Be | EndOp::Bswap => true,
    };
    match (swap, bits) {
        (false, 16) => f.push("and.b64", [dd.clone(), dd, imm(0xffff)]),
        (false, 32) => f.push("and.b64", [dd.clone(), dd, imm(0xffff_ffff)]),
        (false, _) => {}
        (true, 16) | (true, 32) => {
            let t = f.reg(RegClass::B32);
            f.push("cvt.u32.u64", [t.into(), dd.clone()]);
            f.push(
                "prmt.b32",
                [t.into(), t.into(), t.into(), Operand::Sym(&"0x0123")],
            );
            if bits == 16 {
                f.push("shr.u32", [t.into(), t.into(), imm(16)]);
            }
            f.push("cvt.u64.u32", [dd, t.into()]);
        }
        (true, _) => {
            let lo = f.reg(RegClass::B32);
            let hi = f.reg(RegClass::B32);
            f.push("mov.b64", [Operand::Vec2(lo, hi), dd.clone()]);
            f.push(
                "prmt.b32",
                [lo.into(), lo.into(), lo.into(), Operand::Sym(&"0x0123")],
            );
            f.push(
                "prmt.b32",
                [hi.into(), hi.into(), hi.into(), Operand::Sym(&"0x0123")],
            );
            f.push("mov.b64", [dd, Operand::Vec2(hi, lo)]);
        }
    }
}

/// The PTX opcode of an atomic: `red.relaxed` (no fetch), `atom.acq_rel` (fetch), or
/// `atom.relaxed` (fetch, [`JitOptions::relaxed_atomics`]), the scope (`.sys`/`.gpu`/`.cta`),
/// `.global` or generic, the operation and width; from a table built once, so that IR
/// opcodes stay `&'static str`.
fn atomic_opcode(
    fetch: bool,
    relaxed: bool,
    scope: &str,
    global: bool,
    op: AtomicOp,
    w32: bool,
) -> &'static str {
    const SCOPES: [&str; 3] = [".sys", ".gpu", ".cta"];
    const OPS: [AtomicOp; 6] = [
        AtomicOp::Add,
        AtomicOp::Or,
        AtomicOp::And,
        AtomicOp::Xor,
        AtomicOp::Xchg,
        AtomicOp::Cmpxchg,
    ];
    static NAMES: LazyLock<Vec<String>> = LazyLock::new(|| {
        let mut v = Vec::with_capacity(3 * 3 * 2 * 6 * 2);
        for kind in ["red.relaxed", "atom.acq_rel", "atom.relaxed"] {
            for scope in SCOPES {
                for global in [false, true] {
                    for op in OPS {
                        for w32 in [false, true] {
                            let (bits, ty_add) = if w32 {
                                (".b32", ".u32")
                            } else {
                                (".b64", ".u64")
                            };
                            let opname = match op {
                                AtomicOp::Add => format!("add{ty_add}"),
                                AtomicOp::Or => format!("or{bits}"),
                                AtomicOp::And => format!("and{bits}"),
                                AtomicOp::Xor => format!("xor{bits}"),
                                AtomicOp::Xchg => format!("exch{bits}"),
                                AtomicOp::Cmpxchg => format!("cas{bits}"),
                            };
                            let space = if global { ".global" } else { "" };
                            v.push(format!("{kind}{scope}{space}.{opname}"));
                        }
                    }
                }
            }
        }
        v
    });
    let s = SCOPES.iter().position(|&x| x == scope).unwrap_or(0);
    let o = OPS.iter().position(|&x| x == op).unwrap_or(0);
    let kind = match (fetch, relaxed) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => 2,
    };
    let k = (((kind * 3 + s) * 2 + global as usize) * 6 + o) * 2 + w32 as usize;
    &NAMES[k]
}

/// An atomic read-modify-write. PTX atomics on local memory are undefined, and the eBPF
/// stack lives there: an access through r10 is lowered to a plain load/op/store (the stack
/// is private to the thread), and one through any other register checks `isspacep.local`
/// at run time and takes the plain path for stack addresses, `atom`/`red` otherwise.
///
/// With `aggregate`, an add without fetch to a map value is warp-aggregated
/// ([`warp_aggregated_add`]), on the SM's stripe of a striped map.
#[expect(
    clippy::too_many_arguments,
    reason = "one call site, all distinct operands"
)]
fn atomic(
    f: &mut Function,
    scope: &str,
    relaxed: bool,
    op: AtomicOp,
    size: Size,
    fetch: bool,
    base: Reg,
    off: i64,
    src: u8,
    space: Space,
    aggregate: Option<Aggregate>,
) {
    let w32 = size != Size::Dw;
    let mut addr = Operand::Addr(base, off as i32);
    let cls = if w32 { RegClass::B32 } else { RegClass::B64 };
    let (v, old) = if w32 {
        let v = f.reg(RegClass::B32);
        f.push("cvt.u32.u64", [v.into(), r(src).into()]);
        (v, f.reg(RegClass::B32))
    } else {
        (r(src), f.reg(RegClass::B64))
    };
    let cmp = if op == AtomicOp::Cmpxchg {
        Some(if w32 {
            let c = f.reg(RegClass::B32);
            f.push("cvt.u32.u64", [c.into(), r(0).into()]);
            c
        } else {
            r(0)
        })
    } else {
        None
    };
    let name =
        |fetching: bool, global: bool| atomic_opcode(fetching, relaxed, scope, global, op, w32);
    if space == Space::Global {
        // A map value: no stack check; `.global` lets ptxas emit a plain `RED`/`ATOM` (a
        // generic one also handles shared-window addresses, with a fallback loop).
        let g = f.reg(RegClass::B64);
        f.push("cvta.to.global.u64", [g.into(), base.into()]);
        let addr = Operand::Addr(g, off as i32);
        if let Some(agg) = aggregate.filter(|_| !fetch && op == AtomicOp::Add) {
            warp_aggregated_add(
                f,
                name(false, true),
                g,
                off,
                v,
                w32,
                agg.stripes,
                agg.defer,
                agg.uniform_value,
            );
        } else if !fetch {
            f.push(name(false, true), [addr, v.into()]);
        } else if let Some(c) = cmp {
            f.push(name(true, true), [old.into(), addr, c.into(), v.into()]);
        } else {
            f.push(name(true, true), [old.into(), addr, v.into()]);
        }
    } else {
        let on_stack = matches!(space, Space::Stack(_));
        let (ld, st) = match space {
            Space::Stack(depth)
                if depth as i64 + off >= 0 && off + if w32 { 4 } else { 8 } <= 0 =>
            {
                addr = Operand::SymAddr(&"stack", (depth as i64 + off) as i32);
                (
                    wsel(w32, "ld.local.u32", "ld.local.u64"),
                    wsel(w32, "st.local.u32", "st.local.u64"),
                )
            }
            _ => (wsel(w32, "ld.u32", "ld.u64"), wsel(w32, "st.u32", "st.u64")),
        };
        let done = f.label();
        let global = f.label();
        if !on_stack {
            let a = if off == 0 {
                base
            } else {
                let a = f.reg(RegClass::B64);
                f.push("add.s64", [a.into(), base.into(), imm(off)]);
                a
            };
            let p = f.reg(RegClass::Pred);
            f.push("isspacep.local", [p.into(), a.into()]);
            f.bra(global, Some((p, false)));
        }
        // Plain path: the thread's own stack.
        f.push(ld, [old.into(), addr.clone()]);
        let new = f.reg(cls);
        let (o, n, vv): (Operand, Operand, Operand) = (old.into(), new.into(), v.into());
        match op {
            AtomicOp::Add => f.push(wsel(w32, "add.s32", "add.s64"), [n, o, vv]),
            AtomicOp::Or => f.push(wsel(w32, "or.b32", "or.b64"), [n, o, vv]),
            AtomicOp::And => f.push(wsel(w32, "and.b32", "and.b64"), [n, o, vv]),
            AtomicOp::Xor => f.push(wsel(w32, "xor.b32", "xor.b64"), [n, o, vv]),
            AtomicOp::Xchg => f.push(wsel(w32, "mov.b32", "mov.b64"), [n, vv]),
            AtomicOp::Cmpxchg => {
                let c = cmp.expect("cmpxchg has a comparand");
                let p = f.reg(RegClass::Pred);
                f.push(
                    wsel(w32, "setp.eq.b32", "setp.eq.b64"),
                    [p.into(), o.clone(), c.into()],
                );
                f.push(wsel(w32, "selp.b32", "selp.b64"), [n, vv, o, p.into()]);
            }
        }
        f.push(st, [addr.clone(), new.into()]);
        if !on_stack {
            f.bra(done, None);
            f.place(global);
            if !fetch {
                f.push(name(false, false), [addr, v.into()]);
            } else if let Some(c) = cmp {
                f.push(name(true, false), [old.into(), addr, c.into(), v.into()]);
            } else {
                f.push(name(true, false), [old.into(), addr, v.into()]);
            }
            f.place(done);
        }
    }
    if fetch {
        let dst = if op == AtomicOp::Cmpxchg { 0 } else { src };
        if w32 {
            f.push("cvt.u64.u32", [r(dst).into(), old.into()]);
        } else {
            f.push("mov.b64", [r(dst).into(), old.into()]);
        }
    }
}

/// `red.add [g+off], v` from every active lane, as one `red` per group of lanes that add
/// the same value to the same address: the group's highest lane adds `v × group size`
/// (a shuffle-and-vote test for the one-group case, else `match.any` on the address and on
/// the value, sm_70+). Lanes whose group holds different
/// values each add their own, as before. Counting probes (every thread adds 1 to one
/// counter) pay one atomic per warp instead of 32; the sum is the same, and a `red` returns
/// nothing, so no lane can tell.
#[allow(clippy::too_many_arguments)]
fn warp_aggregated_add(
    f: &mut Function,
    red: &'static str,
    g: Reg,
    off: i64,
    v: Reg,
    w32: bool,
    stripes: Option<(u32, u64)>,
    defer: bool,
    uniform_value: bool,
) {
    let a = f.reg(RegClass::B64);
    f.push("add.s64", [a.into(), g.into(), imm(off)]);
    let (at, vt) = (reg_text(a), reg_text(v));
    if defer {
        // A caller inlining the body may keep the sum in registers instead (see
        // `JitOptions::defer_adds`): what lies between the markers is the eager form, and
        // the marker names the address before the stripe is added (the caller adds it when
        // it writes the sum out).
        let (n, stride) = stripes.unwrap_or((1, 0));
        f.body.push(Stmt::Raw(format!(
            "\t// @bt_defer_begin {at} {vt} {} {red} {n} {stride}",
            if w32 { 32 } else { 64 }
        )));
    }
    if let Some((n, stride)) = stripes {
        // The SM's stripe: all lanes of a warp share it.
        let sm = f.reg(RegClass::B32);
        f.push("mov.u32", [sm.into(), Operand::Sym(&"%smid")]);
        f.push("and.b32", [sm.into(), sm.into(), imm(n as i64 - 1)]);
        let o = f.reg(RegClass::B64);
        f.push("mul.wide.u32", [o.into(), sm.into(), imm(stride as i64)]);
        f.push("add.s64", [a.into(), a.into(), o.into()]);
    }
    let agg = aggregated_add_text(red, &at, &vt, w32, uniform_value);
    // A block that reads `a` and `v` and writes nothing of the function's (its result
    // register is a fresh one nobody reads), so the printer's ctx analysis sees through it.
    let text = if defer {
        format!("{agg}\n\t// @bt_defer_end\n")
    } else {
        format!("{agg}\n")
    };
    let unused = f.reg(RegClass::B64);
    f.body.push(Stmt::Inline {
        text,
        args: vec![a, v],
        ret: unused,
    });
}

/// The text of a warp-aggregated `red` of `val` (a `.b32` register when `w32`, else `.b64`)
/// to `[addr]` from every active lane, as a `{ }` block with its own registers and labels.
///
/// Fast path, the common case of a counting probe: every active lane adds the same value
/// to the same address (checked with two shuffles and a vote, far cheaper than
/// `match.any`); the highest lane adds it times the lane count. Otherwise lanes group by
/// `match.any` on address and value.
/// With `uniform_value` (a constant) the value needs no check.
pub fn aggregated_add_text(
    red: &str,
    addr: &str,
    val: &str,
    w32: bool,
    uniform_value: bool,
) -> String {
    let (at, vt) = (addr, val);
    let (vb, mul, total) = if w32 {
        ("b32", "mul.lo.s32 %wr7, %wr7, ", "%wr7")
    } else {
        (
            "b64",
            "cvt.u64.u32 %wd2, %wr7;\n\tmul.lo.s64 %wd2, %wd2, ",
            "%wd2",
        )
    };
    let match_v = if uniform_value {
        "mov.b32 %wr3, %wr2;".to_string()
    } else {
        format!("match.any.sync.{vb} %wr3, {vt}, %wr0;")
    };
    let same_v = if uniform_value {
        "setp.eq.u32 %wp1, %wr0, %wr0;".to_string()
    } else if w32 {
        format!("shfl.sync.idx.b32 %wr4, {vt}, %wr1, 31, %wr0;\n\tsetp.eq.u32 %wp1, %wr4, {vt};")
    } else {
        format!(
            "mov.b64 {{%wr4, %wr5}}, {vt};\n\tshfl.sync.idx.b32 %wr4, %wr4, %wr1, 31, %wr0;\n\tshfl.sync.idx.b32 %wr5, %wr5, %wr1, 31, %wr0;\n\tmov.b64 %wd1, {{%wr4, %wr5}};\n\tsetp.eq.u64 %wp1, %wd1, {vt};"
        )
    };
    format!(
        "\t{{ // warp-aggregated add
\t.reg .pred %wp<4>;
\t.reg .b32 %wr<8>;
\t.reg .b64 %wd<3>;
\tactivemask.b32 %wr0;
\tbfind.u32 %wr1, %wr0;
\tmov.b64 {{%wr2, %wr3}}, {at};
\tshfl.sync.idx.b32 %wr2, %wr2, %wr1, 31, %wr0;
\tshfl.sync.idx.b32 %wr3, %wr3, %wr1, 31, %wr0;
\tmov.b64 %wd0, {{%wr2, %wr3}};
\tsetp.eq.u64 %wp0, %wd0, {at};
\t{same_v}
\tand.pred %wp0, %wp0, %wp1;
\tvote.sync.all.pred %wp2, %wp0, %wr0;
\t@!%wp2 bra $Lwslow;
\tmov.u32 %wr6, %laneid;
\tsetp.eq.u32 %wp3, %wr6, %wr1;
\tpopc.b32 %wr7, %wr0;
\t{mul}{vt};
\t@%wp3 {red} [{at}], {total};
\tbra.uni $Lwend;
$Lwslow:
\tmatch.any.sync.b64 %wr2, {at}, %wr0;
\t{match_v}
\tand.b32 %wr3, %wr3, %wr2;
\tsetp.eq.b32 %wp0, %wr3, %wr2;
\tbfind.u32 %wr4, %wr2;
\tmov.u32 %wr5, %laneid;
\tsetp.eq.and.u32 %wp1, %wr5, %wr4, %wp0;
\tpopc.b32 %wr7, %wr2;
\t{mul}{vt};
\t@%wp1 {red} [{at}], {total};
\t@!%wp0 {red} [{at}], {vt};
$Lwend:
\t}}"
    )
}

/// A register's name as the printer writes it.
fn reg_text(r: Reg) -> String {
    let p = match r.class() {
        RegClass::Pred => "%p",
        RegClass::B16 => "%rs",
        RegClass::B32 => "%r",
        RegClass::B64 => "%rd",
    };
    format!("{p}{}", r.n())
}

fn cond_pred(
    f: &mut Function,
    cond: JmpCond,
    width: Width,
    d: Reg,
    s: Src,
    src: u8,
    imm32: i32,
) -> Reg {
    let w32 = width == Width::W32;
    let (a, b): (Operand, Operand) = if w32 {
        let a = f.reg(RegClass::B32);
        f.push("cvt.u32.u64", [a.into(), d.into()]);
        let b = match s {
            Src::Imm => imm(imm32 as i64),
            Src::Reg => {
                let b = f.reg(RegClass::B32);
                f.push("cvt.u32.u64", [b.into(), r(src).into()]);
                b.into()
            }
        };
        (a.into(), b)
    } else {
        let b = match s {
            Src::Imm => imm(imm32 as i64),
            Src::Reg => r(src).into(),
        };
        (d.into(), b)
    };
    let p = f.reg(RegClass::Pred);
    let op = match cond {
        JmpCond::Eq => wsel(w32, "setp.eq.u32", "setp.eq.u64"),
        JmpCond::Ne => wsel(w32, "setp.ne.u32", "setp.ne.u64"),
        JmpCond::Gt => wsel(w32, "setp.gt.u32", "setp.gt.u64"),
        JmpCond::Ge => wsel(w32, "setp.ge.u32", "setp.ge.u64"),
        JmpCond::Lt => wsel(w32, "setp.lt.u32", "setp.lt.u64"),
        JmpCond::Le => wsel(w32, "setp.le.u32", "setp.le.u64"),
        JmpCond::Sgt => wsel(w32, "setp.gt.s32", "setp.gt.s64"),
        JmpCond::Sge => wsel(w32, "setp.ge.s32", "setp.ge.s64"),
        JmpCond::Slt => wsel(w32, "setp.lt.s32", "setp.lt.s64"),
        JmpCond::Sle => wsel(w32, "setp.le.s32", "setp.le.s64"),
        JmpCond::Set => {
            let cls = if w32 { RegClass::B32 } else { RegClass::B64 };
            let t = f.reg(cls);
            f.push(wsel(w32, "and.b32", "and.b64"), [t.into(), a, b]);
            f.push(
                wsel(w32, "setp.ne.u32", "setp.ne.u64"),
                [p.into(), t.into(), imm(0)],
            );
            return p;
        }
    };
    f.push(op, [p.into(), a, b]);
    p
}

fn call_helper(
    cx: &mut Ctx,
    f: &mut Function,
    pc: usize,
    id: i32,
    known: &Known,
) -> Result<(), CompileError> {
    let Some(def) = prelude::def(id) else {
        return Err(cx.err(pc, format!("helper {id} is not available on the GPU")));
    };
    let args: Vec<Reg> = (1..=def.nargs).map(r).collect();
    if def.inline_exit {
        // 507: end the thread; the entry wrapper stored result 0 before the call.
        cx.ends_thread = true;
        f.push("exit", []);
        return Ok(());
    }
    // The key argument of map helpers, when it is a known place on the stack.
    let site = prelude::Site {
        key: known.stack[2]
            .map(|o| cx.depth as i64 + o)
            .filter(|&o| o >= 0 && o < cx.depth as i64 && !cx.stack_generic),
        frame: cx.depth,
    };
    if def.map_kinds.is_empty() {
        helper_site(cx, f, prelude::Use { id, map: None }, args, site);
        return Ok(());
    }
    let candidates: Vec<usize> = match known.map[1] {
        Some(i) => vec![i],
        None => (0..cx.prog.maps.len())
            .filter(|&i| def.map_kinds.contains(&cx.opts.maps[i].kind))
            .collect(),
    };
    let candidates: Vec<usize> = candidates
        .into_iter()
        .filter(|&i| def.map_kinds.contains(&cx.opts.maps[i].kind))
        .collect();
    if candidates.is_empty() {
        return Err(cx.err(
            pc,
            format!(
                "helper {} needs a map of kind {:?}, the program has none bound",
                def.name, def.map_kinds
            ),
        ));
    }
    if candidates.len() == 1 && known.map[1].is_some() {
        let i = candidates[0];
        helper_site(cx, f, prelude::Use { id, map: Some(i) }, args, site);
        return Ok(());
    }
    // Compare chain on r1 (the map's base address); an unknown map gives -EINVAL.
    let done = f.label();
    for i in candidates {
        let next = f.label();
        let p = f.reg(RegClass::Pred);
        f.push(
            "setp.ne.u64",
            [p.into(), r(1).into(), imm(cx.opts.maps[i].base_addr as i64)],
        );
        f.bra(next, Some((p, true)));
        helper_site(cx, f, prelude::Use { id, map: Some(i) }, args.clone(), site);
        f.bra(done, None);
        f.place(next);
    }
    f.push("mov.b64", [r(0).into(), imm(-22)]);
    f.place(done);
    Ok(())
}

/// `callx r<d>` whose id the lowering does not know (the verifier proved a known helper id
/// on every path, but it may differ by path): a compare chain on the register, each arm the
/// static call of one helper the GPU can run here (map helpers: when a map of their kind is
/// bound); any other value traps (a verified program has none).
fn callx_chain(
    cx: &mut Ctx,
    f: &mut Function,
    pc: usize,
    d: u8,
    known: &Known,
) -> Result<(), CompileError> {
    let ids: Vec<i32> = prelude::HELPERS
        .iter()
        .filter(|h| {
            h.map_kinds.is_empty()
                || (0..cx.prog.maps.len()).any(|i| h.map_kinds.contains(&cx.opts.maps[i].kind))
        })
        .map(|h| h.id)
        .collect();
    let done = f.label();
    for id in ids {
        let next = f.label();
        let p = f.reg(RegClass::Pred);
        f.push("setp.ne.u64", [p.into(), r(d).into(), imm(id as i64)]);
        f.bra(next, Some((p, true)));
        call_helper(cx, f, pc, id, known)?;
        f.bra(done, None);
        f.place(next);
    }
    f.push("trap", []);
    f.place(done);
    Ok(())
}

/// One call site of helper use `u`: its body inlined (within [`INLINE_BUDGET`]), else a call
/// of its `.func`.
fn helper_site(
    cx: &mut Ctx,
    f: &mut Function,
    u: prelude::Use,
    args: Vec<Reg>,
    site: prelude::Site,
) {
    if cx.inlined_bytes < INLINE_BUDGET
        && let Some(text) = prelude::inline_block(u, cx.opts, site)
        && cx.inlined_bytes + text.len() <= INLINE_BUDGET
    {
        cx.inlined_bytes += text.len();
        cx.inlined.insert(u);
        f.body.push(Stmt::Inline {
            text,
            args,
            ret: r(0),
        });
        return;
    }
    cx.used.insert(u);
    f.call(prelude::func_name(u.id, u.map), args, Some(r(0)));
}

/// The stand-alone kernel: one thread per record, running the program's body inline
/// (see [`crate::ptx::InlineBody`]).
fn entry_wrapper(name: &str, main: &Function) -> Function {
    let mut f = Function::new(name, FuncKind::Entry);
    f.continue_numbering(main);
    f.visible = true;
    f.params = [
        "in_base", "in_size", "out_base", "out_size", "n", "arg0", "arg1", "arg2", "arg3",
        "results",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    f.locals.push(LocalArray {
        name: "jobctx".into(),
        align: 16,
        size: JobCtx::SIZE as u32,
    });
    f.locals.extend(main.locals.iter().cloned());
    let p = |f: &mut Function, n: &'static str| {
        const PARAMS: [&str; 10] = [
            "in_base", "in_size", "out_base", "out_size", "n", "arg0", "arg1", "arg2", "arg3",
            "results",
        ];
        static NAMES: [&str; 10] = PARAMS;
        let k = PARAMS
            .iter()
            .position(|&q| q == n)
            .expect("an entry parameter");
        let t = f.reg(RegClass::B64);
        f.push("ld.param.u64", [t.into(), Operand::SymAddr(&NAMES[k], 0)]);
        t
    };
    let (tid, ntid, ctaid) = (
        f.reg(RegClass::B32),
        f.reg(RegClass::B32),
        f.reg(RegClass::B32),
    );
    f.push("mov.u32", [tid.into(), Operand::Sym(&"%tid.x")]);
    f.push("mov.u32", [ntid.into(), Operand::Sym(&"%ntid.x")]);
    f.push("mov.u32", [ctaid.into(), Operand::Sym(&"%ctaid.x")]);
    let i = f.reg(RegClass::B64);
    f.push("mul.wide.u32", [i.into(), ctaid.into(), ntid.into()]);
    let t = f.reg(RegClass::B64);
    f.push("cvt.u64.u32", [t.into(), tid.into()]);
    f.push("add.s64", [i.into(), i.into(), t.into()]);
    let n = p(&mut f, "n");
    let pr = f.reg(RegClass::Pred);
    f.push("setp.ge.u64", [pr.into(), i.into(), n.into()]);
    f.push_if(pr, true, "ret", []);
    let vals: Vec<Reg> = ["in_base", "in_size", "out_base", "out_size"]
        .into_iter()
        .map(|q| p(&mut f, q))
        .collect();
    let args = ["arg0", "arg1", "arg2", "arg3"].map(|q| p(&mut f, q));
    let fields = ctx_words(&mut f, i, [vals[0], vals[1], vals[2], vals[3]], n, args);
    let res = p(&mut f, "results");
    let no_res = f.reg(RegClass::Pred);
    f.push("setp.eq.u64", [no_res.into(), res.into(), imm(0)]);
    let slot = f.reg(RegClass::B64);
    f.push("mad.lo.s64", [slot.into(), i.into(), imm(8), res.into()]);
    let zero = f.reg(RegClass::B64);
    f.push("mov.b64", [zero.into(), imm(0)]);
    // Result 0 first, for programs that end the thread with helper 507.
    f.push_if(
        no_res,
        false,
        "st.u64",
        [Operand::Addr(slot, 0), zero.into()],
    );
    let ctx = f.reg(RegClass::B64);
    f.push("cvta.local.u64", [ctx.into(), Operand::Sym(&"jobctx")]);
    f.body.insert(
        0,
        Stmt::Raw("\t// one thread per record; the program's body follows inline".into()),
    );
    f.inline = Some(crate::ptx::InlineBody {
        func: 0,
        ctx,
        fields,
        slot,
        no_res,
        looped: None,
        generic: false,
    });
    f
}

/// The ten job-ctx words of record `i` (`JobCtx` order) in registers, also stored to the
/// `jobctx` local array (dropped by the printer when nothing reads the ctx pointer):
/// `bufs` = in_base, in_size, out_base, out_size.
fn ctx_words(f: &mut Function, i: Reg, bufs: [Reg; 4], n: Reg, args: [Reg; 4]) -> [Reg; 10] {
    let st = |f: &mut Function, off: i64, v: Reg| {
        f.push(
            "st.local.u64",
            [Operand::SymAddr(&"jobctx", off as i32), v.into()],
        );
    };
    let mut fields = [i; 10];
    for (k, off) in [JobCtx::DATA, JobCtx::OUT].into_iter().enumerate() {
        let (b, sz) = (bufs[2 * k], bufs[2 * k + 1]);
        let start = f.reg(RegClass::B64);
        f.push("mad.lo.s64", [start.into(), i.into(), sz.into(), b.into()]);
        let endp = f.reg(RegClass::B64);
        f.push("add.s64", [endp.into(), start.into(), sz.into()]);
        st(f, off, start);
        st(f, off + 8, endp);
        fields[2 * k] = start;
        fields[2 * k + 1] = endp;
    }
    st(f, JobCtx::INDEX, i);
    st(f, JobCtx::N, n);
    fields[4] = i;
    fields[5] = n;
    for (k, a) in args.into_iter().enumerate() {
        st(f, JobCtx::ARGS + 8 * k as i64, a);
        fields[6 + k] = a;
    }
    fields
}

/// A visible `.func (.param .b64 ret) name(params…)` that runs `main`'s body inline (the
/// chunk loop and the one-record run): its `jobctx` and `main`'s local arrays, and each
/// parameter read into a register (returned in order).
fn func_wrapper(
    name: &str,
    main: &Function,
    params: &'static [&'static str],
) -> (Function, Vec<Reg>) {
    let mut f = Function::new(name, FuncKind::Func);
    f.continue_numbering(main);
    f.visible = true;
    f.ret = Some("ret".into());
    f.params = params.iter().map(|s| s.to_string()).collect();
    f.locals.push(LocalArray {
        name: "jobctx".into(),
        align: 16,
        size: JobCtx::SIZE as u32,
    });
    f.locals.extend(main.locals.iter().cloned());
    let vals = params
        .iter()
        .map(|p| {
            let t = f.reg(RegClass::B64);
            f.push("ld.param.b64", [t.into(), Operand::SymAddr(p, 0)]);
            t
        })
        .collect();
    (f, vals)
}

/// The chunk loop of [`crate::JitOptions::chunk_loop`]: `.func (.param .b64 ret)
/// bpf_loop_<name>(in_base, in_size, out_base, out_size, n, arg0..arg3, results, first, end,
/// stride)`. Like the entry it runs the body inline with the ctx words in registers; the
/// record index comes from the loop instead of the thread id, every exit of the body goes
/// to the loop's next step, and the last record's r0 is returned.
fn loop_wrapper(name: &str, main: &Function) -> Function {
    const PARAMS: [&str; 13] = [
        "in_base", "in_size", "out_base", "out_size", "n", "arg0", "arg1", "arg2", "arg3",
        "results", "first", "end", "stride",
    ];
    static NAMES: [&str; 13] = PARAMS;
    let (mut f, vals) = func_wrapper(name, main, &NAMES);
    let (in_base, in_size, out_base, out_size, n) = (vals[0], vals[1], vals[2], vals[3], vals[4]);
    let (res, first, end, stride) = (vals[9], vals[10], vals[11], vals[12]);
    let i = f.reg(RegClass::B64);
    f.push("mov.b64", [i.into(), first.into()]);
    let last = f.reg(RegClass::B64);
    f.push("mov.b64", [last.into(), imm(0)]);
    let no_res = f.reg(RegClass::Pred);
    f.push("setp.eq.u64", [no_res.into(), res.into(), imm(0)]);
    let head = f.label();
    let next = f.label();
    let done = f.label();
    f.place(head);
    let pr = f.reg(RegClass::Pred);
    f.push("setp.ge.u64", [pr.into(), i.into(), end.into()]);
    f.bra(done, Some((pr, true)));
    let args = [vals[5], vals[6], vals[7], vals[8]];
    let fields = ctx_words(&mut f, i, [in_base, in_size, out_base, out_size], n, args);
    let slot = f.reg(RegClass::B64);
    f.push("mad.lo.s64", [slot.into(), i.into(), imm(8), res.into()]);
    let ctx = f.reg(RegClass::B64);
    f.push("cvta.local.u64", [ctx.into(), Operand::Sym(&"jobctx")]);
    f.body.insert(
        0,
        Stmt::Raw(
            "\t// records first, first + stride, ... < end; the program's body follows inline"
                .into(),
        ),
    );
    // After the body: keep r0, step, loop; at the end return the last r0.
    let mut tail = Function::new("tail", FuncKind::Func);
    tail.place(next);
    tail.push("mov.b64", [last.into(), Function::ebpf_reg(0).into()]);
    tail.push("add.s64", [i.into(), i.into(), stride.into()]);
    // The branch back is made in `f`, so that `f` knows its head label is a target (the
    // unused-label pass keeps it), and moved to the tail.
    f.bra(head, None);
    tail.body.extend(f.body.pop());
    tail.place(done);
    tail.push("st.param.b64", [Operand::SymAddr(&"ret", 0), last.into()]);
    tail.push("ret", []);
    f.inline = Some(crate::ptx::InlineBody {
        func: 0,
        ctx,
        fields,
        slot,
        no_res,
        looped: Some(crate::ptx::LoopTail {
            next,
            tail: tail.body,
        }),
        generic: false,
    });
    f
}

/// The one-record run of [`crate::JitOptions::chunk_loop`]: `.func (.param .b64 ret)
/// bpf_one_<name>(in_base, in_size, out_base, out_size, arg0..arg3)` runs record 0 of a
/// one-record job (index 0, n 1) with the body inline and the ctx words in registers, like
/// the chunk loop, and returns r0. Its job-buffer accesses are generic (the chunk loop's
/// are `.global`): a persistent runtime may pass an input in its shared memory. One call
/// with the ctx in registers, where [`JitOptions`]'s `.func` takes a pointer to it in
/// local memory.
fn one_wrapper(name: &str, main: &Function) -> Function {
    const PARAMS: [&str; 8] = [
        "in_base", "in_size", "out_base", "out_size", "arg0", "arg1", "arg2", "arg3",
    ];
    static NAMES: [&str; 8] = PARAMS;
    let (mut f, vals) = func_wrapper(name, main, &NAMES);
    let konst = |f: &mut Function, v: i64| {
        let t = f.reg(RegClass::B64);
        f.push("mov.b64", [t.into(), imm(v)]);
        t
    };
    let (i, n) = (konst(&mut f, 0), konst(&mut f, 1));
    let args = [vals[4], vals[5], vals[6], vals[7]];
    let fields = ctx_words(&mut f, i, [vals[0], vals[1], vals[2], vals[3]], n, args);
    // No result array: the body's result store is never taken.
    let slot = konst(&mut f, 0);
    let no_res = f.reg(RegClass::Pred);
    f.push("setp.eq.u64", [no_res.into(), slot.into(), imm(0)]);
    let ctx = f.reg(RegClass::B64);
    f.push("cvta.local.u64", [ctx.into(), Operand::Sym(&"jobctx")]);
    f.body.insert(
        0,
        Stmt::Raw("\t// record 0 of a one-record job; the program's body follows inline".into()),
    );
    // Every exit of the body goes to `next`, which returns r0.
    let next = f.label();
    let mut tail = Function::new("tail", FuncKind::Func);
    tail.place(next);
    tail.push(
        "st.param.b64",
        [Operand::SymAddr(&"ret", 0), Function::ebpf_reg(0).into()],
    );
    tail.push("ret", []);
    f.inline = Some(crate::ptx::InlineBody {
        func: 0,
        ctx,
        fields,
        slot,
        no_res,
        looped: Some(crate::ptx::LoopTail {
            next,
            tail: tail.body,
        }),
        generic: true,
    });
    f
}
