//! The run-time side of generated code: the [`Rt`] block it receives, and the `extern "C"`
//! trampolines it calls back into (memory checks, helpers, faults), all of which forward to
//! the interpreter's [`NativeRun`].
//!
//! | `Rt` field   | written by                      | read by                               |
//! |--------------|---------------------------------|---------------------------------------|
//! | `hot_r/w`    | [`jit_check`] (a region found)  | inline checks of loads / stores       |
//! | `left`       | generated code, before calls out and at exit | the run wrapper (`last_insns`) |
//! | `status`     | trampolines (fault, helper exit)| generated code after every call out   |
//! | `stack_top`  | the run wrapper                 | depth checks of local calls           |
//! | `ret_pc`     | a returning sub-function        | the caller's budget error location    |
//! | `run`        | the run wrapper                 | trampolines                           |

use ebpf::helpers as h;
use ebpf::interp::{FRAME_SIZE, HelperOutcome, NativeRun};

/// The block generated code gets as its first argument. Offsets are part of the code
/// generator's contract (see the `OFF_*` constants).
#[repr(C)]
#[derive(Debug)]
pub struct Rt {
    /// The last readable non-stack region an access hit: `[start, end)`.
    pub hot_r: [u64; 2],
    /// The last writable non-stack region a store hit.
    pub hot_w: [u64; 2],
    /// Instruction budget left.
    pub left: u64,
    /// 0 while running; [`STATUS_FAULT`] or [`STATUS_EXIT`] once the run must end.
    pub status: u64,
    /// r10 of the entry frame.
    pub stack_top: u64,
    /// pc of the `exit` a sub-function returned through.
    pub ret_pc: u64,
    /// The interpreter state of the run (`*mut NativeRun`); null in direct runs (code
    /// that calls no helper and checks nothing), whose faults go to `fault`.
    pub run: *mut (),
    /// `(kind, pc, address)` of the fault of a direct run.
    pub fault: [u64; 3],
}

/// An empty hot-region cache: `a >= start` holds only for `u64::MAX`, and then
/// `a <= end - n` fails.
pub const EMPTY_HOT: [u64; 2] = [u64::MAX, 8];

pub(crate) const OFF_HOT_R: i32 = 0;
pub(crate) const OFF_HOT_W: i32 = 16;
pub(crate) const OFF_LEFT: i32 = 32;
pub(crate) const OFF_STATUS: i32 = 40;
pub(crate) const OFF_STACK_TOP: i32 = 48;
pub(crate) const OFF_RET_PC: i32 = 56;

const _: () = {
    assert!(std::mem::offset_of!(Rt, hot_r) == OFF_HOT_R as usize);
    assert!(std::mem::offset_of!(Rt, hot_w) == OFF_HOT_W as usize);
    assert!(std::mem::offset_of!(Rt, left) == OFF_LEFT as usize);
    assert!(std::mem::offset_of!(Rt, status) == OFF_STATUS as usize);
    assert!(std::mem::offset_of!(Rt, stack_top) == OFF_STACK_TOP as usize);
    assert!(std::mem::offset_of!(Rt, ret_pc) == OFF_RET_PC as usize);
};

/// The run must end: an error is recorded in the [`NativeRun`].
pub const STATUS_FAULT: u64 = 1;
/// The run must end with r0 = 0 (helper `exit`).
pub const STATUS_EXIT: u64 = 2;

/// Fault kinds of [`jit_fault`].
pub(crate) mod fault {
    /// Instruction budget exhausted.
    pub const LIMIT: u64 = 1;
    /// Local call past the frame limit.
    pub const DEPTH: u64 = 2;
    /// Fell off the end of the program.
    pub const FELL_OFF: u64 = 3;
    /// Misaligned 4-byte atomic.
    pub const MISALIGNED4: u64 = 4;
    /// Misaligned 8-byte atomic.
    pub const MISALIGNED8: u64 = 5;
    /// `callx` with a register value that is no 32-bit helper id (the value as address).
    pub const HELPER_ID: u64 = 6;
}

