//! Support for native code: the run setup, memory checks and helpers of the interpreter,
//! for the CPU JIT (`jit::cpu`) to call from generated code.
//!
//! ```text
//! Vm::run_job_native / run_mem_native
//!   ├─ same setup as run_job / run_mem: JobCtx, fixed regions, zeroed entry frame, budget
//!   ├─ body(&mut NativeRun, NativeEntry) ── generated code runs; calls back into
//!   │      NativeRun::check   (the interpreter's region walk, for accesses the code could
//!   │                          not prove itself)
//!   │      NativeRun::helper  (the interpreter's helper table)
//!   │      NativeRun::fail_*  (an ExecError with the interpreter's message)
//!   └─ same teardown: uncommitted ring buffer reservations discarded, last_insns
//! ```
//!
//! Native code and the interpreter thus share one definition of every region, helper and
//! error message; only the instruction semantics are generated twice (and compared by the
//! JIT's differential test).

use super::exec::{Ctl, Geo, Mem};
use super::{Env, ExecError, FRAME_SIZE, MAX_FRAMES, Region, Vm};
use crate::program::JobCtx;
use std::ptr::NonNull;

/// What native code gets at entry.
#[derive(Clone, Copy, Debug)]
pub struct NativeEntry {
    /// r1: the job ctx or the memory block.
    pub r1: u64,
    /// r2: 0, or the memory block's length.
    pub r2: u64,
    /// r10 of the entry frame: one past the end of the stack buffer.
    pub stack_top: u64,
    /// Start of the whole stack buffer ([`MAX_FRAMES`] frames of [`FRAME_SIZE`] bytes).
    pub stack_base: u64,
    /// The instruction budget of the run ([`Env::max_insns`]).
    pub budget: u64,
}

/// The interpreter state of one native run: regions, helper environment, and the error
/// that ended the run, if any.
pub struct NativeRun<'a> {
    vm: &'a Vm,
    mem: Mem<'a>,
    env: &'a mut Env,
    geo: Geo,
    top: u64,
    error: Option<ExecError>,
    left: u64,
}

impl std::fmt::Debug for NativeRun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeRun")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

/// What [`NativeRun::helper`] tells the generated code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelperOutcome {
    /// Continue with r0 = the value.
    Next(u64),
    /// The program ends now with r0 = 0 (helper `exit`).
    Exit,
    /// The helper failed; the error is recorded.
    Fault,
}

impl NativeRun<'_> {
    /// Sets the live stack to the frames from `r10 - FRAME_SIZE` (the deepest) to the top,
    /// as the interpreter's is at the same call depth.
    fn set_frame(&mut self, r10: u64) {
        if r10 <= self.top && self.top - r10 < (MAX_FRAMES * FRAME_SIZE) as u64 {
            self.mem.stack_lo = r10 - FRAME_SIZE as u64;
            self.mem.stack_span = self.top - self.mem.stack_lo;
        }
    }

    /// Whether `n` bytes at `a` may be accessed, for code whose frame pointer is `r10`:
    /// `Some((start, end))` of the region found (the caller may cache it), `None` when the
    /// access is invalid.
    pub fn check(&mut self, a: u64, n: u64, write: bool, r10: u64) -> Option<(u64, u64)> {
        self.set_frame(r10);
        if self.mem.stack_range(a, n) {
            return Some((self.mem.stack_lo, self.mem.stack_lo + self.mem.stack_span));
        }
        if self.mem.slow(a, n, write, &self.env.resv) {
            let (s, l) = if write {
                self.mem.hot_w
            } else {
                self.mem.hot_r
            };
            Some((s, s + l))
        } else {
            None
        }
    }

    /// Calls helper `id` with `args` (r1..r5) at `pc`, for code whose frame pointer is `r10`.
    pub fn helper(&mut self, id: i32, args: [u64; 5], pc: usize, r10: u64) -> HelperOutcome {
        self.set_frame(r10);
        let mut regs = [0u64; 16];
        regs[1..6].copy_from_slice(&args);
        regs[10] = r10;
        match self
            .vm
            .call_helper(id, &mut regs, &mut self.mem, self.env, pc, self.geo)
        {
            Ok(Ctl::Next) => HelperOutcome::Next(regs[0]),
            Ok(Ctl::Exit) => HelperOutcome::Exit,
            Err(e) => {
                self.error = Some(e);
                HelperOutcome::Fault
            }
        }
    }

    /// Records the interpreter's error for an invalid access of `n` bytes at `a`.
    pub fn fail_mem(&mut self, pc: usize, a: u64, n: u64, write: bool, r10: u64) {
        self.set_frame(r10);
        let msg = self.mem.describe(a, n, write, &self.env.resv);
        self.error = Some(self.vm.error(pc, msg));
    }

    /// Records the interpreter's "instruction limit exceeded" error.
    pub fn fail_limit(&mut self, pc: usize) {
        let max = self.env.max_insns;
        self.error = Some(self.vm.error(
            pc,
            format!("instruction limit exceeded ({max} instructions)"),
        ));
        self.left = 0;
    }

    /// Records an error at `pc`.
    pub fn fail(&mut self, pc: usize, msg: String) {
        self.error = Some(self.vm.error(pc, msg));
    }

    /// Sets the budget left at the end of the run (for [`Env::last_insns`]).
    pub fn set_left(&mut self, left: u64) {
        self.left = left;
    }

    /// Whether an error has been recorded.
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }
}

