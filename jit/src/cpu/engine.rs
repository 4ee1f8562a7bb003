//! Engine selection: the interpreter or the native JIT behind one [`Executor`], with the
//! JIT's compile failures turned into an interpreter fallback, and a [`CodeCache`] of
//! compiled programs keyed by program hash.
//!
//! | requested        | compile ok        | compile fails                           |
//! |------------------|-------------------|-----------------------------------------|
//! | [`Engine::Interp`] | —               | —                                       |
//! | [`Engine::Jit`]    | native code     | interpreter, `tracing::warn!`, reason kept |

use super::{CpuJitOptions, CpuProgram, compile};
use crate::CompileError;
use ebpf::interp::{Env, ExecError, Vm};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

/// Which engine runs programs on the CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Engine {
    /// The reference interpreter (`ebpf::interp`).
    Interp,
    /// Native code from [`super::compile`] (the default).
    #[default]
    Jit,
}

impl Engine {
    /// `"interp"` or `"jit"`.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Interp => "interp",
            Engine::Jit => "jit",
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An engine name that is neither `interp` nor `jit`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown engine `{found}` (expected `interp` or `jit`)")]
pub struct ParseEngineError {
    /// The name given.
    pub found: String,
}

impl std::str::FromStr for Engine {
    type Err = ParseEngineError;

    fn from_str(s: &str) -> Result<Engine, ParseEngineError> {
        match s {
            "interp" | "interpreter" => Ok(Engine::Interp),
            "jit" => Ok(Engine::Jit),
            other => Err(ParseEngineError {
                found: other.to_string(),
            }),
        }
    }
}

/// Compiled programs by program hash (instructions plus the values their `ld_imm64`s
/// resolved to, so a program bound to other maps gets other code, and the options). Entries are weak: the
/// code lives as long as an [`Executor`] uses it.
#[derive(Default)]
pub struct CodeCache {
    map: Mutex<HashMap<u64, Weak<CpuProgram>>>,
}

impl std::fmt::Debug for CodeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeCache").finish_non_exhaustive()
    }
}

static GLOBAL: LazyLock<CodeCache> = LazyLock::new(CodeCache::default);

impl CodeCache {
    /// The process-wide cache.
    pub fn global() -> &'static CodeCache {
        &GLOBAL
    }

    /// The hash a program is cached under.
    pub fn key(vm: &Vm, opts: &CpuJitOptions) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        opts.hash(&mut h);
        let prog = vm.program();
        for (pc, i) in prog.insns.iter().enumerate() {
            i.to_bytes().hash(&mut h);
            if let Some(v) = vm.ld_imm64_value(pc) {
                v.hash(&mut h);
            }
        }
        h.finish()
    }

    /// The cached code of `vm`'s program, or a fresh compilation (cached on success).
    /// The flag says whether it came from the cache.
    pub fn get_or_compile(
        &self,
        vm: &Vm,
        opts: &CpuJitOptions,
    ) -> Result<(Arc<CpuProgram>, bool), CompileError> {
        let key = Self::key(vm, opts);
        if !opts.inject_internal_error
            && let Some(p) = self.lock().get(&key).and_then(Weak::upgrade)
        {
            return Ok((p, true));
        }
        let p = Arc::new(compile(vm, opts)?);
        let mut m = self.lock();
        m.retain(|_, w| w.strong_count() > 0);
        m.insert(key, Arc::downgrade(&p));
        Ok((p, false))
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.lock()
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// Whether no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Weak<CpuProgram>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A program ready to run on the engine asked for, or on the interpreter when the JIT
/// could not compile it. Like [`Vm`], it is `Send + Sync`: threads share one, each with
/// its own [`Env`].
pub struct Executor {
    vm: Vm,
    native: Option<Arc<CpuProgram>>,
    requested: Engine,
    fallback: Option<CompileError>,
    cached: bool,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("prog", &self.vm.program().name)
            .field("engine", &self.engine())
            .field("fallback", &self.fallback)
            .finish_non_exhaustive()
    }
}

impl Executor {
    /// `vm` on `engine`, through the global [`CodeCache`], with every access checked
    /// (for programs that may not have been verified).
    pub fn new(vm: Vm, engine: Engine) -> Executor {
        Executor::with_options(vm, engine, &CpuJitOptions::default(), CodeCache::global())
    }

    /// `vm` on `engine` for a program the verifier accepted for the ctx it runs with
    /// ([`CpuJitOptions::verified`]: no bounds checks in the native code).
    pub fn verified(vm: Vm, engine: Engine) -> Executor {
        Executor::with_options(vm, engine, &CpuJitOptions::verified(), CodeCache::global())
    }

    /// `vm` on `engine`, with JIT options and a cache.
    pub fn with_options(
        vm: Vm,
        engine: Engine,
        opts: &CpuJitOptions,
        cache: &CodeCache,
    ) -> Executor {
        let mut ex = Executor {
            vm,
            native: None,
            requested: engine,
            fallback: None,
            cached: false,
        };
        if engine == Engine::Jit {
            match cache.get_or_compile(&ex.vm, opts) {
                Ok((p, cached)) => {
                    ex.native = Some(p);
                    ex.cached = cached;
                }
                Err(e) => {
                    tracing::warn!(
                        prog = %ex.vm.program().name,
                        error = %e,
                        "JIT compile failed; running on the interpreter"
                    );
                    ex.fallback = Some(e);
                }
            }
        }
        ex
    }

    /// The engine that runs the program.
    pub fn engine(&self) -> Engine {
        if self.native.is_some() {
            Engine::Jit
        } else {
            Engine::Interp
        }
    }

    /// The engine asked for.
    pub fn requested(&self) -> Engine {
        self.requested
    }

    /// Why the JIT was asked for but the interpreter runs.
    pub fn fallback_reason(&self) -> Option<&CompileError> {
        self.fallback.as_ref()
    }

    /// Compile time of the native code (of its first compilation when it came from the
    /// cache).
    pub fn compile_time(&self) -> Option<Duration> {
        self.native.as_ref().map(|p| p.compile_time())
    }

    /// Whether the native code came from the cache.
    pub fn cached(&self) -> bool {
        self.cached
    }

    /// The decoded program.
    pub fn vm(&self) -> &Vm {
        &self.vm
    }

    /// [`Vm::run_job`] on the selected engine.
    #[inline]
    pub fn run_job(
        &self,
        input: &[u8],
        output: &mut [u8],
        index: u64,
        n: u64,
        args: [u64; 4],
        env: &mut Env,
    ) -> Result<u64, ExecError> {
        match &self.native {
            Some(p) => p.run_job(&self.vm, input, output, index, n, args, env),
            None => self.vm.run_job(input, output, index, n, args, env),
        }
    }

    /// [`Vm::run_mem`] on the selected engine.
    #[inline]
    pub fn run_mem(&self, mem: &mut [u8], env: &mut Env) -> Result<u64, ExecError> {
        match &self.native {
            Some(p) => p.run_mem(&self.vm, mem, env),
            None => self.vm.run_mem(mem, env),
        }
    }
}