/// # Safety
/// `rt` is the live [`Rt`] of a run whose `run` points to that run's [`NativeRun`].
unsafe fn parts<'a>(rt: *mut Rt) -> (&'a mut Rt, &'a mut NativeRun<'a>) {
    // SAFETY: per the contract, `rt` is valid and exclusively used by this thread's run;
    // `run` was set from a `&mut NativeRun` that outlives the generated code's execution.
    unsafe {
        let rt = &mut *rt;
        let run = &mut *(rt.run as *mut NativeRun<'a>);
        (rt, run)
    }
}

/// Slow path of a memory check: `nw` is the size in bytes, plus 256 for a write. Returns 1
/// when allowed (and caches the region), else records the error and returns 0.
///
/// # Safety
/// Called only by generated code, with the run's [`Rt`].
pub(crate) unsafe extern "C" fn jit_check(rt: *mut Rt, a: u64, nw: u64, r10: u64, pc: u64) -> u64 {
    // SAFETY: generated code passes its own live Rt.
    let (rt, run) = unsafe { parts(rt) };
    let (n, write) = (nw & 0xff, nw & 256 != 0);
    match run.check(a, n, write, r10) {
        Some((start, end)) => {
            if end - start >= 8 {
                if write {
                    rt.hot_w = [start, end];
                } else {
                    rt.hot_r = [start, end];
                }
            }
            1
        }
        None => {
            run.fail_mem(pc as usize, a, n, write, r10);
            rt.status = STATUS_FAULT;
            0
        }
    }
}

/// Calls helper `idpc & 0xffff_ffff` at pc `idpc >> 32`; returns r0.
///
/// # Safety
/// Called only by generated code, with the run's [`Rt`].
pub(crate) unsafe extern "C" fn jit_helper(
    rt: *mut Rt,
    idpc: u64,
    r1: u64,
    r2: u64,
    r3: u64,
    r4: u64,
    r5: u64,
    r10: u64,
) -> u64 {
    // SAFETY: generated code passes its own live Rt.
    let (rt, run) = unsafe { parts(rt) };
    let id = idpc as u32 as i32;
    let pc = (idpc >> 32) as usize;
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run.helper(id, [r1, r2, r3, r4, r5], pc, r10)
    }));
    if id == h::RINGBUF_SUBMIT || id == h::RINGBUF_DISCARD {
        // The released record may have been the cached region.
        rt.hot_r = EMPTY_HOT;
        rt.hot_w = EMPTY_HOT;
    }
    match out {
        Ok(HelperOutcome::Next(v)) => v,
        Ok(HelperOutcome::Exit) => {
            rt.status = STATUS_EXIT;
            0
        }
        Ok(HelperOutcome::Fault) => {
            rt.status = STATUS_FAULT;
            0
        }
        Err(_) => {
            run.fail(pc, format!("helper {id} panicked"));
            rt.status = STATUS_FAULT;
            0
        }
    }
}

/// Records a fault of `kind` ([`fault`]) at `pc`; `a` is the address of a misaligned atomic.
///
/// # Safety
/// Called only by generated code, with the run's [`Rt`].
pub(crate) unsafe extern "C" fn jit_fault(rt: *mut Rt, kind: u64, pc: u64, a: u64) {
    // SAFETY: generated code passes its own live Rt.
    let direct = unsafe { (*rt).run.is_null() };
    if direct {
        // SAFETY: as above.
        let rt = unsafe { &mut *rt };
        rt.fault = [kind, pc, a];
        if kind == fault::LIMIT {
            rt.left = 0;
        }
        rt.status = STATUS_FAULT;
        return;
    }
    // SAFETY: generated code passes its own live Rt, with its run.
    let (rt, run) = unsafe { parts(rt) };
    let pc = pc as usize;
    if kind == fault::LIMIT {
        rt.left = 0;
        run.fail_limit(pc);
    } else {
        run.fail(pc, fault_message(kind, a, 0));
    }
    rt.status = STATUS_FAULT;
}

/// The interpreter's message for a fault of `kind` ([`fault`]); `max` is the budget.
pub(crate) fn fault_message(kind: u64, a: u64, max: u64) -> String {
    match kind {
        fault::LIMIT => format!("instruction limit exceeded ({max} instructions)"),
        fault::DEPTH => format!(
            "call stack too deep (max {} frames)",
            ebpf::interp::MAX_FRAMES
        ),
        fault::FELL_OFF => "fell off the end of the program (no exit)".into(),
        fault::MISALIGNED4 => format!("misaligned atomic access: 4 bytes at {a:#x}"),
        fault::HELPER_ID => h::unknown_helper_message(a as i64),
        _ => format!("misaligned atomic access: 8 bytes at {a:#x}"),
    }
}

/// Zeroes the frame `[lo, lo + FRAME_SIZE)` of a local call, as the interpreter does.
///
/// # Safety
/// Called only by generated code, with `lo` the start of the callee's frame, inside the
/// run's stack buffer (the depth check before the call guarantees it).
pub(crate) unsafe extern "C" fn jit_zero_frame(lo: u64) {
    // SAFETY: per the contract, the frame is inside the run's stack buffer, which nothing
    // else uses while generated code runs.
    unsafe { std::ptr::write_bytes(lo as *mut u8, 0, FRAME_SIZE) };
}

/// Bytes of one stack frame, as a code constant.
pub(crate) const FRAME: i64 = FRAME_SIZE as i64;
