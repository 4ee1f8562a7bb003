//! The native CPU back end: eBPF → Cranelift IR → machine code (x86-64, aarch64), run in
//! the interpreter's environment.
//!
//! ```text
//! ebpf::Program + Vm ──[lower::front: the PTX back end's decoder, functions, run lengths]
//!     ──[lower: Cranelift IR per function]──[cranelift-codegen]──[cranelift-jit]──▶ CpuProgram
//! CpuProgram::run_job / run_mem ──▶ Vm::run_*_native (ctx, regions, stack, helpers) ──▶ code
//! ```
//!
//! | module        | owns                                                              |
//! |---------------|-------------------------------------------------------------------|
//! | [`lower`]     | the IR of every instruction, memory checks, budget charging        |
//! | [`runtime`]   | the block the code gets ([`runtime::Rt`]) and its `extern "C"` trampolines |
//! | [`engine`]    | [`Engine`] selection, [`Executor`] (JIT with interpreter fallback), [`CodeCache`] |
//! | [`probe`]     | [`HostProbe`]: verify + compile once, call from the application's threads |
//!
//! Safety: the code keeps the interpreter's guarantee. Every load, store and atomic whose
//! address is not `r10 + k` inside the current frame is checked inline against the live
//! stack and the last region hit, and otherwise by the interpreter's own region walk
//! ([`ebpf::interp::NativeRun::check`]); a failed check ends the run with the interpreter's
//! error. Helpers are the interpreter's, called through one trampoline. The instruction
//! budget is charged as the interpreter charges it.
//!
//! A compile failure (an unsupported form, a Cranelift error, a panic inside Cranelift)
//! is a [`CompileError`]; [`Executor`] then runs the interpreter and logs a warning.

pub mod engine;
pub mod lower;
pub mod probe;
pub mod runtime;

pub use engine::{CodeCache, Engine, Executor, ParseEngineError};
pub use probe::{HostProbe, ProbeError};

use crate::CompileError;
use cranelift_codegen::ir::UserFuncName;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::{Context, isa::OwnedTargetIsa};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module};
use ebpf::interp::{Env, ExecError, NativeEntry, NativeRun, Vm};
use runtime::{EMPTY_HOT, Rt};
use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// Options of a CPU compilation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CpuJitOptions {
    /// The verifier accepted the program for the ctx it will run with, so every memory
    /// access is proven in bounds: emit no bounds checks (the PTX back end's rule). Off:
    /// every access the interpreter checks is checked (default).
    pub trust_verifier: bool,
    /// Charge the instruction budget exactly as the interpreter does (`Env::max_insns`,
    /// `Env::last_insns`, "instruction limit exceeded"); default on. Off: no budget (the
    /// verifier proves that verified programs terminate) and `last_insns` stays 0.
    pub meter_budget: bool,
    /// Fault injection for tests: fail with [`CompileError::Backend`] as an internal error
    /// of the code generator would.
    pub inject_internal_error: bool,
}

impl Default for CpuJitOptions {
    fn default() -> Self {
        CpuJitOptions {
            trust_verifier: false,
            meter_budget: true,
            inject_internal_error: false,
        }
    }
}

impl CpuJitOptions {
    /// For a program the verifier accepted for the ctx it runs with: no bounds checks,
    /// the budget metered.
    pub fn verified() -> Self {
        CpuJitOptions {
            trust_verifier: true,
            ..CpuJitOptions::default()
        }
    }
}

/// The signature of the generated entry: `(rt, r1, r2, r3, r4, r5, r10) -> r0`.
type EntryFn = unsafe extern "C" fn(*mut Rt, u64, u64, u64, u64, u64, u64) -> u64;

/// A compiled program: machine code plus its entry point.
pub struct CpuProgram {
    module: Option<JITModule>,
    /// Whether the code may read the stack (else the entry frame need not be zeroed).
    reads_stack: bool,
    /// The code calls no helper and checks nothing (it trusts the verifier): it runs
    /// without a [`NativeRun`], its faults recorded in [`Rt::fault`].
    direct: bool,
    entry: EntryFn,
    compile_time: Duration,
    insns: usize,
}

// SAFETY: the module is finalized before `CpuProgram` is built and never touched again
// except to free it in `Drop`; the code it holds is immutable and re-entrant (all run state
// lives in the `Rt` and `NativeRun` of each call).
unsafe impl Send for CpuProgram {}
// SAFETY: as above: shared access only executes immutable code.
unsafe impl Sync for CpuProgram {}

