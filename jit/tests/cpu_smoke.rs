//! The native CPU JIT on small programs: results equal the interpreter's, faults are the
//! interpreter's errors, and a forced internal error falls back to the interpreter.

use ebpf::asm::assemble;
use ebpf::interp::{Env, Vm};
use ebpf::maps::create_local;
use ebpf::program::{MapDef, MapKind, MapOrigin, Program};
use jit::cpu::{CodeCache, CpuJitOptions, Engine, Executor};

fn vm(src: &str, maps: &[MapDef]) -> Vm {
    let mut p = Program::from_insns("t", assemble(src).unwrap());
    p.maps = maps.to_vec();
    let live = maps.iter().map(|d| create_local(d, 1).unwrap()).collect();
    Vm::new(&p, live).unwrap()
}

/// The error text with addresses blanked (the two runs use different buffers).
fn norm(e: ebpf::interp::ExecError) -> String {
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

fn both(src: &str, mem_len: usize) -> (Result<u64, String>, Result<u64, String>) {
    let v = vm(src, &[]);
    let mut m1: Vec<u8> = (0..mem_len).map(|i| i as u8).collect();
    let mut m2 = m1.clone();
    let a = v.run_mem(&mut m1, &mut Env::new(0)).map_err(norm);
    let p = jit::cpu::compile(&v, &CpuJitOptions::default()).expect("compiles");
    let b = p.run_mem(&v, &mut m2, &mut Env::new(0)).map_err(norm);
    assert_eq!(m1, m2, "memory differs for {src}");
    (a, b)
}

#[test]
fn loops_and_memory() {
    for src in [
        "r0 = 0\nr2 = 0\nl:\nr0 += r2\nr2 += 1\nif r2 < 10000 goto l\nexit",
        "r0 = 0\nr2 = 0\nl:\nr3 = r1\nr3 += r2\nr4 = *(u32 *)(r3 + 0)\nr0 += r4\nr2 += 4\nif r2 < 64 goto l\nexit",
        "r0 = 7\n*(u64 *)(r10 - 8) = r0\nr2 = r10\nr2 += -8\nr0 = *(u64 *)(r2 + 0)\nr0 *= 3\n*(u32 *)(r1 + 4) = r0\nexit",
        "r0 = *(u64 *)(r1 + 60)\nexit",
        "r0 = -7\nr0 s/= 2\nr1 = 0\nr0 /= r1\nexit",
        "r0 = 5\nr2 = 8\nlock *(u64 *)(r1 + 8) += r2\nr0 = *(u64 *)(r1 + 8)\nexit",
        "r0 = 5\nr2 = 8\nlock *(u64 *)(r1 + 9) += r2\nexit",
    ] {
        let (a, b) = both(src, 64);
        assert_eq!(a, b, "{src}");
    }
}

#[test]
fn map_lookup_and_update() {
    let d = MapDef {
        name: "a".into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size: 8,
        max_entries: 4,
        flags: 0,
        origin: MapOrigin::Manual,
        init: None,
    };
    let src = "r6 = 0\nr7 = 0\nl:\nr1 = r6\nr1 &= 3\n*(u32 *)(r10 - 4) = r1\nr1 = map_idx[0] ll\nr2 = r10\nr2 += -4\ncall map_lookup_elem\nif r0 == 0 goto n\nr1 = *(u64 *)(r0 + 0)\nr1 += r6\n*(u64 *)(r0 + 0) = r1\nr7 += r1\nn:\nr6 += 1\nif r6 < 100 goto l\nr0 = r7\nexit";
    let v1 = vm(src, std::slice::from_ref(&d));
    let v2 = vm(src, std::slice::from_ref(&d));
    let a = v1.run_mem(&mut [0u8; 8], &mut Env::new(0)).unwrap();
    let ex = Executor::new(v2, Engine::Jit);
    assert_eq!(ex.engine(), Engine::Jit);
    let b = ex.run_mem(&mut [0u8; 8], &mut Env::new(0)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn forced_internal_error_falls_back_to_the_interpreter() {
    let v = vm("r0 = 42\nexit", &[]);
    let opts = CpuJitOptions {
        inject_internal_error: true,
        ..CpuJitOptions::default()
    };
    let ex = Executor::with_options(v, Engine::Jit, &opts, &CodeCache::default());
    assert_eq!(ex.engine(), Engine::Interp);
    assert!(matches!(
        ex.fallback_reason(),
        Some(jit::CompileError::Backend { .. })
    ));
    assert_eq!(ex.run_mem(&mut [0u8; 8], &mut Env::new(0)).unwrap(), 42);
}

#[test]
fn host_probe_counts_calls_from_two_threads() {
    use jit::cpu::HostProbe;
    let d = MapDef {
        name: "calls".into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size: 8,
        max_entries: 1,
        flags: 0,
        origin: MapOrigin::Manual,
        init: None,
    };
    // ctx: 16 bytes; counts calls in calls[0] and returns ctx[0] + ctx[8].
    let src = "r6 = r1\n*(u32 *)(r10 - 4) = 0\nr1 = map_idx[0] ll\nr2 = r10\nr2 += -4\ncall map_lookup_elem\nif r0 == 0 goto out\nr1 = 1\nlock *(u64 *)(r0 + 0) += r1\nout:\nr0 = *(u64 *)(r6 + 0)\nr1 = *(u64 *)(r6 + 8)\nr0 += r1\nexit";
    let mut p = Program::from_insns("probe", assemble(src).unwrap());
    p.maps = vec![d.clone()];
    let map = create_local(&d, 1).unwrap();
    let probe = HostProbe::new(&p, vec![map.clone()], 16, Engine::Jit).unwrap();
    assert_eq!(probe.engine(), Engine::Jit);
    assert!(probe.compile_time().is_some());
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let probe = &probe;
            s.spawn(move || {
                let mut env = Env::new(t as usize);
                for i in 0..1000u64 {
                    let mut ctx = [0u8; 16];
                    ctx[..8].copy_from_slice(&i.to_le_bytes());
                    ctx[8..].copy_from_slice(&t.to_le_bytes());
                    // SAFETY: ctx is 16 bytes on this thread's stack.
                    let r0 = unsafe { probe.call_raw(ctx.as_mut_ptr(), &mut env) }.unwrap();
                    assert_eq!(r0, i + t);
                }
            });
        }
    });
    let count = map.lookup(&0u32.to_le_bytes(), 0).unwrap();
    // SAFETY: the value is 8 bytes of the live map, no probe runs any more.
    assert_eq!(unsafe { (count.as_ptr() as *const u64).read() }, 2000);
    // Rejected programs are errors, not panics.
    let bad = Program::from_insns("bad", assemble("r0 = *(u64 *)(r1 + 16)\nexit").unwrap());
    assert!(matches!(
        HostProbe::new(&bad, vec![], 16, Engine::Jit),
        Err(jit::cpu::ProbeError::Verify { .. })
    ));
}
