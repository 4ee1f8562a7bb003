//! Benchmarks of bpftime-super's reference interpreter against rbpf 0.4.1's interpreter.
//!
//! The same bytecode runs in both, in the same process, on the same host:
//!
//! | program      | what it stresses                                                    |
//! |--------------|---------------------------------------------------------------------|
//! | `exit_only`  | `r0 = 0; exit`: the fixed cost of one run (setup, stack, return)     |
//! | `alu_line`   | 256 straight-line 32/64-bit ALU instructions (dispatch, no branches)|
//! | `loop_sum`   | `sum 0..10000`: a 3-instruction loop (dispatch + taken branches)    |
//! | `mem_sum`    | sum of 1024 `u32`s of a 4 KiB buffer (checked loads off r1)          |
//! | `map_lookup` | 1000 × (array `map_lookup_elem` + read-modify-write of the value)    |
//!
//! `map_lookup`: rbpf has no maps, so helper 1 is registered in rbpf as an equivalent array
//! lookup (read the `u32` key, bounds-check it against 64 entries, return a pointer into a
//! static table registered as allowed memory). Ours runs the real helper: map handle
//! decoding, a checked read of the key, a `dyn MapOps` lookup in an in-process array map,
//! and region checks on the value accesses — strictly more work than rbpf's helper, which
//! does not validate its pointer argument.
//!
//! Timing: per program, a calibration sizes batches to about 5 ms for each interpreter, one
//! warm-up batch each runs, then batches alternate between the two interpreters (so both
//! see the same background load) and the median per-run time of each is kept.

use ebpf::interp::{Env, Vm};
use ebpf::isa::{Insn, insns_to_bytes};
use ebpf::maps::{MapOps, create_local};
use ebpf::program::{MapDef, MapKind, MapOrigin, Program};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

/// One benchmark program.
pub struct BenchProgram {
    /// Short name.
    pub name: &'static str,
    /// The bytecode (identical for both interpreters).
    pub insns: Vec<Insn>,
    /// Maps (only `map_lookup` has one).
    pub maps: Vec<MapDef>,
    /// Size of the memory block r1 points to.
    pub mem_len: usize,
}

/// Entries of the `map_lookup` array.
pub const TABLE_LEN: usize = 64;

fn alu_line() -> String {
    let mut s = String::from("r0 = 1\nr3 = 3\nr4 = 4\nr5 = 5\nr6 = 6\nr7 = 7\n");
    let body = [
        "r0 += r3",
        "r3 *= 7",
        "r4 ^= r0",
        "w5 += 3",
        "r6 >>= 3",
        "r0 |= r6",
        "w3 = w4",
        "r4 -= 12345",
        "r7 += r4",
        "w7 *= w5",
        "r5 <<= 2",
        "r0 ^= r7",
        "r6 += r5",
        "w4 ^= 0x55",
        "r3 &= r0",
        "r6 -= r3",
    ];
    for i in 0..256 {
        s.push_str(body[i % body.len()]);
        s.push('\n');
    }
    s.push_str("exit\n");
    s
}

const LOOP_SUM: &str = "
    r0 = 0
    r2 = 0
loop:
    r0 += r2
    r2 += 1
    if r2 < 10000 goto loop
    exit";

const MEM_SUM: &str = "
    r0 = 0
    r2 = 0
loop:
    r3 = r1
    r3 += r2
    r4 = *(u32 *)(r3 + 0)
    r0 += r4
    r2 += 4
    if r2 < 4096 goto loop
    exit";

const MAP_LOOKUP: &str = "
    r6 = 0
    r7 = 0
loop:
    r1 = r6
    r1 &= 63
    *(u32 *)(r10 - 4) = r1
    r1 = map_idx[0] ll
    r2 = r10
    r2 += -4
    call map_lookup_elem
    if r0 == 0 goto next
    r1 = *(u64 *)(r0 + 0)
    r1 += r6
    *(u64 *)(r0 + 0) = r1
    r7 += r1
next:
    r6 += 1
    if r6 < 1000 goto loop
    r0 = r7
    exit";