impl Drop for CpuProgram {
    fn drop(&mut self) {
        if let Some(m) = self.module.take() {
            // SAFETY: no code of this module can run any more: runs borrow `self`.
            unsafe { m.free_memory() };
        }
    }
}

impl std::fmt::Debug for CpuProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuProgram")
            .field("insns", &self.insns)
            .field("compile_time", &self.compile_time)
            .finish_non_exhaustive()
    }
}

static ISA: LazyLock<Result<OwnedTargetIsa, String>> = LazyLock::new(|| {
    let mut flags = settings::builder();
    let set = |f: &mut settings::Builder, k: &str, v: &str| {
        f.set(k, v)
            .map_err(|e| format!("cranelift setting {k}={v}: {e}"))
    };
    set(&mut flags, "opt_level", "speed")?;
    set(&mut flags, "enable_verifier", "false")?;
    set(&mut flags, "is_pic", "false")?;
    let isa = cranelift_native::builder().map_err(|e| format!("no native target: {e}"))?;
    isa.finish(settings::Flags::new(flags))
        .map_err(|e| format!("cranelift target: {e}"))
});

fn backend(what: impl std::fmt::Display) -> CompileError {
    CompileError::Backend {
        what: what.to_string(),
    }
}

/// Compiles the program of `vm` (decoded and bound to its maps) to native code.
///
/// The program should be verified: the JIT keeps every memory check the interpreter
/// makes, but it only supports the structure verified programs have (jumps within their
/// function, no fall-through into another function).
pub fn compile(vm: &Vm, opts: &CpuJitOptions) -> Result<CpuProgram, CompileError> {
    let t0 = Instant::now();
    if opts.inject_internal_error {
        return Err(backend(
            "injected internal error (CpuJitOptions::inject_internal_error)",
        ));
    }
    // Cranelift reports most problems as errors, but a panic is an internal error too.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compile_inner(vm, opts)));
    let (module, entry, front) = match r {
        Ok(r) => r?,
        Err(p) => {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            return Err(backend(format!("code generator panicked: {what}")));
        }
    };
    let compile_time = t0.elapsed();
    tracing::debug!(
        prog = %vm.program().name,
        insns = vm.program().insns.len(),
        us = compile_time.as_micros() as u64,
        "compiled to native code"
    );
    let direct = opts.trust_verifier && !front.calls_helpers;
    Ok(CpuProgram {
        module: Some(module),
        reads_stack: front.reads_stack,
        direct,
        entry,
        compile_time,
        insns: vm.program().insns.len(),
    })
}

fn compile_inner(
    vm: &Vm,
    opts: &CpuJitOptions,
) -> Result<(JITModule, EntryFn, lower::Front), CompileError> {
    let prog = vm.program();
    let front = lower::front(prog)?;
    let isa = ISA.as_ref().map_err(backend)?.clone();
    let cc = isa.default_call_conv();
    let frontend = isa.frontend_config();
    let mut module = JITModule::new(JITBuilder::with_isa(
        isa,
        cranelift_module::default_libcall_names(),
    ));
    let sig = lower::func_signature(cc);
    let mut ids = lower::FuncIds::new();
    for (k, &s) in front.starts.iter().enumerate() {
        let id = module
            .declare_function(&format!("bpf_f{k}_{s}"), Linkage::Local, &sig)
            .map_err(backend)?;
        ids.insert(s, id);
    }
    let mut ctx = Context::new();
    let mut fctx = FunctionBuilderContext::new();
    for (k, &start) in front.starts.iter().enumerate() {
        let end = front.starts.get(k + 1).copied().unwrap_or(prog.insns.len());
        ctx.func.signature = sig.clone();
        ctx.func.name = UserFuncName::user(0, k as u32);
        let mut refs = HashMap::new();
        for (&s, &id) in &ids {
            refs.insert(s, module.declare_func_in_func(id, &mut ctx.func));
        }
        let env = lower::FnEnv {
            prog,
            vm,
            front: &front,
            start,
            end,
            ids: &refs,
            call_conv: cc,
            frontend,
            entry: start == 0,
            opts,
        };
        lower::lower_function(&env, FunctionBuilder::new(&mut ctx.func, &mut fctx))?;
        let disasm = tracing::enabled!(target: "bpftime::jit", tracing::Level::TRACE);
        ctx.set_disasm(disasm);
        module
            .define_function(ids[&start], &mut ctx)
            .map_err(|e| backend(format!("function at pc {start}: {e:?}")))?;
        if disasm && let Some(v) = ctx.compiled_code().and_then(|c| c.vcode.as_ref()) {
            tracing::trace!(target: "bpftime::jit", pc = start, "machine code:\n{v}");
        }
        module.clear_context(&mut ctx);
    }
    module.finalize_definitions().map_err(backend)?;
    let code = module.get_finalized_function(ids[&0]);
    // SAFETY: the function at pc 0 was defined with `lower::func_signature`, which is the
    // `EntryFn` ABI on this target's default calling convention (the C one).
    let entry = unsafe { std::mem::transmute::<*const u8, EntryFn>(code) };
    Ok((module, entry, front))
}