impl Env {
    /// The stack buffer for native code that needs no [`NativeRun`] (no helpers, no
    /// checks): `(base, top)`, the entry frame zeroed first when `zero` (as every run
    /// does). The caller sets [`Env::last_insns`] itself.
    #[inline]
    pub fn native_stack(&mut self, zero: bool) -> (u64, u64) {
        let words = self.stack.len();
        if zero {
            self.stack[words - FRAME_SIZE / 8..].fill(0);
        }
        let base = self.stack.as_mut_ptr() as u64;
        (base, base + (words * 8) as u64)
    }
}

impl Vm {
    /// An error at `pc`, located and disassembled as the interpreter's are.
    pub fn native_error(&self, pc: usize, msg: String) -> ExecError {
        self.error(pc, msg)
    }

    /// [`Vm::run_job`] with native code as the body: the same ctx, regions and helper
    /// environment; `body` returns r0 (ignored when it recorded an error). `zero_stack`:
    /// zero the entry frame as the interpreter does; code that never reads the stack may
    /// skip it.
    #[expect(
        clippy::too_many_arguments,
        reason = "run_job's arguments plus the body"
    )]
    pub fn run_job_native(
        &self,
        input: &[u8],
        output: &mut [u8],
        index: u64,
        n: u64,
        args: [u64; 4],
        env: &mut Env,
        zero_stack: bool,
        body: &mut dyn FnMut(&mut NativeRun, NativeEntry) -> u64,
    ) -> Result<u64, ExecError> {
        let ctx = Region::job_ctx(input, output, index, n, args);
        let ctx_addr = &ctx as *const JobCtx as u64;
        let fixed = Region::job(ctx_addr, &ctx);
        let r = self.run_native(ctx_addr, 0, fixed, Geo { index, n }, env, zero_stack, body);
        std::hint::black_box(&ctx);
        r
    }

    /// [`Vm::run_mem`] with native code as the body.
    pub fn run_mem_native(
        &self,
        mem: &mut [u8],
        env: &mut Env,
        zero_stack: bool,
        body: &mut dyn FnMut(&mut NativeRun, NativeEntry) -> u64,
    ) -> Result<u64, ExecError> {
        let start = mem.as_mut_ptr() as u64;
        let fixed = Region::mem(start, mem.len() as u64);
        self.run_native(
            start,
            mem.len() as u64,
            fixed,
            Geo { index: 0, n: 1 },
            env,
            zero_stack,
            body,
        )
    }

    /// [`crate::maps::MapOps::array_layout`] of bound map `i`.
    pub fn map_array_layout(&self, i: usize) -> Option<(usize, usize, u32)> {
        self.maps.get(i)?.array_layout()
    }

    /// The value `ld_imm64` at `pc` loads (map handles and global-data addresses resolved),
    /// or `None` when `pc` is not a `ld_imm64`.
    pub fn ld_imm64_value(&self, pc: usize) -> Option<u64> {
        let s = self.code.get(pc)?;
        (s.op == super::decode::Op::LdImm64).then_some(s.imm)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the run's setup, as Vm::run takes it"
    )]
    fn run_native(
        &self,
        r1: u64,
        r2: u64,
        fixed: [Region; 3],
        geo: Geo,
        env: &mut Env,
        zero_stack: bool,
        body: &mut dyn FnMut(&mut NativeRun, NativeEntry) -> u64,
    ) -> Result<u64, ExecError> {
        env.resv.clear();
        let words = env.stack.len();
        if zero_stack {
            env.stack[words - FRAME_SIZE / 8..].fill(0);
        }
        let base = env.stack.as_mut_ptr() as u64;
        let top = base + (words * 8) as u64;
        let budget = env.max_insns;
        let entry = NativeEntry {
            r1,
            r2,
            stack_top: top,
            stack_base: base,
            budget,
        };
        let mut run = NativeRun {
            vm: self,
            mem: Mem {
                stack_lo: top - FRAME_SIZE as u64,
                stack_span: FRAME_SIZE as u64,
                fixed,
                maps: &self.map_regions,
                hot_r: (0, 0),
                hot_w: (0, 0),
            },
            env,
            geo,
            top,
            error: None,
            left: budget,
        };
        let r0 = body(&mut run, entry);
        let NativeRun {
            error, left, env, ..
        } = run;
        env.last_insns = env.max_insns - left.min(env.max_insns);
        for r in env.resv.drain(..) {
            if let Some(p) = NonNull::new(r.start as *mut u8) {
                self.maps[r.map].ringbuf_commit(p, true);
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok(r0),
        }
    }
}