/// The benchmark programs.
pub fn programs() -> Vec<BenchProgram> {
    let asm = |s: &str| ebpf::asm::assemble(s).expect("benchmark programs assemble");
    vec![
        BenchProgram {
            name: "exit_only",
            insns: asm("r0 = 0\nexit"),
            maps: vec![],
            mem_len: 8,
        },
        BenchProgram {
            name: "alu_line",
            insns: asm(&alu_line()),
            maps: vec![],
            mem_len: 8,
        },
        BenchProgram {
            name: "loop_sum",
            insns: asm(LOOP_SUM),
            maps: vec![],
            mem_len: 8,
        },
        BenchProgram {
            name: "mem_sum",
            insns: asm(MEM_SUM),
            maps: vec![],
            mem_len: 4096,
        },
        BenchProgram {
            name: "map_lookup",
            insns: asm(MAP_LOOKUP),
            maps: vec![MapDef {
                name: "table".into(),
                kind: MapKind::Array,
                key_size: 4,
                value_size: 8,
                max_entries: TABLE_LEN as u32,
                flags: 0,
                origin: MapOrigin::Manual,
                init: None,
            }],
            mem_len: 8,
        },
    ]
}

fn mem_for(p: &BenchProgram) -> Vec<u8> {
    (0..p.mem_len).map(|i| (i * 7 + 3) as u8).collect()
}

/// Our interpreter, ready to run one program repeatedly.
pub struct Ours {
    /// The decoded program.
    pub vm: Vm,
    env: Env,
    mem: Vec<u8>,
}

impl Ours {
    /// Prepares `p` with fresh in-process maps.
    pub fn new(p: &BenchProgram) -> Ours {
        let mut prog = Program::from_insns(p.name, p.insns.clone());
        prog.maps = p.maps.clone();
        let maps: Vec<Arc<dyn MapOps>> = p
            .maps
            .iter()
            .map(|d| create_local(d, 1).expect("bench maps are valid"))
            .collect();
        Ours {
            vm: Vm::new(&prog, maps).expect("bench programs decode"),
            env: Env::new(0),
            mem: mem_for(p),
        }
    }

    /// One run.
    pub fn run(&mut self) -> u64 {
        self.vm
            .run_mem(&mut self.mem, &mut self.env)
            .expect("bench programs run")
    }
}

/// Our JIT (`jit::cpu`), ready to run one program repeatedly.
pub struct OursJit {
    ex: jit::cpu::Executor,
    env: Env,
    mem: Vec<u8>,
}

impl OursJit {
    /// Compiles `p` with fresh in-process maps (no code cache, so each is compiled), as
    /// the service does: verified (`CpuJitOptions::verified`).
    pub fn new(p: &BenchProgram) -> OursJit {
        OursJit::with_options(p, &jit::cpu::CpuJitOptions::verified())
    }

    /// [`OursJit::new`] with other options. Options that trust the verifier are only
    /// given programs it accepts (checked here).
    pub fn with_options(p: &BenchProgram, opts: &jit::cpu::CpuJitOptions) -> OursJit {
        let vm = Ours::new(p).vm;
        if opts.trust_verifier {
            let vopts = ebpf::verifier::VerifyOptions {
                ctx: ebpf::verifier::CtxKind::Mem { len: p.mem_len },
                ..Default::default()
            };
            if let Err(e) = ebpf::verifier::verify(vm.program(), &vopts) {
                panic!("{}: the verifier rejects it: {e}", p.name);
            }
        }
        let ex = jit::cpu::Executor::with_options(
            vm,
            jit::cpu::Engine::Jit,
            opts,
            &jit::cpu::CodeCache::default(),
        );
        assert_eq!(ex.engine(), jit::cpu::Engine::Jit, "{} compiles", p.name);
        OursJit {
            ex,
            env: Env::new(0),
            mem: mem_for(p),
        }
    }

    /// One run.
    pub fn run(&mut self) -> u64 {
        self.ex
            .run_mem(&mut self.mem, &mut self.env)
            .expect("bench programs run")
    }
}

/// rbpf's table for helper 1 (see the module docs).
static RBPF_TABLE: [AtomicU64; TABLE_LEN] = [const { AtomicU64::new(0) }; TABLE_LEN];

/// Helper 1 for rbpf: an array lookup equivalent to `map_lookup_elem` on a 64-entry array.
fn rbpf_array_lookup(_map: u64, key: u64, _a: u64, _b: u64, _c: u64) -> u64 {
    // SAFETY: the benchmark program always passes a pointer to 4 bytes of its stack.
    let k = unsafe { (key as *const u32).read_unaligned() } as usize;
    RBPF_TABLE.get(k).map(|v| v.as_ptr() as u64).unwrap_or(0)
}

