//! Lowering: eBPF → Cranelift IR, one Cranelift function per eBPF function.
//!
//! ```text
//! Program.insns ──front end (lower::decode, call targets, run lengths)──▶ functions [start, end)
//!   each: fn(rt, r1..r5, r10) -> r0; r0..r9 Cranelift variables, r10 a parameter,
//!         a block per jump target, budget `left` a variable charged on every edge
//! ```
//!
//! | eBPF                       | Cranelift IR                                                    |
//! |----------------------------|-----------------------------------------------------------------|
//! | ALU64                      | `iadd` … on `i64`; shift counts are masked by the IR's semantics |
//! | ALU32                      | `ireduce.i32`, the op, `uextend.i64`                              |
//! | div / mod                  | divisor 0 and (signed) −1 replaced by 1, result `select`ed: `/0 → 0`, `%0 → dst`, `MIN / −1 = MIN`, `MIN % −1 = 0` |
//! | `movsx`, `ldsx`            | `ireduce` + `sextend`, `sload8/16/32`                              |
//! | `le` / `be` / `bswap`      | `band` (truncate), `bswap` on `i16`/`i32`/`i64`                    |
//! | `ld_imm64`                 | `iconst` of the value the interpreter's decoder resolved (map handles, global data addresses) |
//! | load / store at `r10 + k`, `k` in the frame | plain access, no check (the frame is always live) |
//! | other load / store         | trusting the verifier: plain access; else inline: the cached region (`Rt::hot_r/w`, in variables), then the live stack; else `jit_check` (the interpreter's region walk) |
//! | atomics                    | the check, an alignment check, `atomic_rmw` / `atomic_cas` (sequentially consistent) |
//! | jumps (64 and 32 bits)     | `icmp` + `brif`; each edge charges the budget                     |
//! | `call` helper              | `call_indirect` of `jit_helper` (the interpreter's helper table), then a status check; `map_lookup_elem` on an array map known from a `ld_imm64` in the same stretch is inline (`MapOps::array_layout`), the helper taking over for key pointers outside the cached region and the stack |
//! | `callx` helper             | the register's value range-checked (a fault past 32 signed bits), then the same `jit_helper` call with the id from the register |
//! | `call` local               | depth check, callee frame zeroed (`jit_zero_frame`), direct call with r1..r5 and `r10 − 512`, status check |
//! | `exit`                     | store the budget, `return r0`                                      |
//!
//! The instruction budget is charged exactly as the interpreter charges it (a straight-line
//! run at a time, on entry to the run), so `Env::last_insns` and "instruction limit
//! exceeded" agree between the two engines.

use super::runtime::{
    self, FRAME, OFF_HOT_R, OFF_HOT_W, OFF_LEFT, OFF_RET_PC, OFF_STACK_TOP, OFF_STATUS, fault,
};
use crate::CompileError;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I8, I16, I32, I64};
use cranelift_codegen::ir::{
    self, AbiParam, AtomicRmwOp, Block, BlockArg, InstBuilder, MemFlagsData, Signature, Value,
};
use cranelift_frontend::{FunctionBuilder, Variable};
use cranelift_module::FuncId;
use ebpf::interp::{MAX_FRAMES, Vm};
use ebpf::isa::{
    AluOp, AtomicOp, EndOp, FRAME_PTR, Insn, JmpCond, OpKind, Opcode, STACK_SIZE, Size, Src, Width,
};
use ebpf::program::Program;
use std::collections::HashMap;

/// One decoded slot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dec {
    pub op: Opcode,
    pub insn: Insn,
}

/// The front end's view of a program: decoded slots, function starts, run lengths.
pub(crate) struct Front {
    /// `None` for the second slot of a `ld_imm64`.
    pub dec: Vec<Option<Dec>>,
    /// Function entry pcs, sorted; the first is 0.
    pub starts: Vec<usize>,
    /// The interpreter's run lengths (`ebpf::interp` `decode::run_lengths`), one per slot
    /// plus the end-of-program sentinel.
    pub run_len: Vec<u64>,
    /// Whether the program may read stack memory: r10 used other than as the base of a
    /// store. When it may not, frames need not be zeroed (nothing can observe them).
    pub reads_stack: bool,
    /// Whether the program calls a helper.
    pub calls_helpers: bool,
}

/// Whether `d` may lead to a read of stack memory (see [`Front::reads_stack`]).
fn may_read_stack(d: &Dec) -> bool {
    let i = d.insn;
    match d.op.kind() {
        OpKind::Store { src, .. } => src == Src::Reg && i.src == FRAME_PTR,
        OpKind::Alu { src, .. } | OpKind::Jmp { src, .. } => src == Src::Reg && i.src == FRAME_PTR,
        OpKind::Load { .. } => i.src == FRAME_PTR,
        OpKind::Atomic { .. } => i.dst == FRAME_PTR || i.src == FRAME_PTR,
        OpKind::End { .. }
        | OpKind::Ld64(_)
        | OpKind::Ja
        | OpKind::JaLong
        | OpKind::Call
        | OpKind::Callx
        | OpKind::CallLocal
        | OpKind::CallKfunc
        | OpKind::Exit => false,
    }
}

fn ends_run(k: OpKind) -> bool {
    matches!(
        k,
        OpKind::Ja | OpKind::JaLong | OpKind::Jmp { .. } | OpKind::CallLocal | OpKind::Exit
    )
}