impl CpuProgram {
    /// Time the compilation took.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// Instruction slots of the program.
    pub fn insns(&self) -> usize {
        self.insns
    }

    fn enter(&self, run: &mut NativeRun, e: NativeEntry) -> u64 {
        // Budgets are kept below 2^63 (the code tests "negative after subtracting").
        let budget = e.budget.min(i64::MAX as u64);
        let mut rt = Rt {
            hot_r: EMPTY_HOT,
            hot_w: EMPTY_HOT,
            left: budget,
            status: 0,
            stack_top: e.stack_top,
            ret_pc: 0,
            run: run as *mut NativeRun as *mut (),
            fault: [0; 3],
        };
        // SAFETY: `entry` is this module's code for the program `vm` was built from (the
        // caller passes the same `Vm`); `rt` and `run` outlive the call and nothing else
        // uses `run` during it; the stack from `stack_base` to `stack_top` is the run's.
        let r0 = unsafe { (self.entry)(&mut rt, e.r1, e.r2, 0, 0, 0, e.stack_top) };
        run.set_left(rt.left + (e.budget - budget));
        r0
    }

    /// A run without [`NativeRun`] (see `direct`): r1, r2 as given.
    #[inline]
    fn run_direct(&self, vm: &Vm, r1: u64, r2: u64, env: &mut Env) -> Result<u64, ExecError> {
        let (_, top) = env.native_stack(self.reads_stack);
        let budget = env.max_insns.min(i64::MAX as u64);
        let mut rt = Rt {
            hot_r: EMPTY_HOT,
            hot_w: EMPTY_HOT,
            left: budget,
            status: 0,
            stack_top: top,
            ret_pc: 0,
            run: std::ptr::null_mut(),
            fault: [0; 3],
        };
        // SAFETY: `entry` is this module's code for `vm`'s program, compiled with no helper
        // call and no check (so it never uses `rt.run`); `rt` outlives the call; the stack
        // below `top` is `env`'s, borrowed for the call; r1 (and r2) describe memory the
        // caller keeps alive for the call.
        let r0 = unsafe { (self.entry)(&mut rt, r1, r2, 0, 0, 0, top) };
        let left = rt.left + (env.max_insns - budget);
        env.last_insns = env.max_insns - left.min(env.max_insns);
        if rt.status == runtime::STATUS_FAULT {
            let [kind, pc, a] = rt.fault;
            return Err(
                vm.native_error(pc as usize, runtime::fault_message(kind, a, env.max_insns))
            );
        }
        Ok(r0)
    }

    /// [`Vm::run_job`] on native code. `vm` must be the `Vm` this program was compiled from.
    #[expect(clippy::too_many_arguments, reason = "the arguments of Vm::run_job")]
    pub fn run_job(
        &self,
        vm: &Vm,
        input: &[u8],
        output: &mut [u8],
        index: u64,
        n: u64,
        args: [u64; 4],
        env: &mut Env,
    ) -> Result<u64, ExecError> {
        if self.direct {
            let data = input.as_ptr() as u64;
            let out = output.as_mut_ptr() as u64;
            let ctx = ebpf::program::JobCtx {
                data,
                data_end: data + input.len() as u64,
                out,
                out_end: out + output.len() as u64,
                index,
                n,
                args,
            };
            let r = self.run_direct(vm, &ctx as *const _ as u64, 0, env);
            std::hint::black_box(&ctx);
            return r;
        }
        vm.run_job_native(
            input,
            output,
            index,
            n,
            args,
            env,
            self.reads_stack,
            &mut |run, e| self.enter(run, e),
        )
    }

    /// [`Vm::run_mem`] on native code. `vm` must be the `Vm` this program was compiled from.
    #[inline]
    pub fn run_mem(&self, vm: &Vm, mem: &mut [u8], env: &mut Env) -> Result<u64, ExecError> {
        if self.direct {
            return self.run_direct(vm, mem.as_mut_ptr() as u64, mem.len() as u64, env);
        }
        vm.run_mem_native(mem, env, self.reads_stack, &mut |run, e| self.enter(run, e))
    }
}
