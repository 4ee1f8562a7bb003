//! Host probes: a program compiled once and called from the application's own threads
//! (the host-side CUDA API probes), where every nanosecond counts.
//!
//! ```text
//! HostProbe::new(program, maps, ctx_len) ── verify (ctx: ctx_len bytes) ── Vm ── JIT ─▶ HostProbe
//! probe.call(ctx_ptr, &mut env)            per event, any thread, one Env per thread
//! ```
//!
//! The probe's ctx is `ctx_len` bytes of the application's memory (r1 points to it, r2 holds
//! its length), readable and writable by the program, as in `Vm::run_mem`. Maps and helpers
//! are the interpreter's ([`ebpf::maps::MapOps`], the helper table). A program the JIT
//! cannot compile runs on the interpreter (a warning is logged); a program the verifier
//! rejects is a [`ProbeError`].

use super::{Engine, Executor};
use ebpf::interp::{Env, ExecError, Vm};
use ebpf::maps::MapOps;
use ebpf::program::Program;
use ebpf::verifier::{CtxKind, VerifyError, VerifyOptions};
use std::sync::Arc;
use std::time::Duration;

/// Why a probe could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The verifier rejected the program.
    #[error("probe `{name}`: the verifier rejects it")]
    Verify {
        /// Program name.
        name: String,
        /// The verifier's error.
        #[source]
        source: Box<VerifyError>,
    },
    /// The program could not be bound to its maps.
    #[error("probe `{name}`: cannot prepare it")]
    Prepare {
        /// Program name.
        name: String,
        /// The decoder's error.
        #[source]
        source: Box<ExecError>,
    },
}

/// A verified program, compiled once, callable from any thread.
#[derive(Debug)]
pub struct HostProbe {
    exec: Executor,
    ctx_len: usize,
}

impl HostProbe {
    /// Verifies `prog` for a ctx of `ctx_len` bytes, binds `maps` (indexed like
    /// `prog.maps`) and compiles it on `engine` (the interpreter when the JIT fails).
    pub fn new(
        prog: &Program,
        maps: Vec<Arc<dyn MapOps>>,
        ctx_len: usize,
        engine: Engine,
    ) -> Result<HostProbe, ProbeError> {
        let opts = VerifyOptions {
            ctx: CtxKind::Mem { len: ctx_len },
            ..VerifyOptions::default()
        };
        ebpf::verifier::verify(prog, &opts).map_err(|e| ProbeError::Verify {
            name: prog.name.clone(),
            source: Box::new(e),
        })?;
        let vm = Vm::new(prog, maps).map_err(|e| ProbeError::Prepare {
            name: prog.name.clone(),
            source: Box::new(e),
        })?;
        Ok(HostProbe {
            exec: Executor::verified(vm, engine),
            ctx_len,
        })
    }

    /// The engine that runs the probe.
    pub fn engine(&self) -> Engine {
        self.exec.engine()
    }

    /// Compile time of the native code.
    pub fn compile_time(&self) -> Option<Duration> {
        self.exec.compile_time()
    }

    /// The ctx length the probe was verified for.
    pub fn ctx_len(&self) -> usize {
        self.ctx_len
    }

    /// Runs the probe on `ctx` (exactly [`HostProbe::ctx_len`] bytes).
    ///
    /// # Panics
    /// When `ctx` has another length (the verifier's proofs assume this one).
    #[inline]
    pub fn call(&self, ctx: &mut [u8], env: &mut Env) -> Result<u64, ExecError> {
        assert_eq!(ctx.len(), self.ctx_len, "probe ctx length");
        self.exec.run_mem(ctx, env)
    }

    /// Runs the probe on the `ctx_len` bytes at `ctx`.
    ///
    /// # Safety
    /// `ctx` points to [`HostProbe::ctx_len`] bytes that are valid for reads and writes
    /// and not accessed by anything else during the call.
    #[inline]
    pub unsafe fn call_raw(&self, ctx: *mut u8, env: &mut Env) -> Result<u64, ExecError> {
        // SAFETY: per the contract, `ctx` is `ctx_len` exclusive, valid bytes.
        let ctx = unsafe { std::slice::from_raw_parts_mut(ctx, self.ctx_len) };
        self.exec.run_mem(ctx, env)
    }
}