/// Decodes `prog` with the PTX back end's decoder ([`crate::lower::decode`]).
pub(crate) fn front(prog: &Program) -> Result<Front, CompileError> {
    let n = prog.insns.len();
    if n == 0 {
        return Err(CompileError::Empty {
            name: prog.name.clone(),
        });
    }
    let mut dec = vec![None; n];
    let mut starts = vec![0usize];
    let mut pc = 0;
    while pc < n {
        let insn = prog.insns[pc];
        let op = crate::lower::decode(&insn).map_err(|e| unsupported(prog, pc, e.to_string()))?;
        dec[pc] = Some(Dec { op, insn });
        if op.kind() == OpKind::CallLocal {
            let t = pc as i64 + 1 + insn.imm as i64;
            if t < 0 || t >= n as i64 {
                return Err(unsupported(
                    prog,
                    pc,
                    "call target outside the program".into(),
                ));
            }
            starts.push(t as usize);
        }
        pc += if op.is_wide() { 2 } else { 1 };
    }
    starts.sort_unstable();
    starts.dedup();
    // Run lengths over n + 1 slots; the sentinel and second ld_imm64 slots end runs.
    let mut run_len = vec![1u64; n + 1];
    for pc in (0..n).rev() {
        let Some(d) = dec[pc] else { continue };
        if ends_run(d.op.kind()) {
            continue;
        }
        let next = pc + if d.op.is_wide() { 2 } else { 1 };
        run_len[pc] = run_len.get(next).map_or(1, |l| l + 1);
    }
    let reads_stack = dec.iter().flatten().any(may_read_stack);
    let calls_helpers = dec
        .iter()
        .flatten()
        .any(|d| matches!(d.op.kind(), OpKind::Call | OpKind::Callx));
    Ok(Front {
        dec,
        starts,
        run_len,
        reads_stack,
        calls_helpers,
    })
}

fn unsupported(prog: &Program, pc: usize, what: String) -> CompileError {
    CompileError::Unsupported {
        loc: prog.loc(pc),
        insn: if pc < prog.insns.len() {
            ebpf::asm::disasm_insn(&prog.insns, pc)
        } else {
            "<end of program>".to_string()
        },
        what,
    }
}

/// The signature of every generated function: `(rt, r1, r2, r3, r4, r5, r10) -> r0`.
pub(crate) fn func_signature(cc: cranelift_codegen::isa::CallConv) -> Signature {
    let mut s = Signature::new(cc);
    for _ in 0..7 {
        s.params.push(AbiParam::new(I64));
    }
    s.returns.push(AbiParam::new(I64));
    s
}

fn helper_signature(cc: cranelift_codegen::isa::CallConv) -> Signature {
    let mut s = Signature::new(cc);
    for _ in 0..8 {
        s.params.push(AbiParam::new(I64));
    }
    s.returns.push(AbiParam::new(I64));
    s
}

fn check_signature(cc: cranelift_codegen::isa::CallConv) -> Signature {
    let mut s = Signature::new(cc);
    for _ in 0..5 {
        s.params.push(AbiParam::new(I64));
    }
    s.returns.push(AbiParam::new(I64));
    s
}

fn fault_signature(cc: cranelift_codegen::isa::CallConv) -> Signature {
    let mut s = Signature::new(cc);
    for _ in 0..4 {
        s.params.push(AbiParam::new(I64));
    }
    s
}

/// Everything one function's lowering needs from outside.
pub(crate) struct FnEnv<'a> {
    pub prog: &'a Program,
    pub vm: &'a Vm,
    pub front: &'a Front,
    /// `[start, end)` of the function.
    pub start: usize,
    pub end: usize,
    /// References to all functions, by start pc, for local calls.
    pub ids: &'a HashMap<usize, ir::FuncRef>,
    pub call_conv: cranelift_codegen::isa::CallConv,
    /// The target's pointer width and such, for the frontend.
    pub frontend: cranelift_codegen::isa::TargetFrontendConfig,
    /// Whether this is the entry function (pc 0): it charges the first run and does not
    /// report its `exit` pc.
    pub entry: bool,
    /// Compile options (bounds checks, budget metering).
    pub opts: &'a super::CpuJitOptions,
}

struct Lower<'a, 'b> {
    e: &'a FnEnv<'a>,
    b: FunctionBuilder<'b>,
    regs: [Variable; 11],
    left: Variable,
    rt: Value,
    r10: Value,
    /// Start of the live stack (`r10 - 512`) and its length (`stack_top - lo`).
    lo: Value,
    span: Value,
    /// `Rt::hot_r` and `Rt::hot_w` (`[start, end)`), kept in variables.
    hot_r: [Variable; 2],
    hot_w: [Variable; 2],
    blocks: HashMap<usize, Block>,
    bail: Block,
    limit: Block,
    sig_helper: ir::SigRef,
    sig_check: ir::SigRef,
    sig_fault: ir::SigRef,
    sig_zero: ir::SigRef,
    /// The map whose handle each register holds, on the current straight-line stretch
    /// (from `ld_imm64 map_idx`; forgotten at labels, calls and writes).
    known_map: [Option<usize>; 11],
    /// Fault blocks to fill: `(block, kind, pc, address)`.
    pending: Vec<(Block, u64, usize, Option<Value>)>,
}

const TRUSTED: MemFlagsData = MemFlagsData::trusted();

