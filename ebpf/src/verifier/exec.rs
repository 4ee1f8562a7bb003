//! Exploration: a depth-first walk over all paths with a branch stack, checking every
//! instruction against the abstract state, with pruning and loop detection.
//!
//! ```text
//! pop path ─▶ at a prune point?  ─ covered by a COMPLETED checkpoint ─▶ path done (pruned)
//!               │                ─ equal to an IN-PROGRESS ancestor  ─▶ "infinite loop detected"
//!               │                ─ else checkpoint the state (branches = 1)
//!               ▼
//!            step(insn) ─▶ next pc | split (push the taken branch, parent.branches += 1) | end
//! path end ─▶ decrement `branches` up the checkpoint chain; a checkpoint at 0 is complete
//! ```

use super::cfg::Cfg;
use super::log::Trail;
use super::precise::{Hist, Track, back_insn};
use super::scalar::{Scalar, refine};
use super::state::{ByteKind, Frame, Ptr, PtrKind, Reg, Slot, State, covers, slot_of};
use super::{CtxKind, ErrorKind, Fail, Verified, VerifyOptions};
use crate::asm::disasm_insn;
use crate::isa::{AluOp, Insn, JmpCond, Ld64Kind, OpKind, STACK_SIZE, Src, Width};
use crate::program::{JobCtx, MapKind, Program};

/// Maximum call frames (the main function included).
pub const MAX_FRAMES: usize = 8;
/// How many of the latest checkpoints at an instruction a new state is compared with.
pub const PRUNE_WINDOW: usize = 64;
/// Largest variable offset accepted for a memory access.
pub const MAX_VAR_OFF: i64 = 1 << 29;

pub(super) fn fail(pc: usize, kind: ErrorKind, msg: impl Into<String>) -> Fail {
    Fail {
        pc,
        kind,
        msg: msg.into(),
    }
}

struct Checkpoint {
    state: State,
    parent: Option<usize>,
    branches: u32,
    /// Instructions from the parent checkpoint to this one.
    hist: Vec<Hist>,
    /// Scalars whose values the explored future relied on.
    prec: Track,
    /// Everything is precise (backtracking gave up).
    all_precise: bool,
}

struct Path {
    st: State,
    pc: usize,
    parent: Option<usize>,
    hist: Vec<Hist>,
}

pub(super) enum Step {
    Next(usize),
    Jump {
        taken: Option<State>,
        target: usize,
        fall_ok: bool,
    },
    End,
}

enum Visit {
    Pruned,
    New(usize),
}

/// The explorer for one program.
pub struct Explorer<'a> {
    pub(super) prog: &'a Program,
    pub(super) opts: &'a VerifyOptions,
    pub(super) cfg: Cfg,
    trail: &'a mut Trail,
    cps: Vec<Checkpoint>,
    explored: Vec<Vec<usize>>,
    next_id: u32,
    processed: usize,
    depth: Vec<usize>,
    /// Precision demanded by the instruction being processed.
    demands: Track,
    /// Constant-offset stack slot touched by the instruction being processed.
    last_stack: Option<(u8, u8, u8, bool)>,
    /// Whether it touched the stack at a variable offset.
    last_var_stack: bool,
    /// With a probe ctx: the ctx words read so far ([`Verified::ctx_words_read`]).
    ctx_words_read: std::cell::Cell<u64>,
    /// Maps whose values were touched other than by 64-bit atomic adds without fetch
    /// ([`Verified::maps_add_only`]).
    map_values_other: std::cell::Cell<u64>,
    /// Maps whose values the program may write ([`Verified::maps_written`]).
    map_values_written: std::cell::Cell<u64>,
    /// Maps the program changes with read-modify-writes ([`Verified::maps_atomic`]).
    maps_atomic: std::cell::Cell<u64>,
    /// With a probe ctx: what each load instruction reads ([`Verified::ctx_loads`]); `None`
    /// for a load seen with another base, or at a varying ctx offset.
    ctx_loads: std::cell::RefCell<std::collections::BTreeMap<usize, Option<i64>>>,
    /// Loads seen with a base other than the probe ctx.
    other_loads: std::cell::RefCell<std::collections::BTreeSet<usize>>,
    /// Loads and stores through a frame pointer ([`Verified::stack_slots`]).
    stack_slots: std::cell::RefCell<std::collections::BTreeMap<usize, Option<(i64, u8)>>>,
    /// Loads, stores and atomics seen through a pointer that is not a frame's: such an
    /// instruction keeps whatever frame bytes it may also reach in memory.
    stack_other: std::cell::RefCell<std::collections::BTreeSet<usize>>,
    /// Frame bytes something other than a plain load or store at a constant offset may
    /// touch ([`Verified::stack_shared`]).
    stack_shared: std::cell::RefCell<[u64; STACK_SIZE / 64]>,
}

fn alu_name(op: AluOp) -> &'static str {
    match op {
        AluOp::Add => "+=",
        AluOp::Sub => "-=",
        AluOp::Mul => "*=",
        AluOp::Div => "/=",
        AluOp::Sdiv => "s/=",
        AluOp::Or => "|=",
        AluOp::And => "&=",
        AluOp::Lsh => "<<=",
        AluOp::Rsh => ">>=",
        AluOp::Neg => "neg",
        AluOp::Mod => "%=",
        AluOp::Smod => "s%=",
        AluOp::Xor => "^=",
        AluOp::Mov => "mov",
        AluOp::Movsx8 | AluOp::Movsx16 | AluOp::Movsx32 => "movsx",
        AluOp::Arsh => "s>>=",
    }
}

fn is_signed(c: JmpCond) -> bool {
    matches!(c, JmpCond::Sgt | JmpCond::Sge | JmpCond::Slt | JmpCond::Sle)
}

fn end_of(k: PtrKind) -> Option<PtrKind> {
    match k {
        PtrKind::Data => Some(PtrKind::DataEnd),
        PtrKind::Out => Some(PtrKind::OutEnd),
        _ => None,
    }
}

/// Whether every address `p + off` may take is a multiple of `size` (a power of two).
fn is_aligned(p: &Ptr, off: i64, size: usize) -> bool {
    let mask = size as u64 - 1;
    (p.off.wrapping_add(off) as u64) & mask == 0 && (p.var.tn.value | p.var.tn.mask) & mask == 0
}

fn var_text(p: &Ptr, total: i64) -> String {
    match p.const_var() {
        Some(v) => format!("{}", total.wrapping_add(v)),
        None => format!("{total}+[{},{}]", p.var.smin, p.var.smax),
    }
}

impl<'a> Explorer<'a> {
    /// An explorer for `prog` after the structural pass.
    pub fn new(prog: &'a Program, opts: &'a VerifyOptions, cfg: Cfg, trail: &'a mut Trail) -> Self {
        let n = prog.insns.len();
        let nf = cfg.funcs.len();
        Explorer {
            prog,
            opts,
            cfg,
            trail,
            cps: Vec::new(),
            explored: vec![Vec::new(); n],
            next_id: 1,
            processed: 0,
            depth: vec![0; nf],
            demands: Track::default(),
            last_stack: None,
            last_var_stack: false,
            ctx_words_read: std::cell::Cell::new(0),
            map_values_other: std::cell::Cell::new(0),
            map_values_written: std::cell::Cell::new(0),
            maps_atomic: std::cell::Cell::new(0),
            ctx_loads: Default::default(),
            other_loads: Default::default(),
            stack_slots: Default::default(),
            stack_other: Default::default(),
            stack_shared: std::cell::RefCell::new([0; STACK_SIZE / 64]),
        }
    }

    /// With a probe ctx, records what the load at `pc` read: the ctx at a constant offset
    /// (`Some(p)` with the absolute offset), or something else (`None`).
    fn note_load(&self, pc: usize, ctx_at: Option<i64>) {
        if !matches!(self.opts.ctx, CtxKind::Probe { .. }) {
            return;
        }
        let mut loads = self.ctx_loads.borrow_mut();
        match ctx_at {
            None => {
                self.other_loads.borrow_mut().insert(pc);
                if let Some(v) = loads.get_mut(&pc) {
                    *v = None;
                }
            }
            Some(at) => {
                let other = self.other_loads.borrow().contains(&pc);
                let e = loads.entry(pc).or_insert(Some(at));
                if other || *e != Some(at) {
                    *e = None;
                }
            }
        }
    }

    /// Records that map `map`'s values are used other than by 64-bit atomic adds without
    /// fetch (read, written, passed to a helper, or the map given to one besides lookup).
    pub(super) fn note_map_value_use(&self, map: usize) {
        let bit = if map < 64 { 1u64 << map } else { 0 };
        self.map_values_other.set(self.map_values_other.get() | bit);
    }

