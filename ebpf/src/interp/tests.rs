//! Helper and environment tests (opcode semantics live in `tests/isa_semantics.rs`).

use super::*;
use crate::asm::assemble;
use crate::maps::create_local;
use crate::program::{MapDef, MapKind, MapOrigin};

fn def(name: &str, kind: MapKind, ks: u32, vs: u32, n: u32) -> MapDef {
    MapDef {
        name: name.into(),
        kind,
        key_size: ks,
        value_size: vs,
        max_entries: n,
        flags: 0,
        origin: MapOrigin::Manual,
        init: None,
    }
}

fn vm(src: &str, defs: &[MapDef], threads: usize) -> Vm {
    let mut p = Program::from_insns("t", assemble(src).unwrap());
    p.maps = defs.to_vec();
    let maps = defs
        .iter()
        .map(|d| create_local(d, threads).unwrap())
        .collect();
    Vm::new(&p, maps).unwrap()
}

#[test]
fn hash_helpers_return_errnos() {
    let h = def("h", MapKind::Hash, 4, 8, 1);
    let src = "
        *(u32 *)(r10 - 4) = 1
        *(u64 *)(r10 - 16) = 5
        r1 = map_idx[0] ll
        r2 = r10
        r2 += -4
        r3 = r10
        r3 += -16
        r4 = 1                   ; BPF_NOEXIST
        call map_update_elem
        r6 = r0                  ; 0
        r1 = map_idx[0] ll
        r2 = r10
        r2 += -4
        r3 = r10
        r3 += -16
        r4 = 1
        call map_update_elem
        r7 = r0                  ; -EEXIST
        *(u32 *)(r10 - 4) = 2
        r1 = map_idx[0] ll
        r2 = r10
        r2 += -4
        r3 = r10
        r3 += -16
        r4 = 0
        call map_update_elem
        r8 = r0                  ; -E2BIG (full)
        r1 = map_idx[0] ll
        r2 = r10
        r2 += -4
        call map_delete_elem
        r9 = r0                  ; -ENOENT
        r0 = r6
        r0 += r7
        r0 *= 1000
        r0 += r8
        r0 *= 1000
        r0 += r9
        exit";
    let v = vm(src, &[h], 1);
    let r = v.run_mem(&mut [], &mut Env::new(0)).unwrap() as i64;
    assert_eq!(r, ((-17) * 1000 - 7) * 1000 - 2);
    assert_eq!(
        v.maps()[0].entries(),
        vec![(1u32.to_le_bytes().to_vec(), 5u64.to_le_bytes().to_vec())]
    );
}

#[test]
fn helper_pointer_arguments_are_checked() {
    let h = def("h", MapKind::Hash, 4, 8, 1);
    let v = vm(
        "r1 = map_idx[0] ll\nr2 = 0x1000 ll\ncall map_lookup_elem\nexit",
        std::slice::from_ref(&h),
        1,
    );
    let e = v.run_mem(&mut [], &mut Env::new(0)).unwrap_err();
    assert!(
        e.msg
            .contains("map_lookup_elem key: invalid memory access: read of 4 bytes at 0x1000"),
        "{e}"
    );
    assert_eq!(e.loc.pc, 4);
    let v = vm(
        "r1 = 12345\nr2 = r10\nr2 += -4\ncall map_lookup_elem\nexit",
        &[h],
        1,
    );
    let e = v.run_mem(&mut [], &mut Env::new(0)).unwrap_err();
    assert!(e.msg.contains("is not a map"), "{e}");
}

