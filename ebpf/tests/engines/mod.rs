//! Runs a program on both CPU engines, the interpreter and the native JIT (`jit::cpu`),
//! and checks that they agree: the same r0 or the same error (addresses blanked, since the
//! two runs use different buffers), the same memory and output afterwards, the same
//! instruction count. Returns the interpreter's result, so the interpreter tests run
//! unchanged on both engines.

#![allow(
    dead_code,
    reason = "shared by several test crates, each using a subset (an `expect` would be unfulfilled in some)"
)]

use ebpf::interp::{Env, ExecError, Vm};

fn twin(env: &Env) -> Env {
    let mut e = Env::new(env.thread).with_max_insns(env.max_insns);
    e.block_dim = env.block_dim;
    e.prandom = env.prandom;
    e.clock = env.clock;
    e
}

/// The error text with hex addresses blanked.
pub fn norm(e: &ExecError) -> String {
    let s = e.to_string();
    let mut out = String::new();
    let mut rest = s.as_str();
    while let Some(p) = rest.find("0x") {
        out.push_str(&rest[..p + 2]);
        rest = rest[p + 2..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
        out.push('?');
    }
    out.push_str(rest);
    out
}

fn compile(vm: &Vm) -> jit::cpu::CpuProgram {
    jit::cpu::compile(vm, &jit::cpu::CpuJitOptions::default()).unwrap_or_else(|e| {
        panic!(
            "the JIT cannot compile a program the interpreter runs: {e}\n{}",
            ebpf::asm::disasm(&vm.program().insns)
        )
    })
}

fn agree(vm: &Vm, a: &Result<u64, ExecError>, b: &Result<u64, ExecError>, ea: &Env, eb: &Env) {
    let show = || ebpf::asm::disasm(&vm.program().insns);
    assert_eq!(
        a.as_ref().map_err(norm),
        b.as_ref().map_err(norm),
        "interpreter vs JIT\n{}",
        show()
    );
    assert_eq!(
        ea.last_insns,
        eb.last_insns,
        "instruction counts\n{}",
        show()
    );
    assert_eq!(ea.trace, eb.trace, "trace output\n{}", show());
}

/// [`Vm::run_mem`] on both engines.
pub fn run_mem(vm: &Vm, mem: &mut [u8], env: &mut Env) -> Result<u64, ExecError> {
    let mut mem2 = mem.to_vec();
    let mut env2 = twin(env);
    let a = vm.run_mem(mem, env);
    let b = compile(vm).run_mem(vm, &mut mem2, &mut env2);
    agree(vm, &a, &b, env, &env2);
    assert_eq!(&mem[..], &mem2[..], "memory after the run");
    a
}

/// [`Vm::run_job`] on both engines.
pub fn run_job(
    vm: &Vm,
    input: &[u8],
    out: &mut [u8],
    index: u64,
    n: u64,
    args: [u64; 4],
    env: &mut Env,
) -> Result<u64, ExecError> {
    let mut out2 = out.to_vec();
    let mut env2 = twin(env);
    let a = vm.run_job(input, out, index, n, args, env);
    let b = compile(vm).run_job(vm, input, &mut out2, index, n, args, &mut env2);
    agree(vm, &a, &b, env, &env2);
    assert_eq!(&out[..], &out2[..], "output after the run");
    a
}

/// For unverified random programs: runs the JIT too when it compiles the program (it
/// must not crash), without comparing (unverified programs may read registers the two
/// engines leave differently uninitialized).
pub fn run_mem_lenient(vm: &Vm, mem: &mut [u8], env: &mut Env) -> Result<u64, ExecError> {
    if let Ok(p) = jit::cpu::compile(vm, &jit::cpu::CpuJitOptions::default()) {
        let mut mem2 = mem.to_vec();
        let _ = p.run_mem(vm, &mut mem2, &mut twin(env));
    }
    vm.run_mem(mem, env)
}

/// [`run_mem_lenient`] for [`Vm::run_job`].
pub fn run_job_lenient(
    vm: &Vm,
    input: &[u8],
    out: &mut [u8],
    index: u64,
    n: u64,
    args: [u64; 4],
    env: &mut Env,
) -> Result<u64, ExecError> {
    if let Ok(p) = jit::cpu::compile(vm, &jit::cpu::CpuJitOptions::default()) {
        let mut out2 = out.to_vec();
        let _ = p.run_job(vm, input, &mut out2, index, n, args, &mut twin(env));
    }
    vm.run_job(input, out, index, n, args, env)
}