    /// Records that map `map`'s values may be written (a store, an atomic, a helper that
    /// writes them or changes the map). Maps past the 64th count as written.
    pub(super) fn note_map_write(&self, map: usize) {
        let bit = if map < 64 { 1u64 << map } else { u64::MAX };
        self.map_values_written
            .set(self.map_values_written.get() | bit);
    }

    /// Records that map `map` is changed with a read-modify-write (an atomic on a value,
    /// or a helper that updates the map under its locks). Maps past the 64th count.
    pub(super) fn note_map_atomic(&self, map: usize) {
        let bit = if map < 64 { 1u64 << map } else { u64::MAX };
        self.maps_atomic.set(self.maps_atomic.get() | bit);
    }

    /// With a probe ctx, records the words a read through `p` (plus `off`, `size` bytes) may
    /// touch. The ctx is the only memory pointer without a reference id there.
    pub(super) fn note_ctx_read(&self, p: &Ptr, off: i64, size: u64) {
        if !matches!(self.opts.ctx, CtxKind::Probe { .. }) || p.ref_id != 0 {
            return;
        }
        let lo = p.off + off + p.var.smin.min(0);
        let hi = p.off + off + p.var.smax.max(0) + size as i64;
        let mut bits = 0u64;
        let (first, last) = (lo.max(0) / 8, (hi - 1).max(0) / 8);
        if p.const_var().is_none() && p.var.smax - p.var.smin > 4096 || last >= 64 {
            bits = u64::MAX;
        } else {
            for w in first..=last {
                bits |= 1 << w;
            }
        }
        self.ctx_words_read.set(self.ctx_words_read.get() | bits);
    }

    pub(super) fn fresh_id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    fn initial_state(&self) -> State {
        let mut regs = [Reg::NotInit; 11];
        regs[10] = Reg::Ptr(Ptr::new(PtrKind::Stack { frame: 0 }, 0));
        match self.opts.ctx {
            CtxKind::Job => regs[1] = Reg::Ptr(Ptr::new(PtrKind::Ctx, 0)),
            CtxKind::Mem { len } => {
                regs[1] = Reg::Ptr(Ptr::new(PtrKind::Mem { size: len as u64 }, 0));
                regs[2] = Reg::Scalar(Scalar::konst(len as u64));
            }
            CtxKind::Probe { size } => {
                regs[1] = Reg::Ptr(Ptr::new(PtrKind::Mem { size: size as u64 }, 0));
            }
        }
        State {
            frames: vec![Frame {
                regs,
                stack: Vec::new(),
                entry: 0,
                ret_pc: 0,
            }],
            refs: Vec::new(),
        }
    }

    /// Explores every path; on success, computes the stack summary.
    pub fn run(mut self) -> Result<Verified, Fail> {
        let mut work = vec![Path {
            st: self.initial_state(),
            pc: 0,
            parent: None,
            hist: Vec::new(),
        }];
        while let Some(Path {
            mut st,
            mut pc,
            mut parent,
            mut hist,
        }) = work.pop()
        {
            if self.trail.on() && self.processed > 0 {
                self.trail
                    .push(format!("-- resuming a pending branch at {pc}"));
            }
            loop {
                if self.cfg.prune[pc] {
                    match self.visit(&st, pc, parent, &mut hist)? {
                        Visit::Pruned => {
                            if self.trail.on() {
                                self.trail
                                    .push(format!("{pc}: safe (covered by an explored state)"));
                            }
                            self.finish(parent);
                            break;
                        }
                        Visit::New(id) => parent = Some(id),
                    }
                }
                if self.trail.on() {
                    let line = format!(
                        "{pc}: {} ; {}",
                        disasm_insn(&self.prog.insns, pc),
                        st.describe()
                    );
                    self.trail.push(line);
                }
                self.processed += 1;
                if self.processed > self.opts.max_insns {
                    return Err(fail(
                        pc,
                        ErrorKind::TooComplex,
                        format!(
                            "program too complex: processed {} instructions (limit {})",
                            self.processed, self.opts.max_insns
                        ),
                    ));
                }
                self.demands = Track::default();
                self.last_stack = None;
                self.last_var_stack = false;
                let frame = (st.frames.len() - 1) as u8;
                let step = self.step(&mut st, pc)?;
                if !self.demands.is_empty() {
                    let t = self.demands;
                    self.backtrack(&hist, parent, t);
                }
                hist.push(Hist {
                    pc: pc as u32,
                    frame,
                    stack: self.last_stack,
                    var_stack: self.last_var_stack,
                });
                match step {
                    Step::Next(n) => pc = n,
                    Step::Jump {
                        taken,
                        target,
                        fall_ok,
                    } => match (taken, fall_ok) {
                        (Some(t), true) => {
                            if let Some(p) = parent {
                                self.cps[p].branches += 1;
                            }
                            work.push(Path {
                                st: t,
                                pc: target,
                                parent,
                                hist: hist.clone(),
                            });
                            pc += 1;
                        }
                        (Some(t), false) => {
                            st = t;
                            pc = target;
                        }
                        (None, true) => pc += 1,
                        (None, false) => {
                            self.finish(parent);
                            break;
                        }
                    },
                    Step::End => {
                        self.finish(parent);
                        break;
                    }
                }
            }
        }
        self.summary()
    }

    #[inline]
    fn visit(
        &mut self,
        st: &State,
        pc: usize,
        parent: Option<usize>,
        hist: &mut Vec<Hist>,
    ) -> Result<Visit, Fail> {
        // Live registers per frame: the top frame at `pc`, callers at their return sites
        // (where r0..r5 are about to be overwritten).
        let nf = st.frames.len();
        let mut live = [0u16; MAX_FRAMES];
        for (i, l) in live.iter_mut().enumerate().take(nf) {
            *l = if i + 1 == nf {
                self.cfg.live[pc]
            } else {
                self.cfg.live[st.frames[i + 1].ret_pc] & !0b11_1111
            };
        }
        let live = &live[..nf];
        let mut pruned_by = None;
        // Only the most recent checkpoints are compared: a long bounded loop leaves one per
        // iteration here, and comparing against all of them would make exploration quadratic.
        // Ancestors on the current path are the most recent entries, so a loop that repeats
        // a state within the window is still caught; one with a longer period runs into the
        // instruction budget instead. Both ways are sound.
        for &i in self.explored[pc].iter().rev().take(PRUNE_WINDOW) {
            let cp = &self.cps[i];
            if cp.branches == 0 {
                let prec = (!cp.all_precise).then_some(&cp.prec);
                if covers(&cp.state, st, false, live, prec) {
                    pruned_by = Some(i);
                    break;
                }
            } else if covers(&cp.state, st, true, live, None) && self.is_ancestor(i, parent) {
                return Err(fail(
                    pc,
                    ErrorKind::Loop,
                    "infinite loop detected: the same state reached this instruction again",
                ));
            }
        }
        if let Some(i) = pruned_by {
            // What the explored future relied on, this path relies on too.
            if self.cps[i].all_precise {
                self.all_precise_up(parent);
            } else {
                let mut t = self.cps[i].prec;
                for (f, l) in live.iter().enumerate() {
                    t.regs[f] &= *l;
                }
                if !t.is_empty() {
                    self.backtrack(hist, parent, t);
                }
            }
            return Ok(Visit::Pruned);
        }
        let id = self.cps.len();
        self.cps.push(Checkpoint {
            state: st.clone(),
            parent,
            branches: 1,
            hist: std::mem::take(hist),
            prec: Track::default(),
            all_precise: false,
        });
        self.explored[pc].push(id);
        Ok(Visit::New(id))
    }

    /// Marks the sources of the traced values precise in every checkpoint up the path.
    fn backtrack(&mut self, hist: &[Hist], parent: Option<usize>, mut t: Track) {
        if !self.back_segment(hist, &mut t) {
            self.all_precise_up(parent);
            return;
        }
        let mut c = parent;
        while let Some(i) = c {
            if t.is_empty() || self.cps[i].all_precise || t.subset_of(&self.cps[i].prec) {
                return;
            }
            self.cps[i].prec.merge(&t);
            let seg = std::mem::take(&mut self.cps[i].hist);
            let ok = self.back_segment(&seg, &mut t);
            self.cps[i].hist = seg;
            if !ok {
                self.all_precise_up(self.cps[i].parent);
                return;
            }
            c = self.cps[i].parent;
        }
    }

    fn back_segment(&self, hist: &[Hist], t: &mut Track) -> bool {
        for h in hist.iter().rev() {
            if t.is_empty() {
                return true;
            }
            let Some(op) = self.cfg.ops[h.pc as usize] else {
                continue;
            };
            if !back_insn(self.prog, op.kind(), h, t) {
                return false;
            }
        }
        true
    }