#[test]
fn per_thread_array_uses_env_thread() {
    let a = def("pt", MapKind::PerThreadArray, 4, 8, 1);
    let src = "
        *(u32 *)(r10 - 4) = 0
        r1 = map_idx[0] ll
        r2 = r10
        r2 += -4
        call map_lookup_elem
        if r0 == 0 goto fail
        r1 = 1
        lock *(u64 *)(r0 + 0) += r1
        r0 = *(u64 *)(r0 + 0)
        exit
    fail:
        r0 = -1
        exit";
    let v = vm(src, &[a], 2);
    let mut e0 = Env::new(0);
    let mut e1 = Env::new(1);
    assert_eq!(v.run_mem(&mut [], &mut e0).unwrap(), 1);
    assert_eq!(v.run_mem(&mut [], &mut e0).unwrap(), 2);
    assert_eq!(v.run_mem(&mut [], &mut e1).unwrap(), 1);
    let mut e5 = Env::new(5);
    assert_eq!(v.run_mem(&mut [], &mut e5).unwrap(), u64::MAX);
}

#[test]
fn ringbuf_reserve_submit_discard_output() {
    let rb = def("rb", MapKind::RingBuf, 0, 0, 256);
    let src = "
        r1 = map_idx[0] ll
        r2 = 8
        r3 = 0
        call ringbuf_reserve
        if r0 == 0 goto fail
        r1 = 0x1122334455667788 ll
        *(u64 *)(r0 + 0) = r1
        r1 = r0
        r2 = 0
        call ringbuf_submit
        r1 = map_idx[0] ll
        r2 = 4
        r3 = 0
        call ringbuf_reserve
        r1 = r0
        r2 = 0
        call ringbuf_discard
        *(u32 *)(r10 - 4) = 0x61626364
        r1 = map_idx[0] ll
        r2 = r10
        r2 += -4
        r3 = 4
        r4 = 0
        call ringbuf_output
        r6 = r0
        r1 = map_idx[0] ll
        r2 = 16
        r3 = 0
        call ringbuf_reserve     ; left outstanding: discarded at exit
        r0 = r6
        exit
    fail:
        r0 = -1
        exit";
    let v = vm(src, &[rb], 1);
    assert_eq!(v.run_mem(&mut [], &mut Env::new(0)).unwrap(), 0);
    let got = v.maps()[0].drain_ringbuf();
    assert_eq!(
        got,
        vec![
            0x1122334455667788u64.to_le_bytes().to_vec(),
            b"dcba".to_vec()
        ]
    );
}

#[test]
fn ringbuf_record_bounds_and_bad_submit() {
    let rb = def("rb", MapKind::RingBuf, 0, 0, 64);
    let v = vm(
        "r1 = map_idx[0] ll\nr2 = 8\nr3 = 0\ncall ringbuf_reserve\nif r0 == 0 goto out\n*(u64 *)(r0 + 8) = 1\nout:\nexit",
        std::slice::from_ref(&rb),
        1,
    );
    let e = v.run_mem(&mut [], &mut Env::new(0)).unwrap_err();
    assert!(e.msg.contains("write of 8 bytes"), "{e}");
    let v = vm(
        "r1 = r10\nr1 += -8\nr2 = 0\ncall ringbuf_submit\nexit",
        std::slice::from_ref(&rb),
        1,
    );
    let e = v.run_mem(&mut [], &mut Env::new(0)).unwrap_err();
    assert!(e.msg.contains("not a live ring buffer reservation"), "{e}");
    // A released record is no longer accessible (even right after a cached write to it).
    let v = vm(
        "r1 = map_idx[0] ll\nr2 = 8\nr3 = 0\ncall ringbuf_reserve\nif r0 == 0 goto out\nr6 = r0\n*(u64 *)(r6 + 0) = 1\nr1 = r6\nr2 = 0\ncall ringbuf_submit\n*(u64 *)(r6 + 0) = 2\nout:\nexit",
        std::slice::from_ref(&rb),
        1,
    );
    let e = v.run_mem(&mut [], &mut Env::new(0)).unwrap_err();
    assert!(
        e.msg.contains("write of 8 bytes") && e.msg.contains("not in any region"),
        "{e}"
    );
    assert_eq!(
        v.maps()[0].drain_ringbuf(),
        vec![1u64.to_le_bytes().to_vec()]
    );
    // too large: NULL
    let v = vm(
        "r1 = map_idx[0] ll\nr2 = 100\nr3 = 0\ncall ringbuf_reserve\nexit",
        &[rb],
        1,
    );
    assert_eq!(v.run_mem(&mut [], &mut Env::new(0)).unwrap(), 0);
}