/// Resets rbpf's table to zeros.
pub fn reset_rbpf_table() {
    for v in &RBPF_TABLE {
        v.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// rbpf's interpreter (`EbpfVmMbuff::execute_program`, r1 = the memory block).
pub struct Theirs {
    vm: rbpf::EbpfVmMbuff<'static>,
    mem: Vec<u8>,
}

impl Theirs {
    /// Prepares `p` (the bytecode is leaked to satisfy rbpf's lifetime).
    pub fn new(p: &BenchProgram) -> Theirs {
        let bytes: &'static [u8] = Box::leak(insns_to_bytes(&p.insns).into_boxed_slice());
        let mut vm = rbpf::EbpfVmMbuff::new(Some(bytes)).expect("rbpf accepts bench programs");
        vm.register_helper(1, rbpf_array_lookup)
            .expect("helper registers");
        let start = RBPF_TABLE.as_ptr() as u64;
        vm.register_allowed_memory(start..start + (TABLE_LEN * 8) as u64);
        Theirs {
            vm,
            mem: mem_for(p),
        }
    }

    /// One run.
    pub fn run(&mut self) -> u64 {
        self.vm
            .execute_program(&self.mem, &[])
            .expect("rbpf runs bench programs")
    }
}

/// rbpf's x86-64 JIT (`EbpfVmRaw::jit_compile`, r1 = the memory block).
pub struct TheirsJit {
    vm: rbpf::EbpfVmRaw<'static>,
    mem: *mut u8,
    len: usize,
}

impl TheirsJit {
    /// Prepares and JIT-compiles `p` (bytecode and memory are leaked for rbpf's lifetime).
    pub fn new(p: &BenchProgram) -> TheirsJit {
        let bytes: &'static [u8] = Box::leak(insns_to_bytes(&p.insns).into_boxed_slice());
        let mut vm = rbpf::EbpfVmRaw::new(Some(bytes)).expect("rbpf accepts bench programs");
        vm.register_helper(1, rbpf_array_lookup)
            .expect("helper registers");
        vm.jit_compile().expect("rbpf JIT compiles bench programs");
        let mem: &'static mut [u8] = Box::leak(mem_for(p).into_boxed_slice());
        TheirsJit {
            vm,
            len: mem.len(),
            mem: mem.as_mut_ptr(),
        }
    }

    /// One run.
    pub fn run(&mut self) -> u64 {
        // SAFETY: `mem` is a leaked buffer of `len` bytes that only this value uses, and the
        // slice made here is the only reference to it during the run.
        let mem = unsafe { std::slice::from_raw_parts_mut(self.mem, self.len) };
        // SAFETY: the program is one of the benchmark programs, which stay inside `mem`, the
        // stack and the helper's table (checked against our interpreter in the tests).
        unsafe { self.vm.execute_program_jit(mem) }.expect("rbpf JIT runs bench programs")
    }
}

/// Median nanoseconds per call of each of `fs`, measured as [`measure_pair`] does, in
/// batches that alternate between all of them.
pub fn measure_all(fs: &mut [&mut dyn FnMut() -> u64], batches: usize) -> Vec<f64> {
    let target = Duration::from_millis(5);
    let mut sizes = Vec::new();
    for f in fs.iter_mut() {
        let mut g = || f();
        sizes.push(calibrate(&mut g, target));
    }
    let mut times = vec![Vec::with_capacity(batches); fs.len()];
    for round in 0..=batches {
        for (i, f) in fs.iter_mut().enumerate() {
            let mut g = || f();
            let t = batch(&mut g, sizes[i]);
            if round > 0 {
                times[i].push(t);
            }
        }
    }
    times.into_iter().map(median).collect()
}

/// A program of about `n` instructions for compile-time measurements: straight-line ALU,
/// stack traffic and forward branches, repeated.
pub fn big_program(n: usize) -> Vec<Insn> {
    let body = [
        "r0 += r3",
        "r3 *= 7",
        "*(u64 *)(r10 - 8) = r0",
        "r4 ^= r0",
        "if r4 > 1000 goto +2",
        "w5 += 3",
        "r6 >>= 3",
        "r0 |= r6",
        "r7 = *(u64 *)(r10 - 8)",
        "r4 -= 12345",
        "r7 += r4",
        "if w7 s< 5 goto +1",
        "w7 *= w5",
        "r5 <<= 2",
        "r0 ^= r7",
        "r6 += r5",
    ];
    let mut s = String::from("r0 = 1\nr3 = 3\nr4 = 4\nr5 = 5\nr6 = 6\nr7 = 7\n");
    for i in 0..n.saturating_sub(7) {
        s.push_str(body[i % body.len()]);
        s.push('\n');
    }
    s.push_str("exit\n");
    ebpf::asm::assemble(&s).expect("big program assembles")
}

/// Runs per batch so that one batch of `f` takes about `target`.
fn calibrate(f: &mut impl FnMut() -> u64, target: Duration) -> u64 {
    let mut n = 1u64;
    loop {
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(f());
        }
        let el = t.elapsed();
        if el >= target / 4 || n >= 1 << 30 {
            let per = el.as_nanos() as f64 / n as f64;
            return ((target.as_nanos() as f64 / per.max(1.0)) as u64).max(1);
        }
        n *= 4;
    }
}

fn batch(f: &mut impl FnMut() -> u64, n: u64) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(f());
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median nanoseconds per call of `f` and of `g`, measured in alternating batches of about
/// 5 ms each (after calibration and one warm-up batch each), so that both see the same
/// background load.
pub fn measure_pair(
    mut f: impl FnMut() -> u64,
    mut g: impl FnMut() -> u64,
    batches: usize,
) -> (f64, f64) {
    let target = Duration::from_millis(5);
    let nf = calibrate(&mut f, target);
    let ng = calibrate(&mut g, target);
    batch(&mut f, nf);
    batch(&mut g, ng);
    let mut a = Vec::with_capacity(batches);
    let mut b = Vec::with_capacity(batches);
    for _ in 0..batches {
        a.push(batch(&mut f, nf));
        b.push(batch(&mut g, ng));
    }
    (median(a), median(b))
}

/// The stdout of a command run in the bench folder (`git rev-parse`, `date`), or
/// `"unknown"`: results files record where and when they were measured.
pub fn cmd(args: &[&str]) -> String {
    std::process::Command::new(args[0])
        .args(&args[1..])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rbpf's helper table is one static: tests that use it run one at a time.
    static RBPF_TABLE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn both_interpreters_agree_on_every_bench_program() {
        let _g = RBPF_TABLE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        for p in programs() {
            reset_rbpf_table();
            let mut ours = Ours::new(&p);
            let mut theirs = Theirs::new(&p);
            let (a, b) = (ours.run(), theirs.run());
            assert_eq!(a, b, "{}", p.name);
            // and again, with state carried over (the map values accumulate)
            assert_eq!(ours.run(), theirs.run(), "{}", p.name);
        }
    }

    #[test]
    fn jits_agree_with_the_interpreter_on_every_bench_program() {
        let _g = RBPF_TABLE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        for p in programs() {
            reset_rbpf_table();
            let mut ours = Ours::new(&p);
            let mut jit = OursJit::new(&p);
            let mut theirs = TheirsJit::new(&p);
            let want = ours.run();
            assert_eq!(jit.run(), want, "{}", p.name);
            // rbpf 0.4.1's JIT gets alu_line wrong (32-bit ALU forms); see cpu_jit.md.
            if p.name != "alu_line" {
                assert_eq!(theirs.run(), want, "{}", p.name);
            }
            assert_eq!(jit.run(), ours.run(), "{}", p.name);
        }
    }

    #[test]
    fn expected_results() {
        let ps = programs();
        assert_eq!(Ours::new(&ps[0]).run(), 0);
        assert_eq!(Ours::new(&ps[2]).run(), 9999 * 10000 / 2);
        let mem_sum: u64 = mem_for(&ps[3])
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()) as u64)
            .sum();
        assert_eq!(Ours::new(&ps[3]).run(), mem_sum);
        // i in 0..1000, value[i & 63] += i; r7 sums the values after each update.
        let mut table = [0u64; 64];
        let mut acc = 0u64;
        for i in 0..1000u64 {
            table[(i & 63) as usize] += i;
            acc += table[(i & 63) as usize];
        }
        assert_eq!(Ours::new(&ps[4]).run(), acc);
    }
}