    fn all_precise_up(&mut self, mut c: Option<usize>) {
        while let Some(i) = c {
            if self.cps[i].all_precise {
                return;
            }
            self.cps[i].all_precise = true;
            c = self.cps[i].parent;
        }
    }

    /// The current instruction relies on the exact value of `reg` in the current frame.
    pub(super) fn demand(&mut self, st: &State, reg: usize) {
        let f = st.frames.len() - 1;
        self.demands.regs[f] |= 1 << reg;
    }

    fn is_ancestor(&self, i: usize, mut c: Option<usize>) -> bool {
        while let Some(j) = c {
            if j == i {
                return true;
            }
            c = self.cps[j].parent;
        }
        false
    }

    fn finish(&mut self, mut c: Option<usize>) {
        while let Some(i) = c {
            self.cps[i].branches -= 1;
            if self.cps[i].branches > 0 {
                break;
            }
            c = self.cps[i].parent;
        }
    }

    fn summary(&self) -> Result<Verified, Fail> {
        let depths: Vec<usize> = self.depth.iter().map(|d| d.div_ceil(8) * 8).collect();
        // Call graph edges, one per (caller, callee): (callee func, first call pc).
        let nf = self.cfg.funcs.len();
        let mut edges: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nf];
        for (pc, op) in self.cfg.ops.iter().enumerate() {
            if let Some(op) = op
                && op.kind() == OpKind::CallLocal
            {
                let t = (pc as i64 + self.prog.insns[pc].imm as i64 + 1) as usize;
                let (from, to) = (self.cfg.func_of[pc], self.cfg.func_of[t]);
                if !edges[from].iter().any(|(g, _)| *g == to) {
                    edges[from].push((to, pc));
                }
            }
        }
        let mut memo = vec![None; nf];
        let mut visiting = vec![false; nf];
        let (max, path) = longest(0, &depths, &edges, &mut memo, &mut visiting);
        if max > STACK_SIZE {
            // Report at the call where the running total first exceeds the limit.
            let mut total = depths[0];
            let mut names = vec![format!("func@{}({})", self.cfg.funcs[0], depths[0])];
            for &(g, pc) in &path {
                total += depths[g];
                names.push(format!("func@{}({})", self.cfg.funcs[g], depths[g]));
                if total > STACK_SIZE {
                    return Err(fail(
                        pc,
                        ErrorKind::Stack,
                        format!(
                            "combined stack size of calls {} is {total} bytes, exceeds {STACK_SIZE}",
                            names.join(" -> ")
                        ),
                    ));
                }
            }
        }
        Ok(Verified {
            insns_processed: self.processed,
            stack_depths: self
                .cfg
                .funcs
                .iter()
                .zip(depths.iter())
                .map(|(e, d)| (*e, *d))
                .collect(),
            max_stack_depth: max,
            log: String::new(),
            ctx_words_read: self.ctx_words_read.get(),
            ctx_loads: self.ctx_loads.borrow().clone(),
            stack_slots: self.stack_slots.borrow().clone(),
            stack_shared: *self.stack_shared.borrow(),
            maps_add_only: {
                let n = self.prog.maps.len().min(64);
                let all = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
                all & !self.map_values_other.get()
            },
            maps_written: self.map_values_written.get(),
            maps_atomic: self.maps_atomic.get(),
        })
    }

    pub(super) fn read_reg(&self, st: &State, pc: usize, r: usize) -> Result<Reg, Fail> {
        match st.cur().regs[r] {
            Reg::NotInit => Err(fail(
                pc,
                ErrorKind::Uninit,
                format!("R{r} !read_ok (register read before it was written)"),
            )),
            v => Ok(v),
        }
    }

    pub(super) fn set_scalar(&self, st: &mut State, r: usize, s: Scalar) {
        st.cur_mut().regs[r] = Reg::Scalar(s);
        if s.id != 0 {
            st.for_each_reg(|reg| {
                if let Reg::Scalar(x) = reg
                    && x.id == s.id
                {
                    *x = s;
                }
            });
        }
    }

    fn step(&mut self, st: &mut State, pc: usize) -> Result<Step, Fail> {
        let insn = self.prog.insns[pc];
        let op = self.cfg.ops[pc].expect("cfg decoded every reachable slot");
        match op.kind() {
            OpKind::Alu { op, width, src } => {
                self.alu(st, pc, &insn, op, width, src)?;
                Ok(Step::Next(pc + 1))
            }
            OpKind::End { op, bits } => {
                let d = insn.dst as usize;
                match self.read_reg(st, pc, d)? {
                    Reg::Scalar(s) => st.cur_mut().regs[d] = Reg::Scalar(s.endian(op, bits)),
                    r => {
                        return Err(fail(
                            pc,
                            ErrorKind::Pointer,
                            format!(
                                "R{d} pointer arithmetic with byte swap prohibited (R{d} type={})",
                                r.type_name()
                            ),
                        ));
                    }
                }
                Ok(Step::Next(pc + 1))
            }
            OpKind::Ld64(kind) => {
                let next = self.prog.insns[pc + 1].imm;
                let v = match kind {
                    Ld64Kind::Imm => Reg::Scalar(Scalar::konst(
                        (insn.imm as u32 as u64) | ((next as u32 as u64) << 32),
                    )),
                    Ld64Kind::MapIdx => Reg::Ptr(Ptr::new(
                        PtrKind::Map {
                            map: insn.imm as u32,
                        },
                        0,
                    )),
                    Ld64Kind::MapIdxValue => {
                        let m = &self.prog.maps[insn.imm as u32 as usize];
                        if !matches!(m.kind, MapKind::Array | MapKind::PerThreadArray) {
                            return Err(fail(
                                pc,
                                ErrorKind::Access,
                                format!(
                                    "map_idx_value needs an array map, found map '{}' of kind {:?}",
                                    m.name, m.kind
                                ),
                            ));
                        }
                        if next < 0 || next as i64 > m.value_size as i64 {
                            return Err(fail(
                                pc,
                                ErrorKind::Access,
                                format!(
                                    "map value offset {next} outside the value of map '{}' ({} bytes)",
                                    m.name, m.value_size
                                ),
                            ));
                        }
                        Reg::Ptr(Ptr::new(
                            PtrKind::MapValue {
                                map: insn.imm as u32,
                            },
                            next as i64,
                        ))
                    }
                    _ => Reg::Scalar(Scalar::unknown()),
                };
                st.cur_mut().regs[insn.dst as usize] = v;
                Ok(Step::Next(pc + 2))
            }
            OpKind::Load { size, sign_extend } => {
                let s = insn.src as usize;
                let base = self.read_reg(st, pc, s)?;
                let v = self.load(st, pc, s, base, insn.off as i64, size.bytes(), sign_extend)?;
                st.cur_mut().regs[insn.dst as usize] = v;
                Ok(Step::Next(pc + 1))
            }
            OpKind::Store { size, src } => {
                let d = insn.dst as usize;
                let base = self.read_reg(st, pc, d)?;
                let (val, vr) = match src {
                    Src::Imm => (Reg::Scalar(Scalar::konst(insn.imm as i64 as u64)), None),
                    Src::Reg => (
                        self.read_reg(st, pc, insn.src as usize)?,
                        Some(insn.src as usize),
                    ),
                };
                self.store(st, pc, d, base, insn.off as i64, size.bytes(), val, vr)?;
                Ok(Step::Next(pc + 1))
            }
            OpKind::Atomic { op, size, fetch } => {
                self.atomic(st, pc, &insn, op, size.bytes(), fetch)?;
                Ok(Step::Next(pc + 1))
            }
            OpKind::Ja => Ok(Step::Next((pc as i64 + insn.off as i64 + 1) as usize)),
            OpKind::JaLong => Ok(Step::Next((pc as i64 + insn.imm as i64 + 1) as usize)),
            OpKind::Jmp { cond, width, src } => self.cond_jump(st, pc, &insn, cond, width, src),
            OpKind::Call => self.call_helper(st, pc, insn.imm),
            OpKind::Callx => self.callx(st, pc, insn.dst as usize),
            OpKind::CallLocal => {
                let target = (pc as i64 + insn.imm as i64 + 1) as usize;
                let n = st.frames.len();
                if n >= MAX_FRAMES {
                    return Err(fail(
                        pc,
                        ErrorKind::Stack,
                        format!("call stack too deep: {} frames, max {MAX_FRAMES}", n + 1),
                    ));
                }
                if st.frames.iter().any(|f| f.entry == target) {
                    return Err(fail(
                        pc,
                        ErrorKind::Stack,
                        format!("recursive call to function at {target} prohibited"),
                    ));
                }
                let mut regs = [Reg::NotInit; 11];
                regs[1..=5].copy_from_slice(&st.cur().regs[1..=5]);
                regs[10] = Reg::Ptr(Ptr::new(PtrKind::Stack { frame: n as u8 }, 0));
                st.frames.push(Frame {
                    regs,
                    stack: Vec::new(),
                    entry: target,
                    ret_pc: pc + 1,
                });
                Ok(Step::Next(target))
            }
            OpKind::CallKfunc => Err(fail(
                pc,
                ErrorKind::Structure,
                "kfunc calls are not supported",
            )),
            OpKind::Exit => self.exit(st, pc),
        }
    }

    fn exit(&mut self, st: &mut State, pc: usize) -> Result<Step, Fail> {
        let r0 = st.cur().regs[0];
        if st.frames.len() > 1 {
            let callee = st.frames.pop().expect("more than one frame");
            match r0 {
                // As in Linux, only the main program must set r0: a subprogram (a `static
                // void` function) may return without it, and r0 then stays unreadable in the
                // caller, so a caller that reads it is rejected there.
                Reg::NotInit => {}
                Reg::Ptr(p) => {
                    if let PtrKind::Stack { frame } = p.kind
                        && frame as usize >= st.frames.len()
                    {
                        return Err(fail(
                            pc,
                            ErrorKind::Pointer,
                            "R0 returning a pointer to the callee's stack prohibited",
                        ));
                    }
                }
                Reg::Scalar(_) => {}
            }
            let fr = st.cur_mut();
            fr.regs[0] = r0;
            for r in 1..=5 {
                fr.regs[r] = Reg::NotInit;
            }
            return Ok(Step::Next(callee.ret_pc));
        }
        match r0 {
            Reg::NotInit => {
                return Err(fail(
                    pc,
                    ErrorKind::Uninit,
                    "R0 !read_ok: the program exits without setting r0",
                ));
            }
            Reg::Ptr(p) => {
                return Err(fail(
                    pc,
                    ErrorKind::Pointer,
                    format!(
                        "R0 leaks a pointer: the program must return a scalar, found {}",
                        p.kind.name()
                    ),
                ));
            }
            Reg::Scalar(_) => {}
        }
        self.check_refs(st, pc)?;
        Ok(Step::End)
    }

    pub(super) fn check_refs(&self, st: &State, pc: usize) -> Result<(), Fail> {
        if let Some((id, at)) = st.refs.first() {
            return Err(fail(
                pc,
                ErrorKind::Reference,
                format!(
                    "unreleased reference id={id} acquired at insn {at}: the ringbuf_reserve result must be submitted or discarded on every path"
                ),
            ));
        }
        Ok(())
    }

    fn alu(
        &mut self,
        st: &mut State,
        pc: usize,
        insn: &Insn,
        op: AluOp,
        width: Width,
        src: Src,
    ) -> Result<(), Fail> {
        let d = insn.dst as usize;
        let sval = match src {
            Src::Imm => Reg::Scalar(Scalar::konst(insn.imm as i64 as u64)),
            Src::Reg => self.read_reg(st, pc, insn.src as usize)?,
        };
        if matches!(
            op,
            AluOp::Mov | AluOp::Movsx8 | AluOp::Movsx16 | AluOp::Movsx32
        ) {
            match sval {
                Reg::Scalar(mut s) => {
                    if op == AluOp::Mov && width == Width::W64 && src == Src::Reg {
                        if s.as_const().is_none() && s.id == 0 {
                            s.id = self.fresh_id();
                            st.cur_mut().regs[insn.src as usize] = Reg::Scalar(s);
                        }
                        st.cur_mut().regs[d] = Reg::Scalar(s);
                    } else {
                        st.cur_mut().regs[d] = Reg::Scalar(Scalar::konst(0).alu(op, width, &s));
                    }
                }
                Reg::Ptr(p) => {
                    if op == AluOp::Mov && width == Width::W64 {
                        st.cur_mut().regs[d] = Reg::Ptr(p);
                    } else {
                        return Err(fail(
                            pc,
                            ErrorKind::Pointer,
                            format!(
                                "R{} pointer arithmetic with {} prohibited: 32-bit or sign-extending move of a pointer (type={})",
                                insn.src,
                                if width == Width::W32 {
                                    "32-bit mov"
                                } else {
                                    "movsx"
                                },
                                p.kind.name()
                            ),
                        ));
                    }
                }
                Reg::NotInit => unreachable!("read_reg rejects NotInit"),
            }
            return Ok(());
        }
        let dv = self.read_reg(st, pc, d)?;
        let result = match (dv, sval) {
            (Reg::Scalar(a), Reg::Scalar(b)) => Reg::Scalar(a.alu(op, width, &b)),
            (dv, sv) => {
                // Pointer arithmetic: the scalar operand becomes part of the offset.
                self.demand(st, d);
                if src == Src::Reg {
                    self.demand(st, insn.src as usize);
                }
                if width == Width::W32 {
                    return Err(fail(
                        pc,
                        ErrorKind::Pointer,
                        format!(
                            "R{d} pointer arithmetic with 32-bit {} prohibited (R{d} type={}, operand type={})",
                            alu_name(op),
                            dv.type_name(),
                            sv.type_name()
                        ),
                    ));
                }
                self.ptr_alu(pc, d, op, dv, sv)?
            }
        };
        st.cur_mut().regs[d] = result;
        Ok(())
    }

    fn ptr_alu(&mut self, pc: usize, d: usize, op: AluOp, dv: Reg, sv: Reg) -> Result<Reg, Fail> {
        match (op, dv, sv) {
            (AluOp::Add, Reg::Ptr(p), Reg::Scalar(s))
            | (AluOp::Add, Reg::Scalar(s), Reg::Ptr(p)) => self.ptr_add(pc, d, p, s, false),
            (AluOp::Sub, Reg::Ptr(p), Reg::Scalar(s)) => self.ptr_add(pc, d, p, s, true),
            (AluOp::Sub, Reg::Ptr(a), Reg::Ptr(b)) => {
                let same = match (a.kind, b.kind) {
                    (PtrKind::Data | PtrKind::DataEnd, PtrKind::Data | PtrKind::DataEnd) => true,
                    (PtrKind::Out | PtrKind::OutEnd, PtrKind::Out | PtrKind::OutEnd) => true,
                    (x, y) => x == y && !x.or_null() && !matches!(x, PtrKind::Map { .. }),
                };
                if !same {
                    return Err(fail(
                        pc,
                        ErrorKind::Pointer,
                        format!(
                            "R{d} subtraction of pointers to different regions prohibited ({} - {})",
                            a.kind.name(),
                            b.kind.name()
                        ),
                    ));
                }
                let diff = match (a.const_var(), b.const_var()) {
                    (Some(x), Some(y)) if a.kind == b.kind && a.id == b.id => {
                        Some(a.off.wrapping_add(x).wrapping_sub(b.off.wrapping_add(y)))
                    }
                    _ => None,
                };
                Ok(Reg::Scalar(match diff {
                    Some(v) => Scalar::konst(v as u64),
                    None => Scalar::unknown(),
                }))
            }
            (AluOp::Sub, Reg::Scalar(_), Reg::Ptr(p)) => Err(fail(
                pc,
                ErrorKind::Pointer,
                format!(
                    "R{d} pointer arithmetic with -= prohibited: subtracting a pointer ({}) from a scalar",
                    p.kind.name()
                ),
            )),
            (op, dv, sv) => Err(fail(
                pc,
                ErrorKind::Pointer,
                format!(
                    "R{d} pointer arithmetic with {} prohibited (R{d} type={}, operand type={})",
                    alu_name(op),
                    dv.type_name(),
                    sv.type_name()
                ),
            )),
        }
    }

    fn ptr_add(
        &mut self,
        pc: usize,
        d: usize,
        mut p: Ptr,
        s: Scalar,
        neg: bool,
    ) -> Result<Reg, Fail> {
        let name = p.kind.name();
        match p.kind {
            PtrKind::Map { .. } | PtrKind::DataEnd | PtrKind::OutEnd => {
                return Err(fail(
                    pc,
                    ErrorKind::Pointer,
                    format!("R{d} pointer arithmetic on {name} prohibited"),
                ));
            }
            PtrKind::MapValueOrNull { .. } | PtrKind::MemOrNull { .. } => {
                return Err(fail(
                    pc,
                    ErrorKind::Pointer,
                    format!("R{d} pointer arithmetic on {name} prohibited, null-check it first"),
                ));
            }
            _ => {}
        }
        if let Some(c) = s.as_const() {
            let c = c as i64;
            let off = if neg {
                p.off.checked_sub(c)
            } else {
                p.off.checked_add(c)
            };
            match off {
                Some(o) if o.unsigned_abs() <= MAX_VAR_OFF as u64 => p.off = o,
                _ => {
                    return Err(fail(
                        pc,
                        ErrorKind::Pointer,
                        format!(
                            "R{d} pointer offset out of range: {name} {} {}",
                            if neg { "-" } else { "+" },
                            c
                        ),
                    ));
                }
            }
            return Ok(Reg::Ptr(p));
        }
        if p.kind == PtrKind::Ctx {
            return Err(fail(
                pc,
                ErrorKind::Pointer,
                format!("R{d} variable offset on ctx pointer prohibited"),
            ));
        }
        let op = if neg { AluOp::Sub } else { AluOp::Add };
        p.var = Scalar {
            id: 0,
            ..p.var.alu(op, Width::W64, &s)
        };
        if p.kind.is_pkt() {
            if p.id == 0 {
                // Var-less pointers measure their range from the region start.
                p.base_range = p.range;
            }
            p.id = self.fresh_id();
            p.range = 0;
        }
        Ok(Reg::Ptr(p))
    }

    /// Checks a bounded access of `size` bytes at `p + off` against `[0, limit)`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn bounds(
        &self,
        pc: usize,
        r: usize,
        p: &Ptr,
        off: i64,
        size: u64,
        limit: u64,
        what: &str,
        limit_name: &str,
    ) -> Result<(), Fail> {
        let (vmin, vmax) = (p.var.smin, p.var.smax);
        if vmin < -MAX_VAR_OFF || vmax > MAX_VAR_OFF {
            return Err(fail(
                pc,
                ErrorKind::Access,
                format!(
                    "R{r} unbounded memory access to {what}: variable offset {} is not bounded, add a bounds check",
                    p.var
                ),
            ));
        }
        let lo = p.off + off + vmin;
        let hi = p.off + off + vmax + size as i64;
        if lo < 0 || hi > limit as i64 {
            return Err(fail(
                pc,
                ErrorKind::Access,
                format!(
                    "invalid access to {what}: off={} size={size}, {limit_name}={limit}",
                    var_text(p, p.off + off)
                ),
            ));
        }
        Ok(())
    }

    /// Checks an access to data/out against the range proven by bounds checks.
    pub(super) fn pkt_bounds(
        &self,
        pc: usize,
        r: usize,
        p: &Ptr,
        off: i64,
        size: u64,
    ) -> Result<(), Fail> {
        let (what, end) = if p.kind == PtrKind::Data {
            ("input data", "data_end")
        } else {
            ("output", "out_end")
        };
        if p.var.smin < 0 || p.var.smax > MAX_VAR_OFF {
            return Err(fail(
                pc,
                ErrorKind::Access,
                format!(
                    "R{r} unbounded memory access to {what}: variable offset {} must be within [0, {MAX_VAR_OFF}]",
                    p.var
                ),
            ));
        }
        let lo = p.off + off;
        let hi = lo + size as i64;
        let in_range = hi <= p.range as i64 || hi + p.var.smax <= p.base_range as i64;
        if lo + p.var.smin < 0 || !in_range {
            return Err(fail(
                pc,
                ErrorKind::Access,
                format!(
                    "invalid access to {what}: off={} size={size}, proven range={} (bounds-check against {end} first)",
                    var_text(p, lo),
                    p.range
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn check_ref_live(
        &self,
        st: &State,
        pc: usize,
        r: usize,
        p: &Ptr,
    ) -> Result<(), Fail> {
        if p.ref_id != 0 && !st.refs.iter().any(|(id, _)| *id == p.ref_id) {
            return Err(fail(
                pc,
                ErrorKind::Reference,
                format!(
                    "R{r} use of released ringbuf memory (reference id={} was already submitted or discarded)",
                    p.ref_id
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn note_depth(&mut self, st: &State, frame: usize, off: i64) {
        let f = self.cfg.func_of[st.frames[frame].entry];
        self.depth[f] = self.depth[f].max((-off) as usize);
    }

    /// Records the stack slots an access at constant offset `o` touches (for backtracking).
    fn note_stack(&mut self, frame: usize, o: i64, size: usize, constant: bool) {
        if !constant {
            self.last_var_stack = true;
            return;
        }
        let hi = slot_of(o).0;
        let lo = slot_of(o + size as i64 - 1).0;
        self.last_stack = Some((
            frame as u8,
            lo as u8,
            hi as u8,
            size == 8 && o.rem_euclid(8) == 0,
        ));
    }

    fn null_deref(&self, pc: usize, r: usize, p: &Ptr) -> Fail {
        fail(
            pc,
            ErrorKind::Access,
            format!(
                "R{r} possible NULL pointer dereference, expected a null check first (type={})",
                p.kind.name()
            ),
        )
    }

    /// Records a plain load or store at `pc` of frame `frame`'s bytes `lo..hi`, `konst` when
    /// its offset is the same constant on this path. An access seen at two offsets, at a
    /// varying one, or in another frame than the entry's, shares what it may touch.
    fn note_stack_access(&self, pc: usize, frame: usize, lo: i64, hi: i64, konst: bool) {
        let mut slots = self.stack_slots.borrow_mut();
        let konst = konst && !self.stack_other.borrow().contains(&pc);
        let this = (konst && frame == 0 && hi - lo <= 8).then_some((lo, (hi - lo) as u8));
        let e = slots.entry(pc).or_insert(this);
        if *e != this {
            if let Some((l, n)) = *e {
                self.share_stack(l, l + n as i64);
            }
            *e = None;
        }
        if e.is_none() {
            self.share_stack(lo, hi);
        }
    }

    /// Records the base of the access at `pc` on this path. Through another pointer than a
    /// frame's (a map value, the ctx, a packet: `p = v ? v : &local`), what it reaches in a
    /// frame on other paths stays in memory.
    fn note_base(&self, pc: usize, p: &Ptr) {
        if matches!(p.kind, PtrKind::Stack { .. }) {
            return;
        }
        self.stack_other.borrow_mut().insert(pc);
        let mut slots = self.stack_slots.borrow_mut();
        if let Some((l, n)) = slots.get_mut(&pc).and_then(Option::take) {
            self.share_stack(l, l + n as i64);
        }
    }

    /// Marks frame bytes `lo..hi` (offsets from r10, clamped to the frame) as reached other
    /// than by plain constant-offset accesses ([`Verified::stack_shared`]).
    pub(super) fn share_stack(&self, lo: i64, hi: i64) {
        let mut m = self.stack_shared.borrow_mut();
        let lo = lo.max(-(STACK_SIZE as i64));
        let hi = hi.min(0);
        for b in lo..hi {
            let i = (b + STACK_SIZE as i64) as usize;
            m[i / 64] |= 1 << (i % 64);
        }
    }

    fn not_ptr(&self, pc: usize, r: usize, v: &Reg) -> Fail {
        fail(
            pc,
            ErrorKind::Access,
            format!(
                "R{r} invalid memory access: type={}, expected a pointer",
                v.type_name()
            ),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn load(
        &mut self,
        st: &State,
        pc: usize,
        r: usize,
        base: Reg,
        off: i64,
        size: usize,
        sx: bool,
    ) -> Result<Reg, Fail> {
        let Reg::Ptr(p) = base else {
            return Err(self.not_ptr(pc, r, &base));
        };
        self.note_base(pc, &p);
        // A ctx load at a varying offset counts as another base: never a constant read.
        let probe_ctx = matches!(p.kind, PtrKind::Mem { .. }) && p.ref_id == 0;
        self.note_load(
            pc,
            probe_ctx
                .then(|| p.const_var().map(|v| p.off + v + off))
                .flatten(),
        );
        match p.kind {
            PtrKind::MapValueOrNull { .. } | PtrKind::MemOrNull { .. } => {
                Err(self.null_deref(pc, r, &p))
            }
            PtrKind::Map { .. } | PtrKind::DataEnd | PtrKind::OutEnd => Err(fail(
                pc,
                ErrorKind::Access,
                format!(
                    "R{r} invalid memory access: {} cannot be dereferenced",
                    p.kind.name()
                ),
            )),
            PtrKind::Ctx => self.ctx_load(pc, &p, off, size, sx),
            PtrKind::Stack { frame } => {
                self.stack_aligned(pc, &p, off, size)?;
                self.stack_read(st, pc, frame as usize, &p, off, size, sx)
            }
            PtrKind::MapValue { map } => {
                self.note_map_value_use(map as usize);
                let m = &self.prog.maps[map as usize];
                self.bounds(
                    pc,
                    r,
                    &p,
                    off,
                    size as u64,
                    m.value_size as u64,
                    "map value",
                    "value_size",
                )?;
                if !m.writable_by_prog()
                    && let (Some(init), Some(v)) = (&m.init, p.const_var())
                {
                    let o = (p.off + off + v) as usize;
                    let mut bytes = [0u8; 8];
                    for (i, b) in bytes.iter_mut().take(size).enumerate() {
                        *b = init.get(o + i).copied().unwrap_or(0);
                    }
                    let raw = u64::from_le_bytes(bytes);
                    let val = if sx && size < 8 {
                        let sh = 64 - 8 * size as u32;
                        (((raw << sh) as i64) >> sh) as u64
                    } else {
                        raw
                    };
                    return Ok(Reg::Scalar(Scalar::konst(val)));
                }
                Ok(Reg::Scalar(Scalar::unknown_bytes(size, sx)))
            }
            PtrKind::Data | PtrKind::Out => {
                self.pkt_bounds(pc, r, &p, off, size as u64)?;
                Ok(Reg::Scalar(Scalar::unknown_bytes(size, sx)))
            }
            PtrKind::Mem { size: limit } => {
                self.check_ref_live(st, pc, r, &p)?;
                self.bounds(pc, r, &p, off, size as u64, limit, "mem", "mem size")?;
                self.note_ctx_read(&p, off, size as u64);
                Ok(Reg::Scalar(Scalar::unknown_bytes(size, sx)))
            }
        }
    }

    fn ctx_load(&self, pc: usize, p: &Ptr, off: i64, size: usize, sx: bool) -> Result<Reg, Fail> {
        let o = p.off + off;
        let sz = size as i64;
        if o < 0 || o + sz > JobCtx::SIZE as i64 {
            return Err(fail(
                pc,
                ErrorKind::Access,
                format!(
                    "invalid ctx access: off={o} size={size} (ctx is {} bytes)",
                    JobCtx::SIZE
                ),
            ));
        }
        if o < JobCtx::INDEX {
            if size != 8 || o % 8 != 0 {
                return Err(fail(
                    pc,
                    ErrorKind::Access,
                    format!(
                        "invalid ctx access: off={o} size={size}, the pointer fields data/data_end/out/out_end must be read with 8-byte loads at their offsets"
                    ),
                ));
            }
            let kind = match o {
                JobCtx::DATA => PtrKind::Data,
                JobCtx::DATA_END => PtrKind::DataEnd,
                JobCtx::OUT => PtrKind::Out,
                _ => PtrKind::OutEnd,
            };
            return Ok(Reg::Ptr(Ptr::new(kind, 0)));
        }
        if o / 8 != (o + sz - 1) / 8 {
            return Err(fail(
                pc,
                ErrorKind::Access,
                format!("invalid ctx access: off={o} size={size} straddles two fields"),
            ));
        }
        Ok(Reg::Scalar(Scalar::unknown_bytes(size, sx)))
    }

    #[allow(clippy::too_many_arguments)]
    fn stack_read(
        &mut self,
        st: &State,
        pc: usize,
        frame: usize,
        p: &Ptr,
        off: i64,
        size: usize,
        sx: bool,
    ) -> Result<Reg, Fail> {
        let sz = size as i64;
        let bounded = p.var.smin >= -MAX_VAR_OFF && p.var.smax <= MAX_VAR_OFF;
        let (lo, hi) = if bounded {
            (p.off + off + p.var.smin, p.off + off + p.var.smax + sz)
        } else {
            (i64::MIN, i64::MAX)
        };
        if !bounded || lo < -(STACK_SIZE as i64) || hi > 0 {
            return Err(fail(
                pc,
                ErrorKind::Access,
                format!(
                    "invalid read from stack off {} size {size}: outside the {STACK_SIZE}-byte frame",
                    var_text(p, p.off + off)
                ),
            ));
        }
        self.note_depth(st, frame, lo);
        self.note_stack(frame, lo, size, p.const_var().is_some());
        self.note_stack_access(pc, frame, lo, hi, p.const_var().is_some());
        let fr = &st.frames[frame];
        if let Some(v) = p.const_var() {
            let o = p.off + off + v;
            let (idx, b) = slot_of(o);
            if size == 8
                && b == 0
                && let Slot::Spill(reg) = fr.slot(idx)
            {
                return Ok(reg);
            }
            // The low bytes of a spilled scalar (little-endian) keep its bounds when they
            // hold the whole value.
            if size < 8
                && b == 0
                && let Slot::Spill(Reg::Scalar(sc)) = fr.slot(idx)
            {
                let bits = 8 * size as u32;
                let lim = if sx { 1u64 << (bits - 1) } else { 1u64 << bits };
                if sc.umax < lim {
                    return Ok(Reg::Scalar(Scalar { id: 0, ..sc }));
                }
                if let Some(c) = sc.as_const() {
                    let sh = 64 - bits;
                    let v = if sx {
                        (((c << sh) as i64) >> sh) as u64
                    } else {
                        (c << sh) >> sh
                    };
                    return Ok(Reg::Scalar(Scalar::konst(v)));
                }
            }
        }
        let mut all_zero = true;
        for o in lo..hi {
            let (idx, b) = slot_of(o);
            let slot = fr.slot(idx);
            if let Slot::Spill(Reg::Ptr(_)) = slot {
                return Err(fail(
                    pc,
                    ErrorKind::Access,
                    format!(
                        "invalid read from stack off {} size {size}: partial read of a spilled pointer",
                        var_text(p, p.off + off)
                    ),
                ));
            }
            match slot.bytes()[b] {
                ByteKind::Invalid => {
                    return Err(fail(
                        pc,
                        ErrorKind::Uninit,
                        format!(
                            "invalid read from stack off {}+{} size {size} (uninitialized)",
                            var_text(p, p.off + off),
                            o - lo
                        ),
                    ));
                }
                ByteKind::Misc => all_zero = false,
                ByteKind::Zero => {}
            }
        }
        Ok(Reg::Scalar(if all_zero && p.const_var().is_some() {
            Scalar::konst(0)
        } else {
            Scalar::unknown_bytes(size, sx)
        }))
    }

    /// A write at a variable stack offset: every byte it may touch becomes initialized
    /// data (as for privileged Linux programs); pointers cannot be stored this way.
    #[allow(clippy::too_many_arguments)]
    fn stack_write_var(
        &mut self,
        st: &mut State,
        pc: usize,
        frame: usize,
        p: &Ptr,
        off: i64,
        size: usize,
        val: Reg,
    ) -> Result<(), Fail> {
        let bounded = p.var.smin >= -MAX_VAR_OFF && p.var.smax <= MAX_VAR_OFF;
        let (lo, hi) = if bounded {
            (
                p.off + off + p.var.smin,
                p.off + off + p.var.smax + size as i64,
            )
        } else {
            (i64::MIN, i64::MAX)
        };
        if lo < -(STACK_SIZE as i64) || hi > 0 {
            return Err(fail(
                pc,
                ErrorKind::Access,
                format!(
                    "invalid write to stack off {} size {size}: outside the {STACK_SIZE}-byte frame",
                    var_text(p, p.off + off)
                ),
            ));
        }
        self.note_stack_access(pc, frame, lo, hi, false);
        if let Reg::Ptr(vp) = val {
            return Err(fail(
                pc,
                ErrorKind::Pointer,
                format!(
                    "spill of a pointer ({}) at a variable stack offset prohibited",
                    vp.kind.name()
                ),
            ));
        }
        self.note_depth(st, frame, lo);
        self.last_var_stack = true;
        let zero = matches!(val, Reg::Scalar(s) if s.as_const() == Some(0));
        let fr = &mut st.frames[frame];
        for i in lo..hi {
            let (idx, b) = slot_of(i);
            let slot = fr.slot_mut(idx);
            let mut bytes = slot.bytes();
            bytes[b] = if zero && bytes[b] == ByteKind::Zero {
                ByteKind::Zero
            } else {
                ByteKind::Misc
            };
            *slot = Slot::Bytes(bytes);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn stack_write(
        &mut self,
        st: &mut State,
        pc: usize,
        frame: usize,
        p: &Ptr,
        off: i64,
        size: usize,
        val: Reg,
    ) -> Result<(), Fail> {
        let Some(v) = p.const_var() else {
            return self.stack_write_var(st, pc, frame, p, off, size, val);
        };
        let o = p.off.saturating_add(off).saturating_add(v);
        if o < -(STACK_SIZE as i64) || o.saturating_add(size as i64) > 0 {
            return Err(fail(
                pc,
                ErrorKind::Access,
                format!(
                    "invalid write to stack off {o} size {size}: outside the {STACK_SIZE}-byte frame"
                ),
            ));
        }
        self.note_stack_access(pc, frame, o, o + size as i64, true);
        if let Reg::Ptr(vp) = val {
            if let PtrKind::Stack { frame: vf } = vp.kind
                && vf as usize > frame
            {
                return Err(fail(
                    pc,
                    ErrorKind::Pointer,
                    "cannot store a pointer to the callee's stack into the caller's stack",
                ));
            }
            if size != 8 || o % 8 != 0 {
                return Err(fail(
                    pc,
                    ErrorKind::Pointer,
                    format!(
                        "partial or misaligned spill of a pointer prohibited (off {o}, size {size})"
                    ),
                ));
            }
        }
        self.note_depth(st, frame, o);
        self.note_stack(frame, o, size, p.const_var().is_some());
        let fr = &mut st.frames[frame];
        let (idx, b) = slot_of(o);
        if size == 8 && b == 0 {
            *fr.slot_mut(idx) = Slot::Spill(val);
            return Ok(());
        }
        let zero = matches!(val, Reg::Scalar(s) if s.as_const() == Some(0));
        for i in o..o + size as i64 {
            let (idx, b) = slot_of(i);
            let slot = fr.slot_mut(idx);
            let mut bytes = slot.bytes();
            bytes[b] = if zero { ByteKind::Zero } else { ByteKind::Misc };
            *slot = Slot::Bytes(bytes);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        st: &mut State,
        pc: usize,
        r: usize,
        base: Reg,
        off: i64,
        size: usize,
        val: Reg,
        vr: Option<usize>,
    ) -> Result<(), Fail> {
        let Reg::Ptr(p) = base else {
            return Err(self.not_ptr(pc, r, &base));
        };
        self.note_base(pc, &p);
        let leak = |what: &str| -> Result<(), Fail> {
            if let Reg::Ptr(vp) = val {
                return Err(fail(
                    pc,
                    ErrorKind::Pointer,
                    format!(
                        "R{} leaks a pointer: only scalars may be stored into {what} (found {})",
                        vr.unwrap_or(0),
                        vp.kind.name()
                    ),
                ));
            }
            Ok(())
        };
        match p.kind {
            PtrKind::MapValueOrNull { .. } | PtrKind::MemOrNull { .. } => {
                Err(self.null_deref(pc, r, &p))
            }
            PtrKind::Ctx => Err(fail(
                pc,
                ErrorKind::Access,
                "cannot write into ctx: the job ctx is read-only",
            )),
            PtrKind::Data => Err(fail(
                pc,
                ErrorKind::Access,
                "cannot write into input data: input data is read-only",
            )),
            PtrKind::Map { .. } | PtrKind::DataEnd | PtrKind::OutEnd => Err(fail(
                pc,
                ErrorKind::Access,
                format!(
                    "R{r} invalid memory access: {} cannot be dereferenced",
                    p.kind.name()
                ),
            )),
            PtrKind::Stack { frame } => {
                self.stack_aligned(pc, &p, off, size)?;
                self.stack_write(st, pc, frame as usize, &p, off, size, val)
            }
            PtrKind::MapValue { map } => {
                self.note_map_value_use(map as usize);
                self.note_map_write(map as usize);
                let m = &self.prog.maps[map as usize];
                if !m.writable_by_prog() {
                    return Err(fail(
                        pc,
                        ErrorKind::Access,
                        format!(
                            "cannot write into read-only map '{}' (read-only global data)",
                            m.name
                        ),
                    ));
                }
                leak("map value")?;
                self.bounds(
                    pc,
                    r,
                    &p,
                    off,
                    size as u64,
                    m.value_size as u64,
                    "map value",
                    "value_size",
                )
            }
            PtrKind::Out => {
                leak("output")?;
                self.pkt_bounds(pc, r, &p, off, size as u64)
            }
            PtrKind::Mem { size: limit } => {
                self.check_ref_live(st, pc, r, &p)?;
                leak("mem")?;
                self.bounds(pc, r, &p, off, size as u64, limit, "mem", "mem size")
            }
        }
    }

    fn atomic(
        &mut self,
        st: &mut State,
        pc: usize,
        insn: &Insn,
        op: crate::isa::AtomicOp,
        size: usize,
        fetch: bool,
    ) -> Result<(), Fail> {
        let d = insn.dst as usize;
        let s = insn.src as usize;
        let base = self.read_reg(st, pc, d)?;
        let v = self.read_reg(st, pc, s)?;
        if let Reg::Ptr(vp) = v {
            return Err(fail(
                pc,
                ErrorKind::Pointer,
                format!(
                    "R{s} leaks a pointer: the atomic operand must be a scalar (found {})",
                    vp.kind.name()
                ),
            ));
        }
        if op == crate::isa::AtomicOp::Cmpxchg
            && let Reg::Ptr(vp) = self.read_reg(st, pc, 0)?
        {
            return Err(fail(
                pc,
                ErrorKind::Pointer,
                format!(
                    "R0 leaks a pointer: the cmpxchg comparand must be a scalar (found {})",
                    vp.kind.name()
                ),
            ));
        }
        let Reg::Ptr(p) = base else {
            return Err(self.not_ptr(pc, d, &base));
        };
        self.note_base(pc, &p);
        let off = insn.off as i64;
        let misaligned = !is_aligned(&p, off, size);
        let unknown = Scalar::unknown_bytes(size, false);
        match p.kind {
            PtrKind::MapValueOrNull { .. } | PtrKind::MemOrNull { .. } => {
                return Err(self.null_deref(pc, d, &p));
            }
            PtrKind::Stack { frame } => {
                let old = self.stack_read(st, pc, frame as usize, &p, off, size, false)?;
                // An atomic's bytes stay in memory.
                let at = self.stack_slots.borrow().get(&pc).copied().flatten();
                if let Some((l, n)) = at {
                    self.share_stack(l, l + n as i64);
                }
                if let Reg::Ptr(_) = old {
                    return Err(fail(
                        pc,
                        ErrorKind::Pointer,
                        "atomic operation on a spilled pointer prohibited",
                    ));
                }
                if misaligned {
                    return Err(self.misaligned(pc, &p, off, size));
                }
                self.stack_write(st, pc, frame as usize, &p, off, size, Reg::Scalar(unknown))?;
            }
            PtrKind::MapValue { map } => {
                if !(op == crate::isa::AtomicOp::Add && !fetch && size == 8) {
                    self.note_map_value_use(map as usize);
                }
                self.note_map_write(map as usize);
                self.note_map_atomic(map as usize);
                let m = &self.prog.maps[map as usize];
                if !m.writable_by_prog() {
                    return Err(fail(
                        pc,
                        ErrorKind::Access,
                        format!(
                            "cannot write into read-only map '{}' (read-only global data)",
                            m.name
                        ),
                    ));
                }
                self.bounds(
                    pc,
                    d,
                    &p,
                    off,
                    size as u64,
                    m.value_size as u64,
                    "map value",
                    "value_size",
                )?;
                if misaligned {
                    return Err(self.misaligned(pc, &p, off, size));
                }
            }
            PtrKind::Out => {
                self.pkt_bounds(pc, d, &p, off, size as u64)?;
                if misaligned {
                    return Err(self.misaligned(pc, &p, off, size));
                }
            }
            PtrKind::Mem { size: limit } => {
                self.check_ref_live(st, pc, d, &p)?;
                self.bounds(pc, d, &p, off, size as u64, limit, "mem", "mem size")?;
                if misaligned {
                    return Err(self.misaligned(pc, &p, off, size));
                }
            }
            k => {
                return Err(fail(
                    pc,
                    ErrorKind::Access,
                    format!(
                        "atomic operation on {} prohibited (only stack, map value, output and mem)",
                        k.name()
                    ),
                ));
            }
        }
        if fetch {
            let r = if op == crate::isa::AtomicOp::Cmpxchg {
                0
            } else {
                s
            };
            st.cur_mut().regs[r] = Reg::Scalar(unknown);
        }
        Ok(())
    }

    /// As in Linux (`check_ptr_alignment`, strict for the stack): a load or store of `size`
    /// bytes through a stack pointer must be `size`-aligned, the variable part of the offset
    /// included.
    fn stack_aligned(&self, pc: usize, p: &Ptr, off: i64, size: usize) -> Result<(), Fail> {
        if !is_aligned(p, off, size) {
            return Err(fail(
                pc,
                ErrorKind::Access,
                format!(
                    "misaligned stack access off {} size {size}: a {size}-byte stack access must be {size}-byte aligned",
                    var_text(p, p.off + off)
                ),
            ));
        }
        Ok(())
    }

    fn misaligned(&self, pc: usize, p: &Ptr, off: i64, size: usize) -> Fail {
        fail(
            pc,
            ErrorKind::Access,
            format!(
                "misaligned atomic access: off={} size={size}",
                var_text(p, p.off + off)
            ),
        )
    }

    fn cond_jump(
        &mut self,
        st: &mut State,
        pc: usize,
        insn: &Insn,
        cond: JmpCond,
        width: Width,
        src: Src,
    ) -> Result<Step, Fail> {
        let target = (pc as i64 + insn.off as i64 + 1) as usize;
        let d = insn.dst as usize;
        let a = self.read_reg(st, pc, d)?;
        let (b, bsrc) = match src {
            Src::Imm => {
                let v = if width == Width::W32 {
                    insn.imm as u32 as u64
                } else {
                    insn.imm as i64 as u64
                };
                (Reg::Scalar(Scalar::konst(v)), None)
            }
            Src::Reg => (
                self.read_reg(st, pc, insn.src as usize)?,
                Some(insn.src as usize),
            ),
        };
        match (a, b) {
            (Reg::Scalar(x), Reg::Scalar(y)) => {
                let refinable = match width {
                    Width::W64 => true,
                    Width::W32 => {
                        let lim = if is_signed(cond) {
                            i32::MAX as u64
                        } else {
                            u32::MAX as u64
                        };
                        x.umax <= lim && y.umax <= lim
                    }
                };
                if !refinable {
                    if let (Some(xv), Some(yv)) = (x.as_const(), y.as_const()) {
                        self.demand(st, d);
                        if let Some(sr) = bsrc {
                            self.demand(st, sr);
                        }
                        return Ok(if cond.eval32(xv, yv) {
                            Step::Next(target)
                        } else {
                            Step::Next(pc + 1)
                        });
                    }
                    return Ok(Step::Jump {
                        taken: Some(st.clone()),
                        target,
                        fall_ok: true,
                    });
                }
                let t = refine(cond, &x, &y, true);
                let f = refine(cond, &x, &y, false);
                if t.is_none() || f.is_none() {
                    // Only one side is feasible: the operands' values decided that.
                    self.demand(st, d);
                    if let Some(sr) = bsrc {
                        self.demand(st, sr);
                    }
                }
                let taken = t.map(|(x2, y2)| {
                    let mut s2 = st.clone();
                    self.set_scalar(&mut s2, d, x2);
                    if let Some(sr) = bsrc {
                        self.set_scalar(&mut s2, sr, y2);
                    }
                    s2
                });
                let fall_ok = match f {
                    Some((x2, y2)) => {
                        self.set_scalar(st, d, x2);
                        if let Some(sr) = bsrc {
                            self.set_scalar(st, sr, y2);
                        }
                        true
                    }
                    None => false,
                };
                Ok(Step::Jump {
                    taken,
                    target,
                    fall_ok,
                })
            }
            (Reg::Ptr(p), Reg::Scalar(y)) | (Reg::Scalar(y), Reg::Ptr(p)) => {
                // The scalar must be exactly 0 for this to be a null check.
                self.demand(st, d);
                if let Some(sr) = bsrc {
                    self.demand(st, sr);
                }
                if width == Width::W32 {
                    return Err(fail(
                        pc,
                        ErrorKind::Pointer,
                        format!(
                            "32-bit comparison of a pointer prohibited ({})",
                            p.kind.name()
                        ),
                    ));
                }
                if y.as_const() != Some(0) {
                    return Err(fail(
                        pc,
                        ErrorKind::Pointer,
                        format!(
                            "pointer comparison prohibited: {} compared with a scalar; only == 0 / != 0 null checks are allowed",
                            p.kind.name()
                        ),
                    ));
                }
                if !matches!(cond, JmpCond::Eq | JmpCond::Ne) {
                    return Err(fail(
                        pc,
                        ErrorKind::Pointer,
                        format!(
                            "pointer comparison with 0 must be == or != (found another condition on {})",
                            p.kind.name()
                        ),
                    ));
                }
                let eq = cond == JmpCond::Eq;
                if !p.kind.or_null() {
                    // Never NULL: the outcome is known.
                    return Ok(Step::Next(if eq { pc + 1 } else { target }));
                }
                let mut null_st = st.clone();
                mark_null(&mut null_st, p.id, true);
                mark_null(st, p.id, false);
                if eq {
                    Ok(Step::Jump {
                        taken: Some(null_st),
                        target,
                        fall_ok: true,
                    })
                } else {
                    let nonnull = std::mem::replace(st, null_st);
                    Ok(Step::Jump {
                        taken: Some(nonnull),
                        target,
                        fall_ok: true,
                    })
                }
            }
            (Reg::Ptr(pa), Reg::Ptr(pb)) => {
                if width == Width::W32 || cond == JmpCond::Set {
                    return Err(fail(
                        pc,
                        ErrorKind::Pointer,
                        format!(
                            "pointer comparison prohibited: 32-bit or jset comparison of {} and {}",
                            pa.kind.name(),
                            pb.kind.name()
                        ),
                    ));
                }
                if pa.kind.or_null() || pb.kind.or_null() {
                    return Err(fail(
                        pc,
                        ErrorKind::Pointer,
                        "comparison of a possibly-NULL pointer with another pointer prohibited, null-check it first",
                    ));
                }
                let same = match (pa.kind, pb.kind) {
                    (PtrKind::Data | PtrKind::DataEnd, PtrKind::Data | PtrKind::DataEnd) => true,
                    (PtrKind::Out | PtrKind::OutEnd, PtrKind::Out | PtrKind::OutEnd) => true,
                    (x, y) => x == y,
                };
                if !same {
                    return Err(fail(
                        pc,
                        ErrorKind::Pointer,
                        format!(
                            "comparison of pointers to different regions prohibited ({} vs {})",
                            pa.kind.name(),
                            pb.kind.name()
                        ),
                    ));
                }
                let mut taken = st.clone();
                // XDP-style range proof: normalize to `pkt <cond> end`.
                let norm = if end_of(pa.kind) == Some(pb.kind) {
                    Some((pa, cond))
                } else if end_of(pb.kind) == Some(pa.kind) {
                    let flipped = match cond {
                        JmpCond::Gt => JmpCond::Lt,
                        JmpCond::Lt => JmpCond::Gt,
                        JmpCond::Ge => JmpCond::Le,
                        JmpCond::Le => JmpCond::Ge,
                        c => c,
                    };
                    Some((pb, flipped))
                } else {
                    None
                };
                if let Some((pk, c)) = norm
                    && pk.off > 0
                {
                    let range = pk.off as u64;
                    match c {
                        JmpCond::Gt | JmpCond::Ge => set_range(st, pk.kind, pk.id, range),
                        JmpCond::Lt | JmpCond::Le => set_range(&mut taken, pk.kind, pk.id, range),
                        _ => {}
                    }
                }
                Ok(Step::Jump {
                    taken: Some(taken),
                    target,
                    fall_ok: true,
                })
            }
            _ => unreachable!("read_reg rejects NotInit"),
        }
    }
}

/// Resolves a null check for every copy of the pointer with null-check `id`.
fn mark_null(st: &mut State, id: u32, is_null: bool) {
    st.for_each_reg(|r| {
        if let Reg::Ptr(p) = r
            && p.kind.or_null()
            && p.id == id
        {
            if is_null {
                *r = Reg::Scalar(Scalar::konst(0));
            } else {
                p.kind = match p.kind {
                    PtrKind::MapValueOrNull { map } => PtrKind::MapValue { map },
                    PtrKind::MemOrNull { size } => PtrKind::Mem { size },
                    k => k,
                };
                p.id = 0;
            }
        }
    });
    if is_null {
        st.refs.retain(|(r, _)| *r != id);
    }
}

/// Records that `range` bytes are proven for every data/out pointer sharing `(kind, id)`.
fn set_range(st: &mut State, kind: PtrKind, id: u32, range: u64) {
    st.for_each_reg(|r| {
        if let Reg::Ptr(p) = r
            && p.kind == kind
            && p.id == id
        {
            p.range = p.range.max(range);
        }
    });
}

/// A call chain's depth and its calls `(callee, call pc)`.
type Chain = (usize, Vec<(usize, usize)>);

/// The deepest stack use starting in function `f`, and the calls along it
/// (`(callee, call pc)`); memoized, cycles (unreachable recursion) cut.
fn longest(
    f: usize,
    depths: &[usize],
    edges: &[Vec<(usize, usize)>],
    memo: &mut [Option<Chain>],
    visiting: &mut [bool],
) -> Chain {
    if let Some(m) = &memo[f] {
        return m.clone();
    }
    visiting[f] = true;
    let mut best = (depths[f], Vec::new());
    for &(g, pc) in &edges[f] {
        if visiting[g] {
            continue;
        }
        let (d, mut path) = longest(g, depths, edges, memo, visiting);
        if depths[f] + d > best.0 {
            path.insert(0, (g, pc));
            best = (depths[f] + d, path);
        }
    }
    visiting[f] = false;
    memo[f] = Some(best.clone());
    best
}