fn mem_flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// Lowers the function `[e.start, e.end)` into `b` (fresh, with its signature set).
pub(crate) fn lower_function(e: &FnEnv, mut b: FunctionBuilder) -> Result<(), CompileError> {
    let regs: [Variable; 11] = std::array::from_fn(|_| b.declare_var(I64));
    let left = b.declare_var(I64);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let params = b.block_params(entry).to_vec();
    let rt = params[0];
    let r10 = params[6];
    let zero = b.ins().iconst(I64, 0);
    for (i, r) in regs.iter().enumerate() {
        let v = match i {
            1..=5 => params[i],
            10 => r10,
            _ => zero,
        };
        b.def_var(*r, v);
    }
    let l = b.ins().load(I64, TRUSTED, rt, OFF_LEFT);
    b.def_var(left, l);
    let lo = b.ins().iadd_imm_s(r10, -FRAME);
    let span = if e.opts.trust_verifier {
        // No check reads the live stack's bounds.
        b.ins().iconst(I64, 0)
    } else {
        let top = b.ins().load(I64, TRUSTED, rt, OFF_STACK_TOP);
        b.ins().isub(top, lo)
    };

    let bail = b.create_block();
    let limit = b.create_block();
    b.append_block_param(limit, I64);
    let cc = e.call_conv;
    let sig_helper = b.import_signature(helper_signature(cc));
    let sig_check = b.import_signature(check_signature(cc));
    let sig_fault = b.import_signature(fault_signature(cc));
    let sig_zero = b.import_signature({
        let mut s = Signature::new(cc);
        s.params.push(AbiParam::new(I64));
        s
    });

    // Blocks at jump targets.
    let mut blocks = HashMap::new();
    for pc in e.start..e.end {
        let Some(d) = e.front.dec[pc] else { continue };
        let t = match d.op.kind() {
            OpKind::Ja | OpKind::Jmp { .. } => pc as i64 + 1 + d.insn.off as i64,
            OpKind::JaLong => pc as i64 + 1 + d.insn.imm as i64,
            _ => continue,
        };
        if t < e.start as i64 || t >= e.end as i64 || e.front.dec[t as usize].is_none() {
            return Err(unsupported(
                e.prog,
                pc,
                format!(
                    "jump target {t} outside the function [{}, {})",
                    e.start, e.end
                ),
            ));
        }
        blocks.entry(t as usize).or_insert_with(|| b.create_block());
    }

    let hot_r = [b.declare_var(I64), b.declare_var(I64)];
    let hot_w = [b.declare_var(I64), b.declare_var(I64)];
    let mut lw = Lower {
        e,
        b,
        regs,
        left,
        rt,
        r10,
        lo,
        span,
        hot_r,
        hot_w,
        blocks,
        bail,
        limit,
        sig_helper,
        sig_check,
        sig_fault,
        sig_zero,
        known_map: [None; 11],
        pending: Vec::new(),
    };
    if !e.opts.trust_verifier {
        // (Trusting the verifier, no check reads the cached regions.)
        lw.reload_hot(true, true);
    }
    if e.entry {
        // The interpreter charges the first run before the first instruction.
        let c = e.front.run_len[0];
        let next = lw.b.create_block();
        lw.charge(c, 0, next);
        lw.enter(next);
    }
    lw.body()?;

    // Shared exits.
    for (blk, kind, pc, a) in std::mem::take(&mut lw.pending) {
        lw.enter(blk);
        let pcv = lw.b.ins().iconst(I64, pc as i64);
        lw.call_fault(kind, pcv, a);
        lw.b.ins().jump(lw.bail, &[]);
    }
    lw.enter(lw.bail);
    lw.b.set_cold_block(lw.bail);
    let z = lw.b.ins().iconst(I64, 0);
    lw.b.ins().return_(&[z]);
    lw.enter(lw.limit);
    lw.b.set_cold_block(lw.limit);
    let pcv = lw.b.block_params(lw.limit)[0];
    lw.call_fault(fault::LIMIT, pcv, None);
    let z = lw.b.ins().iconst(I64, 0);
    lw.b.ins().return_(&[z]);
    lw.b.seal_all_blocks();
    lw.b.finalize(e.frontend);
    Ok(())
}

impl Lower<'_, '_> {
    /// Switches to `blk` and seals it: every block but the jump targets gets all its
    /// predecessors before code is placed in it, and sealing early keeps the SSA
    /// construction of the budget and register variables linear.
    fn enter(&mut self, blk: Block) {
        self.b.switch_to_block(blk);
        self.b.seal_block(blk);
    }

    fn reg(&mut self, r: u8) -> Value {
        self.b.use_var(self.regs[r as usize])
    }

    fn set(&mut self, r: u8, v: Value) {
        self.known_map[r as usize] = None;
        self.b.def_var(self.regs[r as usize], v);
    }

    fn err(&self, pc: usize, what: impl Into<String>) -> CompileError {
        unsupported(self.e.prog, pc, what.into())
    }