#[test]
fn trace_printk_and_puts() {
    let mut ro = def(".rodata", MapKind::Array, 4, 32, 1);
    ro.origin = MapOrigin::GlobalData { writable: false };
    let mut init = b"x=%d s=%s c=%c\0hello\0".to_vec();
    init.resize(32, 0);
    ro.init = Some(init);
    let src = "
        *(u32 *)(r10 - 8) = 0x006b6f  ; \"ok\\0\"
        r1 = map_idx_value[0][0] ll
        r2 = 15
        r3 = -5
        r4 = r10
        r4 += -8
        r5 = 0x21
        call trace_printk
        r6 = r0
        r1 = map_idx_value[0][15] ll
        call puts
        r0 = r6
        exit";
    let v = vm(src, &[ro], 1);
    let mut env = Env::new(0);
    let n = v.run_mem(&mut [], &mut env).unwrap();
    assert_eq!(
        env.trace,
        vec!["x=-5 s=ok c=!".to_string(), "hello".to_string()]
    );
    assert_eq!(n, "x=-5 s=ok c=!".len() as u64);
    // a callback sink
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    env.sink = TraceSink::Callback(Box::new(move |l| s2.lock().unwrap().push(l.to_string())));
    v.run_mem(&mut [], &mut env).unwrap();
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[test]
fn gpu_geometry_emulation() {
    let src = "
        r1 = r10
        r1 += -8
        r2 = r10
        r2 += -16
        r3 = r10
        r3 += -24
        call get_thread_idx
        r6 = *(u64 *)(r10 - 8)
        r1 = r10
        r1 += -8
        r2 = 0
        r3 = 0
        call get_block_idx
        r7 = *(u64 *)(r10 - 8)
        r1 = r10
        r1 += -8
        call get_grid_dim
        r8 = *(u64 *)(r10 - 8)
        r1 = r10
        r1 += -8
        call get_block_dim
        r9 = *(u64 *)(r10 - 8)
        call get_warp_id
        r6 <<= 8
        r6 |= r0
        call get_lane_id
        r6 <<= 8
        r6 |= r0
        call get_sm_id
        r6 <<= 8
        r6 |= r0
        r6 <<= 8
        r6 |= r7
        r6 <<= 8
        r6 |= r8
        r6 <<= 16
        r6 |= r9
        r0 = r6
        exit";
    let v = vm(src, &[], 1);
    let mut env = Env::new(7);
    env.block_dim = 128;
    // index 300, n 600: thread 44, block 2, grid 5, warp 1, lane 12, sm 7
    let r = v.run_job(&[], &mut [], 300, 600, [0; 4], &mut env).unwrap();
    assert_eq!(
        r,
        (44 << 56) | (1 << 48) | (12 << 40) | (7 << 32) | (2 << 24) | (5 << 16) | 128
    );
}

#[test]
fn current_pid_tgid_is_linuxs() {
    let v = vm("call get_current_pid_tgid\nexit", &[], 1);
    let r = v.run_mem(&mut [], &mut Env::new(0)).unwrap();
    assert_eq!(r >> 32, std::process::id() as u64);
    let tid = rustix::thread::gettid().as_raw_nonzero().get() as u64;
    assert_eq!(r & 0xffff_ffff, tid);
    // Another thread: the same process, its own thread id.
    let other = std::thread::spawn(move || v.run_mem(&mut [], &mut Env::new(0)).unwrap())
        .join()
        .unwrap();
    assert_eq!(other >> 32, r >> 32);
    assert_ne!(other & 0xffff_ffff, tid);
}

#[test]
fn exit_helper_ends_the_program_from_a_callee() {
    let v = vm(
        "r0 = 5\ncall f\nr0 = 9\nexit\nf:\nr0 = 3\ncall exit\nr0 = 4\nexit",
        &[],
        1,
    );
    assert_eq!(v.run_mem(&mut [], &mut Env::new(0)).unwrap(), 0);
}

#[test]
fn prandom_is_seedable() {
    let v = vm(
        "call get_prandom_u32\nr6 = r0\ncall get_prandom_u32\nr0 <<= 32\nr0 |= r6\nexit",
        &[],
        1,
    );
    let a = v.run_mem(&mut [], &mut Env::new(0).with_seed(42)).unwrap();
    let b = v.run_mem(&mut [], &mut Env::new(0).with_seed(42)).unwrap();
    let c = v.run_mem(&mut [], &mut Env::new(0).with_seed(43)).unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_ne!(a >> 32, a & 0xffff_ffff);
}

#[test]
fn clocks_and_membar() {
    let v = vm(
        "call ktime_get_ns\nr6 = r0\ncall membar\ncall ktime_get_ns\nr0 -= r6\nexit",
        &[],
        1,
    );
    let d = v.run_mem(&mut [], &mut Env::new(0)).unwrap();
    assert!(d < 1_000_000_000, "{d}");
    let v = vm("call get_globaltimer\nexit", &[], 1);
    // after 2020-01-01
    assert!(v.run_mem(&mut [], &mut Env::new(0)).unwrap() > 1_577_836_800_000_000_000);
}

#[test]
fn job_ctx_fields_and_insn_count() {
    let v = vm(
        "r0 = *(u64 *)(r1 + 40)\nr2 = *(u64 *)(r1 + 72)\nr0 += r2\nexit",
        &[],
        1,
    );
    let mut env = Env::new(0);
    assert_eq!(
        v.run_job(&[], &mut [], 1, 10, [0, 0, 0, 5], &mut env)
            .unwrap(),
        15
    );
    assert_eq!(env.last_insns, 4);
}

#[test]
fn instruction_budget_is_exact_for_completed_runs() {
    // 2 + 3 iterations x 3 + exit = 12 instructions; the local call adds 2 + 2 more.
    let v = vm(
        "r0 = 0\nr1 = 3\nloop:\nr0 += 1\nr1 -= 1\nif r1 != 0 goto loop\nexit",
        &[],
        1,
    );
    let mut env = Env::new(0).with_max_insns(12);
    assert_eq!(v.run_mem(&mut [], &mut env).unwrap(), 3);
    assert_eq!(env.last_insns, 12);
    let mut env = Env::new(0).with_max_insns(11);
    let e = v.run_mem(&mut [], &mut env).unwrap_err();
    assert!(
        e.msg
            .contains("instruction limit exceeded (11 instructions)"),
        "{e}"
    );
    let v = vm("r1 = 5 ll\ncall f\nexit\nf:\nr0 = r1\nexit", &[], 1);
    let mut env = Env::new(0);
    assert_eq!(v.run_mem(&mut [], &mut env).unwrap(), 5);
    assert_eq!(env.last_insns, 5);
}

#[test]
fn vm_is_shareable_across_worker_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Vm>();
    send::<Env>();
    let a = def("a", MapKind::Array, 4, 8, 1);
    let v = std::sync::Arc::new(vm(
        "*(u32 *)(r10 - 4) = 0\nr1 = map_idx[0] ll\nr2 = r10\nr2 += -4\ncall map_lookup_elem\nif r0 == 0 goto out\nr1 = 1\nlock *(u64 *)(r0 + 0) += r1\nout:\nr0 = 0\nexit",
        &[a],
        1,
    ));
    let hs: Vec<_> = (0..4)
        .map(|t| {
            let v = v.clone();
            std::thread::spawn(move || {
                let mut env = Env::new(t);
                for _ in 0..1000 {
                    v.run_mem(&mut [], &mut env).unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(v.maps()[0].entries()[0].1, 4000u64.to_le_bytes().to_vec());
}