    /// Charges `c` instructions (error at `pc` when the budget is short), then jumps to
    /// `to`. Terminates the current block. The budget is kept below 2^63, so "short" is
    /// "negative after the subtraction".
    fn charge(&mut self, c: u64, pc: usize, to: Block) {
        if !self.e.opts.meter_budget {
            self.b.ins().jump(to, &[]);
            return;
        }
        let l = self.b.use_var(self.left);
        let l2 = self.b.ins().iadd_imm_s(l, -(c as i64));
        self.b.def_var(self.left, l2);
        let short = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, l2, 0);
        let lim = self.fault_block(fault::LIMIT, pc, None);
        self.b.ins().brif(short, lim, &[], to, &[]);
    }

    /// [`Self::charge`] with the error location in a value.
    fn charge_dyn(&mut self, c: u64, pc: Value, to: Block) {
        if !self.e.opts.meter_budget {
            self.b.ins().jump(to, &[]);
            return;
        }
        let l = self.b.use_var(self.left);
        let l2 = self.b.ins().iadd_imm_s(l, -(c as i64));
        self.b.def_var(self.left, l2);
        let short = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, l2, 0);
        self.b
            .ins()
            .brif(short, self.limit, &[BlockArg::Value(pc)], to, &[]);
    }

    /// Reloads the cached regions from `rt` (after a call that may have changed them).
    fn reload_hot(&mut self, read: bool, write: bool) {
        for (on, off, vars) in [
            (read, OFF_HOT_R, self.hot_r),
            (write, OFF_HOT_W, self.hot_w),
        ] {
            if on {
                let s = self.b.ins().load(I64, TRUSTED, self.rt, off);
                let e = self.b.ins().load(I64, TRUSTED, self.rt, off + 8);
                self.b.def_var(vars[0], s);
                self.b.def_var(vars[1], e);
            }
        }
    }

    fn store_left(&mut self) {
        let l = self.b.use_var(self.left);
        self.b.ins().store(TRUSTED, l, self.rt, OFF_LEFT);
    }

    fn status_check(&mut self) {
        let st = self.b.ins().load(I64, TRUSTED, self.rt, OFF_STATUS);
        let cont = self.b.create_block();
        self.b.ins().brif(st, self.bail, &[], cont, &[]);
        self.enter(cont);
    }

    fn call_fault(&mut self, kind: u64, pc: Value, a: Option<Value>) {
        self.store_left();
        let f = self
            .b
            .ins()
            .iconst(I64, runtime::jit_fault as *const () as usize as i64);
        let k = self.b.ins().iconst(I64, kind as i64);
        let a = a.unwrap_or_else(|| self.b.ins().iconst(I64, 0));
        self.b
            .ins()
            .call_indirect(self.sig_fault, f, &[self.rt, k, pc, a]);
    }

    /// A cold block that records fault `kind` at `pc` and bails out (filled at the end).
    fn fault_block(&mut self, kind: u64, pc: usize, a: Option<Value>) -> Block {
        let blk = self.b.create_block();
        self.b.set_cold_block(blk);
        self.pending.push((blk, kind, pc, a));
        blk
    }

    /// Jumps to the block of `target` after charging its run, for a jump at `pc`.
    fn edge(&mut self, pc: usize, target: usize) {
        let to = self.blocks[&target];
        let c = self.e.front.run_len[target];
        self.charge(c, pc, to);
    }

    fn body(&mut self) -> Result<(), CompileError> {
        let e = self.e;
        let mut open = true;
        let mut pc = e.start;
        while pc < e.end {
            if let Some(&blk) = self.blocks.get(&pc) {
                if open {
                    self.b.ins().jump(blk, &[]);
                }
                self.b.switch_to_block(blk);
                self.known_map = [None; 11];
                open = true;
            }
            let Some(d) = e.front.dec[pc] else {
                pc += 1;
                continue;
            };
            let width = if d.op.is_wide() { 2 } else { 1 };
            if open {
                open = self.insn(pc, d)?;
            }
            pc += width;
        }
        if open {
            if e.end == e.prog.insns.len() {
                // Into the interpreter's end-of-program sentinel (already charged).
                let blk = self.fault_block(fault::FELL_OFF, e.end, None);
                self.b.ins().jump(blk, &[]);
            } else {
                return Err(self.err(e.end - 1, "falls through into the next function"));
            }
        }
        Ok(())
    }

    /// Lowers one instruction; returns whether control falls through to the next.
    fn insn(&mut self, pc: usize, d: Dec) -> Result<bool, CompileError> {
        let i = d.insn;
        match d.op.kind() {
            OpKind::Alu { op, width, src } => self.alu(i, op, width, src),
            OpKind::End { op, bits } => {
                let x = self.reg(i.dst);
                let v = match (op, bits) {
                    (EndOp::Le, 16) => self.b.ins().band_imm_u(x, 0xffff),
                    (EndOp::Le, 32) => self.b.ins().band_imm_u(x, 0xffff_ffff),
                    (EndOp::Le, _) => x,
                    (EndOp::Be | EndOp::Bswap, 16) => {
                        let h = self.b.ins().ireduce(I16, x);
                        let s = self.b.ins().bswap(h);
                        self.b.ins().uextend(I64, s)
                    }
                    (EndOp::Be | EndOp::Bswap, 32) => {
                        let h = self.b.ins().ireduce(I32, x);
                        let s = self.b.ins().bswap(h);
                        self.b.ins().uextend(I64, s)
                    }
                    (EndOp::Be | EndOp::Bswap, _) => self.b.ins().bswap(x),
                };
                self.set(i.dst, v);
            }
            OpKind::Ld64(_) => {
                let Some(v) = self.e.vm.ld_imm64_value(pc) else {
                    return Err(self.err(pc, "ld_imm64 the interpreter did not resolve"));
                };
                let c = self.b.ins().iconst(I64, v as i64);
                self.set(i.dst, c);
                if let OpKind::Ld64(ebpf::isa::Ld64Kind::MapIdx) = d.op.kind() {
                    self.known_map[i.dst as usize] = Some(i.imm as u32 as usize);
                }
            }
            OpKind::Load { size, sign_extend } => {
                let n = size.bytes() as i64;
                let a = self.address(i.src, i.off, n, false, pc);
                let f = mem_flags();
                let v = match (size, sign_extend) {
                    (Size::B, false) => self.b.ins().uload8(I64, f, a, 0),
                    (Size::H, false) => self.b.ins().uload16(I64, f, a, 0),
                    (Size::W, false) => self.b.ins().uload32(f, a, 0),
                    (Size::Dw, _) => self.b.ins().load(I64, f, a, 0),
                    (Size::B, true) => self.b.ins().sload8(I64, f, a, 0),
                    (Size::H, true) => self.b.ins().sload16(I64, f, a, 0),
                    (Size::W, true) => self.b.ins().sload32(f, a, 0),
                };
                self.set(i.dst, v);
            }
            OpKind::Store { size, src } => {
                let v = match src {
                    Src::Imm => self.b.ins().iconst(I64, i.imm as i64),
                    Src::Reg => self.reg(i.src),
                };
                let n = size.bytes() as i64;
                let a = self.address(i.dst, i.off, n, true, pc);
                let f = mem_flags();
                match size {
                    Size::B => self.b.ins().istore8(f, v, a, 0),
                    Size::H => self.b.ins().istore16(f, v, a, 0),
                    Size::W => self.b.ins().istore32(f, v, a, 0),
                    Size::Dw => self.b.ins().store(f, v, a, 0),
                };
            }
            OpKind::Atomic { op, size, fetch } => self.atomic(pc, i, op, size, fetch),
            OpKind::Ja => {
                self.edge(pc, (pc as i64 + 1 + i.off as i64) as usize);
                return Ok(false);
            }
            OpKind::JaLong => {
                self.edge(pc, (pc as i64 + 1 + i.imm as i64) as usize);
                return Ok(false);
            }
            OpKind::Jmp { cond, width, src } => {
                let c = self.cond(i, cond, width, src);
                let target = (pc as i64 + 1 + i.off as i64) as usize;
                if !self.e.opts.meter_budget {
                    let to = self.blocks[&target];
                    let next = self.b.create_block();
                    self.b.ins().brif(c, to, &[], next, &[]);
                    self.enter(next);
                    return Ok(true);
                }
                // Either way a new run starts: `ct` instructions at the target, `cf` at
                // pc + 1. The budget after the edge taken is computed branch-free,
                // `taken ? left - ct : left - cf` (a `select`); it is negative exactly when the
                // interpreter's charge for that edge fails. So one test, then a direct
                // branch: no edge blocks in loops, and no diamonds (which make the SSA
                // construction of the variables quadratic).
                let (ct, cf) = (self.e.front.run_len[target], self.e.front.run_len[pc + 1]);
                let to = self.blocks[&target];
                let next = self.b.create_block();
                let l = self.b.use_var(self.left);
                let lf = self.b.ins().iadd_imm_s(l, -(cf as i64));
                let l_new = if ct == cf {
                    lf
                } else {
                    let lt = self.b.ins().iadd_imm_s(l, -(ct as i64));
                    self.b.ins().select(c, lt, lf)
                };
                self.b.def_var(self.left, l_new);
                let short = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, l_new, 0);
                let lim = self.fault_block(fault::LIMIT, pc, None);
                let mid = self.b.create_block();
                self.b.ins().brif(short, lim, &[], mid, &[]);
                self.enter(mid);
                self.b.ins().brif(c, to, &[], next, &[]);
                self.enter(next);
            }
            OpKind::Call => self.helper(pc, i.imm),
            OpKind::Callx => self.callx(pc, i.dst),
            OpKind::CallLocal => self.call_local(pc, i)?,
            OpKind::CallKfunc => return Err(self.err(pc, "kfunc calls are not supported")),
            OpKind::Exit => {
                self.store_left();
                if !self.e.entry {
                    let p = self.b.ins().iconst(I64, pc as i64);
                    self.b.ins().store(TRUSTED, p, self.rt, OFF_RET_PC);
                }
                let r0 = self.reg(0);
                self.b.ins().return_(&[r0]);
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn alu(&mut self, i: Insn, op: AluOp, width: Width, src: Src) {
        let imm = i.imm as i64;
        let (x, y, ty) = match width {
            Width::W64 => {
                let x = self.reg(i.dst);
                let y = match src {
                    Src::Reg => self.reg(i.src),
                    Src::Imm => self.b.ins().iconst(I64, imm),
                };
                (x, y, I64)
            }
            Width::W32 => {
                let x = self.reg(i.dst);
                let x = self.b.ins().ireduce(I32, x);
                let y = match src {
                    Src::Reg => {
                        let y = self.reg(i.src);
                        self.b.ins().ireduce(I32, y)
                    }
                    Src::Imm => self.b.ins().iconst(I32, i.imm as u32 as i64),
                };
                (x, y, I32)
            }
        };
        let v = match op {
            AluOp::Add => self.b.ins().iadd(x, y),
            AluOp::Sub => self.b.ins().isub(x, y),
            AluOp::Mul => self.b.ins().imul(x, y),
            AluOp::Or => self.b.ins().bor(x, y),
            AluOp::And => self.b.ins().band(x, y),
            AluOp::Xor => self.b.ins().bxor(x, y),
            AluOp::Lsh => self.b.ins().ishl(x, y),
            AluOp::Rsh => self.b.ins().ushr(x, y),
            AluOp::Arsh => self.b.ins().sshr(x, y),
            AluOp::Neg => self.b.ins().ineg(x),
            AluOp::Mov => y,
            AluOp::Div | AluOp::Mod => self.udivmod(op == AluOp::Div, x, y, ty, src),
            AluOp::Sdiv | AluOp::Smod => self.sdivmod(op == AluOp::Sdiv, x, y, ty, src),
            AluOp::Movsx8 | AluOp::Movsx16 | AluOp::Movsx32 => {
                let s = self.reg(i.src);
                let from = match op {
                    AluOp::Movsx8 => I8,
                    AluOp::Movsx16 => I16,
                    _ => I32,
                };
                if from == ty {
                    // 32-bit movsx from 32 bits: a plain move (as the interpreter does).
                    self.b.ins().ireduce(I32, s)
                } else {
                    let s = self.b.ins().ireduce(from, s);
                    self.b.ins().sextend(ty, s)
                }
            }
        };
        let v = if ty == I32 {
            self.b.ins().uextend(I64, v)
        } else {
            v
        };
        self.set(i.dst, v);
    }

    /// Constant of `y` when it is an immediate operand.
    fn konst(&self, y: Value, src: Src) -> Option<i64> {
        if src != Src::Imm {
            return None;
        }
        let dfg = &self.b.func.dfg;
        match dfg.insts[dfg.value_def(y).inst()?] {
            ir::InstructionData::UnaryImm { imm, .. } => Some(imm.bits()),
            _ => None,
        }
    }

    fn udivmod(&mut self, div: bool, x: Value, y: Value, ty: ir::Type, src: Src) -> Value {
        if let Some(k) = self.konst(y, src) {
            return match (k, div) {
                (0, true) => self.b.ins().iconst(ty, 0),
                (0, false) => x,
                (_, true) => self.b.ins().udiv(x, y),
                (_, false) => self.b.ins().urem(x, y),
            };
        }
        let zero = self.b.ins().icmp_imm_s(IntCC::Equal, y, 0);
        let one = self.b.ins().iconst(ty, 1);
        let safe = self.b.ins().select(zero, one, y);
        if div {
            let q = self.b.ins().udiv(x, safe);
            let z = self.b.ins().iconst(ty, 0);
            self.b.ins().select(zero, z, q)
        } else {
            let r = self.b.ins().urem(x, safe);
            self.b.ins().select(zero, x, r)
        }
    }

    fn sdivmod(&mut self, div: bool, x: Value, y: Value, ty: ir::Type, src: Src) -> Value {
        let minus_one = if ty == I32 { 0xffff_ffff } else { -1 };
        if let Some(k) = self.konst(y, src) {
            return match (k, div) {
                (0, true) => self.b.ins().iconst(ty, 0),
                (0, false) => x,
                (k, true) if k == minus_one => self.b.ins().ineg(x),
                (k, false) if k == minus_one => self.b.ins().iconst(ty, 0),
                (_, true) => self.b.ins().sdiv(x, y),
                (_, false) => self.b.ins().srem(x, y),
            };
        }
        let is0 = self.b.ins().icmp_imm_s(IntCC::Equal, y, 0);
        let ism1 = self.b.ins().icmp_imm_s(IntCC::Equal, y, -1);
        let special = self.b.ins().bor(is0, ism1);
        let one = self.b.ins().iconst(ty, 1);
        let safe = self.b.ins().select(special, one, y);
        if div {
            let q = self.b.ins().sdiv(x, safe);
            let n = self.b.ins().ineg(x);
            let q = self.b.ins().select(ism1, n, q);
            let z = self.b.ins().iconst(ty, 0);
            self.b.ins().select(is0, z, q)
        } else {
            let r = self.b.ins().srem(x, safe);
            let z = self.b.ins().iconst(ty, 0);
            let r = self.b.ins().select(ism1, z, r);
            self.b.ins().select(is0, x, r)
        }
    }

    fn cond(&mut self, i: Insn, cond: JmpCond, width: Width, src: Src) -> Value {
        let x = self.reg(i.dst);
        let (x, y) = match width {
            Width::W64 => {
                let y = match src {
                    Src::Reg => self.reg(i.src),
                    Src::Imm => self.b.ins().iconst(I64, i.imm as i64),
                };
                (x, y)
            }
            Width::W32 => {
                let x = self.b.ins().ireduce(I32, x);
                let y = match src {
                    Src::Reg => {
                        let y = self.reg(i.src);
                        self.b.ins().ireduce(I32, y)
                    }
                    Src::Imm => self.b.ins().iconst(I32, i.imm as u32 as i64),
                };
                (x, y)
            }
        };
        let cc = match cond {
            JmpCond::Eq => IntCC::Equal,
            JmpCond::Ne => IntCC::NotEqual,
            JmpCond::Gt => IntCC::UnsignedGreaterThan,
            JmpCond::Ge => IntCC::UnsignedGreaterThanOrEqual,
            JmpCond::Lt => IntCC::UnsignedLessThan,
            JmpCond::Le => IntCC::UnsignedLessThanOrEqual,
            JmpCond::Sgt => IntCC::SignedGreaterThan,
            JmpCond::Sge => IntCC::SignedGreaterThanOrEqual,
            JmpCond::Slt => IntCC::SignedLessThan,
            JmpCond::Sle => IntCC::SignedLessThanOrEqual,
            JmpCond::Set => {
                let a = self.b.ins().band(x, y);
                return self.b.ins().icmp_imm_s(IntCC::NotEqual, a, 0);
            }
        };
        self.b.ins().icmp(cc, x, y)
    }

    /// The checked address `reg + off` for an access of `n` bytes.
    fn address(&mut self, reg: u8, off: i16, n: i64, write: bool, pc: usize) -> Value {
        let base = self.reg(reg);
        let a = self.b.ins().iadd_imm_s(base, off as i64);
        let off = off as i64;
        if reg == FRAME_PTR && off >= -(STACK_SIZE as i64) && off + n <= 0 {
            // Inside this function's frame, which is live while it runs.
            return a;
        }
        if self.e.opts.trust_verifier {
            // The verifier proved the access.
            return a;
        }
        let ok = self.b.create_block();
        let stack = self.b.create_block();
        let slow = self.b.create_block();
        self.b.set_cold_block(slow);
        // 1. the cached region: start <= a <= end - n
        let vars = if write { self.hot_w } else { self.hot_r };
        let start = self.b.use_var(vars[0]);
        let end = self.b.use_var(vars[1]);
        let c1 = self
            .b
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, a, start);
        let end_n = self.b.ins().iadd_imm_s(end, -n);
        let c2 = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, a, end_n);
        let both = self.b.ins().band(c1, c2);
        self.b.ins().brif(both, ok, &[], stack, &[]);
        // 2. the live stack: a - lo <= span - n
        self.enter(stack);
        let t = self.b.ins().isub(a, self.lo);
        let lim = self.b.ins().iadd_imm_s(self.span, -n);
        let in_stack = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, t, lim);
        self.b.ins().brif(in_stack, ok, &[], slow, &[]);
        // 3. the interpreter's region walk
        self.enter(slow);
        self.store_left();
        let f = self
            .b
            .ins()
            .iconst(I64, runtime::jit_check as *const () as usize as i64);
        let nw = self.b.ins().iconst(I64, n | if write { 256 } else { 0 });
        let pcv = self.b.ins().iconst(I64, pc as i64);
        let call = self
            .b
            .ins()
            .call_indirect(self.sig_check, f, &[self.rt, a, nw, self.r10, pcv]);
        let r = self.b.inst_results(call)[0];
        self.reload_hot(!write, write);
        self.b.ins().brif(r, ok, &[], self.bail, &[]);
        self.enter(ok);
        a
    }

    fn atomic(&mut self, pc: usize, i: Insn, op: AtomicOp, size: Size, fetch: bool) {
        let n = size.bytes() as i64;
        let a = self.address(i.dst, i.off, n, true, pc);
        let mis = self.b.ins().band_imm_u(a, n - 1);
        let kind = if n == 4 {
            fault::MISALIGNED4
        } else {
            fault::MISALIGNED8
        };
        let bad = self.fault_block(kind, pc, Some(a));
        let cont = self.b.create_block();
        self.b.ins().brif(mis, bad, &[], cont, &[]);
        self.enter(cont);
        let ty = if n == 4 { I32 } else { I64 };
        let narrow = |s: &mut Self, v: Value| {
            if ty == I32 {
                s.b.ins().ireduce(I32, v)
            } else {
                v
            }
        };
        let widen = |s: &mut Self, v: Value| {
            if ty == I32 {
                s.b.ins().uextend(I64, v)
            } else {
                v
            }
        };
        let v = self.reg(i.src);
        let v = narrow(self, v);
        let f = TRUSTED;
        let rmw = match op {
            AtomicOp::Add => Some(AtomicRmwOp::Add),
            AtomicOp::Or => Some(AtomicRmwOp::Or),
            AtomicOp::And => Some(AtomicRmwOp::And),
            AtomicOp::Xor => Some(AtomicRmwOp::Xor),
            AtomicOp::Xchg => Some(AtomicRmwOp::Xchg),
            AtomicOp::Cmpxchg => None,
        };
        match rmw {
            Some(r) => {
                let old = self.b.ins().atomic_rmw(ty, f, r, a, v);
                if fetch {
                    let old = widen(self, old);
                    self.set(i.src, old);
                }
            }
            None => {
                let exp = self.reg(0);
                let exp = narrow(self, exp);
                let old = self.b.ins().atomic_cas(f, a, exp, v);
                let old = widen(self, old);
                self.set(0, old);
            }
        }
    }

    fn helper(&mut self, pc: usize, id: i32) {
        if id == ebpf::helpers::MAP_LOOKUP_ELEM
            && let Some(m) = self.known_map[1]
            && let Some(layout) = self.e.vm.map_array_layout(m)
        {
            self.inline_array_lookup(pc, id, layout);
            self.known_map = [None; 11];
            return;
        }
        self.known_map = [None; 11];
        self.helper_call(pc, id);
    }

    /// `map_lookup_elem` on an array map known at compile time: the key read inline (when
    /// it lies in the cached region or the live stack), `base + key * stride` or NULL; any
    /// other key pointer goes to the helper, which reports the interpreter's error.
    fn inline_array_lookup(
        &mut self,
        pc: usize,
        id: i32,
        (base, stride, entries): (usize, usize, u32),
    ) {
        let key_ptr = self.reg(2);
        if self.e.opts.trust_verifier {
            // The verifier proved the key pointer (ArgType::MapKey).
            let key = self.b.ins().uload32(mem_flags(), key_ptr, 0);
            let inb = self
                .b
                .ins()
                .icmp_imm_u(IntCC::UnsignedLessThan, key, entries as i64);
            let off = self.b.ins().imul_imm_u(key, stride as i64);
            let addr = self.b.ins().iadd_imm_u(off, base as i64);
            let z = self.b.ins().iconst(I64, 0);
            let r0 = self.b.ins().select(inb, addr, z);
            self.set(0, r0);
            return;
        }
        let fast = self.b.create_block();
        let stack = self.b.create_block();
        let slow = self.b.create_block();
        let done = self.b.create_block();
        self.b.append_block_param(done, I64);
        self.b.set_cold_block(slow);
        let start = self.b.use_var(self.hot_r[0]);
        let end = self.b.use_var(self.hot_r[1]);
        let c1 = self
            .b
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, key_ptr, start);
        let end_n = self.b.ins().iadd_imm_s(end, -4);
        let c2 = self
            .b
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, key_ptr, end_n);
        let both = self.b.ins().band(c1, c2);
        self.b.ins().brif(both, fast, &[], stack, &[]);
        self.enter(stack);
        let t = self.b.ins().isub(key_ptr, self.lo);
        let lim = self.b.ins().iadd_imm_s(self.span, -4);
        let in_stack = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, t, lim);
        self.b.ins().brif(in_stack, fast, &[], slow, &[]);
        // fast: the key, then the entry or NULL
        self.enter(fast);
        let key = self.b.ins().uload32(mem_flags(), key_ptr, 0);
        let inb = self
            .b
            .ins()
            .icmp_imm_u(IntCC::UnsignedLessThan, key, entries as i64);
        let off = self.b.ins().imul_imm_u(key, stride as i64);
        let addr = self.b.ins().iadd_imm_u(off, base as i64);
        let z = self.b.ins().iconst(I64, 0);
        let r0 = self.b.ins().select(inb, addr, z);
        self.b.ins().jump(done, &[BlockArg::Value(r0)]);
        // slow: the helper itself
        self.enter(slow);
        self.helper_call(pc, id);
        let r0 = self.reg(0);
        self.b.ins().jump(done, &[BlockArg::Value(r0)]);
        self.enter(done);
        let r0 = self.b.block_params(done)[0];
        self.set(0, r0);
    }

    fn helper_call(&mut self, pc: usize, id: i32) {
        let idpc = self
            .b
            .ins()
            .iconst(I64, ((pc as u64) << 32 | id as u32 as u64) as i64);
        let ringbuf = id == ebpf::helpers::RINGBUF_SUBMIT || id == ebpf::helpers::RINGBUF_DISCARD;
        self.helper_call_idpc(idpc, ringbuf);
    }

    /// `callx r<d>`: the helper id is the register's value, as the interpreter reads it
    /// (`ebpf::helpers::callx_id`): a value that is not a 32-bit signed number faults with
    /// the interpreter's "unknown helper" error; any other goes to `jit_helper`, which
    /// dispatches (or rejects) it exactly as a `call` of that id.
    fn callx(&mut self, pc: usize, d: u8) {
        self.known_map = [None; 11];
        let v = self.reg(d);
        let biased = self.b.ins().iadd_imm_s(v, 1 << 31);
        let wide = self
            .b
            .ins()
            .icmp_imm_u(IntCC::UnsignedGreaterThan, biased, u32::MAX as i64);
        let bad = self.fault_block(fault::HELPER_ID, pc, Some(v));
        let ok = self.b.create_block();
        self.b.ins().brif(wide, bad, &[], ok, &[]);
        self.enter(ok);
        let id = self.b.ins().band_imm_u(v, u32::MAX as i64);
        let idpc = self.b.ins().bor_imm_u(id, ((pc as u64) << 32) as i64);
        // Any helper may run, ring buffer releases included.
        self.helper_call_idpc(idpc, true);
    }

    /// Calls `jit_helper` with `idpc` (`pc << 32 | id`) and r1..r5; `ringbuf`: the helper may
    /// release a ring buffer record (the cached regions are reloaded).
    fn helper_call_idpc(&mut self, idpc: Value, ringbuf: bool) {
        self.store_left();
        let f = self
            .b
            .ins()
            .iconst(I64, runtime::jit_helper as *const () as usize as i64);
        let mut args = vec![self.rt, idpc];
        for r in 1..=5 {
            args.push(self.reg(r));
        }
        args.push(self.r10);
        let call = self.b.ins().call_indirect(self.sig_helper, f, &args);
        let r0 = self.b.inst_results(call)[0];
        self.status_check();
        if !self.e.opts.trust_verifier && ringbuf {
            self.reload_hot(true, true);
        }
        self.set(0, r0);
    }

    fn call_local(&mut self, pc: usize, i: Insn) -> Result<(), CompileError> {
        self.known_map = [None; 11];
        let target = (pc as i64 + 1 + i.imm as i64) as usize;
        let Some(&callee) = self.e.ids.get(&target) else {
            return Err(self.err(pc, "call target is not a function start"));
        };
        // Depth: the interpreter refuses a call at depth MAX_FRAMES - 1.
        let top = self.b.ins().load(I64, TRUSTED, self.rt, OFF_STACK_TOP);
        let used = self.b.ins().isub(top, self.r10);
        let deep = self.b.ins().icmp_imm_s(
            IntCC::UnsignedGreaterThanOrEqual,
            used,
            (MAX_FRAMES as i64 - 1) * FRAME,
        );
        let bad = self.fault_block(fault::DEPTH, pc, None);
        let cont = self.b.create_block();
        self.b.ins().brif(deep, bad, &[], cont, &[]);
        self.enter(cont);
        // The callee's first run.
        let next = self.b.create_block();
        self.charge(self.e.front.run_len[target], pc, next);
        self.enter(next);
        self.store_left();
        let mut args = vec![self.rt];
        for r in 1..=5 {
            args.push(self.reg(r));
        }
        let r10 = self.b.ins().iadd_imm_s(self.r10, -FRAME);
        args.push(r10);
        if self.e.front.reads_stack {
            // The callee's frame starts zeroed, as in the interpreter.
            let lo = self.b.ins().iadd_imm_s(r10, -FRAME);
            let z = self
                .b
                .ins()
                .iconst(I64, runtime::jit_zero_frame as *const () as usize as i64);
            self.b.ins().call_indirect(self.sig_zero, z, &[lo]);
        }
        let call = self.b.ins().call(callee, &args);
        let r0 = self.b.inst_results(call)[0];
        self.status_check();
        let l = self.b.ins().load(I64, TRUSTED, self.rt, OFF_LEFT);
        self.b.def_var(self.left, l);
        if !self.e.opts.trust_verifier {
            self.reload_hot(true, true);
        }
        self.set(0, r0);
        // The run after the call, charged at the callee's exit.
        let ret_pc = self.b.ins().load(I64, TRUSTED, self.rt, OFF_RET_PC);
        let next = self.b.create_block();
        self.charge_dyn(self.e.front.run_len[pc + 1], ret_pc, next);
        self.enter(next);
        Ok(())
    }
}

/// Module function ids of a program, by start pc (for the driver).
pub(crate) type FuncIds = HashMap<usize, FuncId>;
