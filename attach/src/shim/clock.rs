//! One clock for host and GPU events: the GPU's `%globaltimer` calibrated against the
//! host's `CLOCK_MONOTONIC` (what `bpf_ktime_get_ns` and the API log use).
//!
//! ```text
//! host (our thread)                         GPU (__bpftime_clock, one polling warp, our stream)
//!                                               base = %globaltimer; fence.sys (once)
//! t1 = now; ping = k  ──── pinned, mapped ────▶ the first warp to see ping == k:
//!                                               g = %globaltimer; pong = k:24 | (g − base):40
//!                                               (one 8-byte store, no fence)
//! sees pong's k; t2 = now  ◀─────────────────    g = base + pong's low 40 bits
//! offset = g − (t1 + t2)/2, uncertainty = (t2 − t1)/2; the round with the smallest
//! t2 − t1 wins: rounds go on until one has an uncertainty ≤ CLOCK_GOOD_NS (800 ns)
//! (at least 64, at most CLOCK_ROUNDS = 4,096, and none begun after 20 ms)
//! ```
//!
//! The first calibration runs when the shim sets up (the application's first module
//! load), the next ones every [`PERIOD`] from a thread of the shim, and one more when the
//! maps are copied out for the last time, so an application's run is bracketed and drift is
//! seen: `%globaltimer` and `CLOCK_MONOTONIC` have been measured moving apart by about
//! 1 µs per second. Each result goes to the session report ([`ReportLine::Clock`]); the
//! launch wrappers convert a launch's host time with the latest one
//! ([`to_gpu`]), `trace --timeline` places GPU events with all of them.
//!
//! The kernel gives up after 200 ms of `%globaltimer` and on a stop word, so a host
//! that stops answering never leaves it running; if it cannot start (a GPU full of the
//! application's blocks), the round times out (500 ms for the first, which includes the
//! launch; 50 ms for the others), the calibration is reported as failed,
//! and launch times stay 0 until one succeeds. Our calls run in relaxed stream-capture
//! mode, on our own non-blocking stream, so an application capturing a graph is not
//! disturbed.

use super::driver::{self, CUDA_SUCCESS, CuResult, Handle, Hook};
use super::hooks::{RelaxedCapture, check, fn_of};
use crate::session::ReportLine;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Most ping-pong rounds per calibration (`BPFTIME_CLOCK_ROUNDS` overrides it, 1 to
/// 4096). The best round decides, and more rounds find a luckier one. A round takes about
/// 2 µs, so a calibration takes at most about 8 ms of one host thread and one GPU warp.
/// On an H200, over 18 calibrations each, the uncertainty was:
/// - 64 rounds: median 1,020 ns (max 1,201);
/// - 256 rounds: 994 ns (1,269);
/// - 1,024 rounds: 822 ns (883), every one ≤ 1 µs.
pub const CLOCK_ROUNDS: u32 = 4096;
/// A calibration stops early, after [`CLOCK_MIN_ROUNDS`], once its best round's
/// uncertainty is at most this.
pub const CLOCK_GOOD_NS: u64 = 800;
/// Rounds played before stopping early.
pub const CLOCK_MIN_ROUNDS: u32 = 64;
/// A calibration also stops once it has taken this long, with the rounds it got: far inside
/// the kernel's 200 ms life, also on a loaded host whose rounds are slow.
pub const CLOCK_BUDGET: Duration = Duration::from_millis(20);
/// Time between re-checks.
pub const PERIOD: Duration = Duration::from_secs(1);
/// How long a round waits for the GPU's answer; the first one includes the kernel's
/// launch and start, which a busy GPU (or a loaded host) may delay.
const ROUND_TIMEOUT: Duration = Duration::from_millis(50);
const FIRST_ROUND_TIMEOUT: Duration = Duration::from_millis(500);
/// The stop word.
const STOP: u64 = u64::MAX;
/// Mailbox word offsets (bytes): the host's ping; the GPU's answer a line away, one word
/// ([`pong`]); and the kernel's `%globaltimer` at its start, which answers count from.
const PING: usize = 0;
const PONG: usize = 64;
const BASE: usize = 72;
const MAILBOX: usize = 128;
/// Bits of an answer that hold the GPU time since [`BASE`] (ns): 2^40 ns is 18 minutes, far
/// more than the kernel's 200 ms life. The round number's low 24 bits sit above them.
const TIME_BITS: u32 = 40;

/// The answer word for round `k` at `dt` ns after the kernel's start.
pub fn pong(k: u64, dt: u64) -> u64 {
    (k & 0xff_ffff) << TIME_BITS | (dt & ((1 << TIME_BITS) - 1))
}

/// `(round low bits, ns since the kernel's start)` of an answer word.
pub fn unpong(w: u64) -> (u64, u64) {
    (w >> TIME_BITS, w & ((1 << TIME_BITS) - 1))
}

/// Warps of the calibration kernel that poll the ping word by default
/// (`BPFTIME_CLOCK_WARPS` overrides it, 1 to 32). One: on an H200, more pollers made the
/// round trip longer, not shorter (best-of-64 uncertainty, median of 18 calibrations:
/// 990 ns with one warp, 1,350 with two, 4,216 with eight, 7,736 with sixteen;
/// `bench/results/launch_clock.md`), as sys-scope reads of one line queue behind each
/// other.
pub const CLOCK_WARPS: u32 = 1;

/// The calibration kernel (PTX ISA 6.0 memory-model loads and stores; sm_70 and up).
///
/// It stores its start time in `BASE` with a fence once, and every polling lane fences
/// once after the barrier, so any warp's answers are ordered after `BASE`. Then lane 0 of each warp polls
/// the ping word; the warps start `nanosleep`s apart. The first to see a new round number
/// `k` reads `%globaltimer` and answers with one 8-byte store ([`pong`]: `k`'s low bits and
/// the time since `BASE`). A shared-memory `atom.max` picks that warp, so each round gets
/// exactly one answer. A single store cannot be seen half-written, and no fence is on the
/// round trip.
pub const KERNEL_PTX: &str = r#"//
// bpftime-super: clock calibration
.version 7.0
.target sm_70
.address_size 64

.visible .entry __bpftime_clock(.param .u64 __bpftime_clock_mbox)
{
	.reg .pred %p<6>;
	.reg .b32 %r<6>;
	.reg .b64 %rd<14>;
	.shared .align 8 .u64 answered;
	.shared .align 8 .u64 base;
	ld.param.u64 %rd1, [__bpftime_clock_mbox];
	cvta.to.global.u64 %rd1, %rd1;
	mov.u32 %r1, %tid.x;
	setp.ne.u32 %p4, %r1, 0;
	@%p4 bra $L_sync;
	mov.u64 %rd3, %globaltimer;
	st.shared.u64 [answered], 0;
	st.shared.u64 [base], %rd3;
	st.relaxed.sys.global.u64 [%rd1+72], %rd3;
	fence.sc.sys;
$L_sync:
	bar.sync 0;
	ld.shared.u64 %rd3, [base];
	and.b32 %r2, %r1, 31;
	setp.ne.u32 %p5, %r2, 0;
	@%p5 bra $L_done;
	fence.acq_rel.sys;
	shr.u32 %r3, %r1, 5;
	mul.lo.u32 %r4, %r3, 160;
	nanosleep.u32 %r4;
	mov.u64 %rd2, 0;
	add.u64 %rd4, %rd3, 200000000;
$L_poll:
	ld.relaxed.sys.global.u64 %rd5, [%rd1];
	setp.eq.u64 %p1, %rd5, %rd2;
	@%p1 bra $L_check;
	setp.eq.u64 %p2, %rd5, -1;
	@%p2 bra $L_done;
	mov.u64 %rd6, %globaltimer;
	mov.u64 %rd2, %rd5;
	atom.shared.max.u64 %rd8, [answered], %rd5;
	setp.ge.u64 %p3, %rd8, %rd5;
	@%p3 bra $L_check;
	sub.u64 %rd9, %rd6, %rd3;
	and.b64 %rd9, %rd9, 1099511627775;
	and.b64 %rd10, %rd5, 16777215;
	shl.b64 %rd10, %rd10, 40;
	or.b64 %rd10, %rd10, %rd9;
	st.relaxed.sys.global.u64 [%rd1+64], %rd10;
$L_check:
	mov.u64 %rd7, %globaltimer;
	setp.lt.u64 %p1, %rd7, %rd4;
	@%p1 bra $L_poll;
$L_done:
	ret;
}
"#;

/// The polling warps to launch: `BPFTIME_CLOCK_WARPS` when it is 1 to 32, else
/// [`CLOCK_WARPS`].
fn clock_warps() -> u32 {
    env_in("BPFTIME_CLOCK_WARPS", 1..=32).unwrap_or(CLOCK_WARPS)
}

/// Rounds per calibration: `BPFTIME_CLOCK_ROUNDS` when it is 1 to 4096, else
/// [`CLOCK_ROUNDS`].
fn clock_rounds() -> u32 {
    env_in("BPFTIME_CLOCK_ROUNDS", 1..=4096).unwrap_or(CLOCK_ROUNDS)
}

fn env_in(name: &str, range: std::ops::RangeInclusive<u32>) -> Option<u32> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|v| range.contains(v))
}

/// One calibration's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Calibration {
    /// `%globaltimer − CLOCK_MONOTONIC`, ns.
    pub offset_ns: i64,
    /// Half the best round trip, ns: the offset is within this of the truth (plus the
    /// GPU timer's own tick).
    pub uncertainty_ns: u64,
    /// `CLOCK_MONOTONIC` at the best round's midpoint.
    pub at_ns: u64,
}

/// The best round of a calibration: `(t1, g, t2)` samples in, the estimate out.
pub fn estimate(rounds: &[(u64, u64, u64)]) -> Option<Calibration> {
    let &(t1, g, t2) = rounds
        .iter()
        .filter(|(t1, _, t2)| t2 >= t1)
        .min_by_key(|(t1, _, t2)| t2 - t1)?;
    let mid = t1 + (t2 - t1) / 2;
    Some(Calibration {
        offset_ns: g as i64 - mid as i64,
        uncertainty_ns: (t2 - t1).div_ceil(2),
        at_ns: mid,
    })
}

/// The first calibration (the drift's baseline).
static FIRST: Mutex<Option<Calibration>> = Mutex::new(None);
/// The drift rate of the offset, in ns per second of `CLOCK_MONOTONIC` (×1000: ppb), and
/// the latest offset and its time: what [`to_gpu`] reads without a lock.
static OFFSET: AtomicI64 = AtomicI64::new(0);
static OFFSET_AT: AtomicU64 = AtomicU64::new(0);
static DRIFT_PPB: AtomicI64 = AtomicI64::new(0);
/// 0 until a calibration succeeded.
static CALIBRATED: AtomicU64 = AtomicU64::new(0);
/// The longest a drift estimate is trusted for extrapolation, and the largest rate taken
/// (measured: 9–17 ppm on an H200).
const DRIFT_MAX_PPB: i64 = 200_000;
/// A drift estimate needs calibrations at least this far apart.
const DRIFT_BASELINE_NS: u64 = 500_000_000;

/// The offset at `mono_ns` from the latest calibration, extrapolated with the drift rate
/// measured between the first and the latest (once they are [`DRIFT_BASELINE_NS`]
/// apart): `%globaltimer` and `CLOCK_MONOTONIC` move apart by microseconds per second, so a
/// launch time a second after a calibration would otherwise be off by that much.
pub fn offset_at(latest: Calibration, drift_ppb: i64, mono_ns: u64) -> i64 {
    let dt = mono_ns as i64 - latest.at_ns as i64;
    latest.offset_ns + (dt as i128 * drift_ppb as i128 / 1_000_000_000) as i64
}

/// The drift rate between two calibrations, ppb (0 when they are too close).
pub fn drift_ppb(first: Calibration, latest: Calibration) -> i64 {
    let dt = latest.at_ns.saturating_sub(first.at_ns);
    if dt < DRIFT_BASELINE_NS {
        return 0;
    }
    let r = (latest.offset_ns - first.offset_ns) as i128 * 1_000_000_000 / dt as i128;
    (r as i64).clamp(-DRIFT_MAX_PPB, DRIFT_MAX_PPB)
}

/// A host `CLOCK_MONOTONIC` time on the GPU's clock ([`offset_at`]).
pub fn to_gpu(mono_ns: u64) -> Option<u64> {
    if CALIBRATED.load(Ordering::Acquire) == 0 {
        return None;
    }
    let latest = Calibration {
        offset_ns: OFFSET.load(Ordering::Relaxed),
        uncertainty_ns: 0,
        at_ns: OFFSET_AT.load(Ordering::Relaxed),
    };
    let off = offset_at(latest, DRIFT_PPB.load(Ordering::Relaxed), mono_ns);
    Some(mono_ns.wrapping_add_signed(off))
}

fn record(cal: Calibration) {
    let first = {
        let Ok(mut f) = FIRST.lock() else { return };
        *f.get_or_insert(cal)
    };
    DRIFT_PPB.store(drift_ppb(first, cal), Ordering::Relaxed);
    OFFSET.store(cal.offset_ns, Ordering::Relaxed);
    OFFSET_AT.store(cal.at_ns, Ordering::Relaxed);
    CALIBRATED.store(1, Ordering::Release);
}

type MemHostAlloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CuResult;
type ModuleGetFunction = unsafe extern "C" fn(*mut Handle, Handle, *const i8) -> CuResult;
type LaunchKernel = unsafe extern "C" fn(
    Handle,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    Handle,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CuResult;

/// `CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP`.
const HOST_ALLOC_FLAGS: c_uint = 1 | 2;
/// `CU_STREAM_NON_BLOCKING`.
const STREAM_NON_BLOCKING: c_uint = 1;

/// What a calibration needs, made once in the application's context.
struct Clock {
    ctx: Handle,
    mailbox: *mut u64,
    device_mailbox: u64,
    function: Handle,
    stream: Handle,
    launch: LaunchKernel,
    seq: u64,
}

// SAFETY: the handles are driver objects usable from any thread with the context current
// (the clock thread makes it current), and the mailbox is pinned memory owned by the clock
// for the process's life; all access goes through the `CLOCK` mutex.
unsafe impl Send for Clock {}

static CLOCK: OnceLock<Option<Mutex<Clock>>> = OnceLock::new();

impl Clock {
    /// Loads the kernel and the mailbox in the current context.
    fn new() -> Result<Clock, String> {
        let _relaxed = RelaxedCapture::enter();
        let missing = |n: &str| format!("{n} not found");
        let host_alloc = driver::export_fn!(c"cuMemHostAlloc", MemHostAlloc)
            .ok_or_else(|| missing("cuMemHostAlloc"))?;
        let get_function = driver::export_fn!(c"cuModuleGetFunction", ModuleGetFunction)
            .ok_or_else(|| missing("cuModuleGetFunction"))?;
        let launch = driver::export_fn!(c"cuLaunchKernel", LaunchKernel)
            .ok_or_else(|| missing("cuLaunchKernel"))?;
        // SAFETY: real driver entries with their signatures; out-pointers are locals.
        unsafe {
            let current: driver::CtxGetCurrent = fn_of(Hook::CtxGetCurrent)?;
            let load: driver::ModuleLoadData = fn_of(Hook::ModuleLoadData)?;
            let devptr: driver::MemHostGetDevicePointer = fn_of(Hook::MemHostGetDevicePointer)?;
            let stream_create: driver::StreamCreate = fn_of(Hook::StreamCreate)?;
            let mut ctx: Handle = std::ptr::null_mut();
            check(current(&mut ctx), "cuCtxGetCurrent")?;
            let ptx = std::ffi::CString::new(KERNEL_PTX).map_err(|e| e.to_string())?;
            let mut module: Handle = std::ptr::null_mut();
            check(
                load(&mut module, ptx.as_ptr().cast()),
                "cuModuleLoadData of the clock kernel",
            )?;
            let mut function: Handle = std::ptr::null_mut();
            check(
                get_function(&mut function, module, c"__bpftime_clock".as_ptr()),
                "cuModuleGetFunction",
            )?;
            let mut host: *mut c_void = std::ptr::null_mut();
            check(
                host_alloc(&mut host, MAILBOX, HOST_ALLOC_FLAGS),
                "cuMemHostAlloc of the clock mailbox",
            )?;
            std::ptr::write_bytes(host as *mut u8, 0, MAILBOX);
            let mut dev = 0u64;
            check(devptr(&mut dev, host, 0), "cuMemHostGetDevicePointer")?;
            let mut stream: Handle = std::ptr::null_mut();
            check(
                stream_create(&mut stream, STREAM_NON_BLOCKING),
                "cuStreamCreate",
            )?;
            Ok(Clock {
                ctx,
                mailbox: host.cast(),
                device_mailbox: dev,
                function,
                stream,
                launch,
                seq: 0,
            })
        }
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        // SAFETY: the mailbox is MAILBOX bytes of pinned memory, 8-aligned, alive for the
        // process; the GPU writes it with system-scope stores.
        unsafe { AtomicU64::from_ptr(self.mailbox.add(off / 8)) }
    }

    /// One calibration: launches the kernel and plays [`clock_rounds`] rounds.
    fn calibrate(&mut self) -> Result<Calibration, String> {
        let _relaxed = RelaxedCapture::enter();
        // 0 is never a round's number: the new kernel (which starts with 0 as the last
        // seen) waits for the first round.
        self.word(PING).store(0, Ordering::Release);
        let mut arg = self.device_mailbox;
        let mut params = [(&mut arg as *mut u64).cast::<c_void>()];
        // SAFETY: our function with its one u64 parameter, on our stream.
        let r = unsafe {
            (self.launch)(
                self.function,
                1,
                1,
                1,
                clock_warps() * 32,
                1,
                1,
                0,
                self.stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check(r, "cuLaunchKernel of the clock kernel")?;
        let n = clock_rounds();
        let mut rounds = Vec::with_capacity(CLOCK_MIN_ROUNDS as usize);
        let mut best = u64::MAX;
        let budget = std::time::Instant::now() + CLOCK_BUDGET;
        let mut failed = None;
        for round in 0..n {
            self.seq += 1;
            let k = self.seq;
            let t1 = ebpf::interp::monotonic_ns();
            self.word(PING).store(k, Ordering::Release);
            let wait = if round == 0 {
                FIRST_ROUND_TIMEOUT
            } else {
                ROUND_TIMEOUT
            };
            let deadline = std::time::Instant::now() + wait;
            let answer = loop {
                let a = self.word(PONG).load(Ordering::Acquire);
                if unpong(a).0 == k & 0xff_ffff {
                    break a;
                }
                if std::time::Instant::now() > deadline {
                    failed = Some(format!(
                        "the clock kernel did not answer within {} ms (is the GPU full?)",
                        wait.as_millis()
                    ));
                    break 0;
                }
                std::hint::spin_loop();
            };
            if failed.is_some() {
                break;
            }
            let t2 = ebpf::interp::monotonic_ns();
            // The kernel's fence put BASE before its first answer.
            let g = self.word(BASE).load(Ordering::Acquire) + unpong(answer).1;
            rounds.push((t1, g, t2));
            best = best.min(t2.saturating_sub(t1).div_ceil(2));
            // Enough: a good round after the minimum, or the time budget spent (a loaded
            // host whose rounds are slow calibrates with the rounds it got).
            if (round + 1 >= CLOCK_MIN_ROUNDS && best <= CLOCK_GOOD_NS)
                || std::time::Instant::now() >= budget
            {
                break;
            }
        }
        self.word(PING).store(STOP, Ordering::Release);
        // The kernel sees STOP and exits; the next launch on our stream waits for it.
        // A round that got no answer ends the calibration; the rounds before it still count
        // (their bound is what it is), and with none it failed.
        if let Some(why) = failed
            && rounds.is_empty()
        {
            return Err(why);
        }
        estimate(&rounds).ok_or_else(|| "no round completed".to_string())
    }
}

/// Sets the clock up in the current context and calibrates once, reporting the result;
/// then re-checks every [`PERIOD`] from a thread. Called once, at the shim's setup.
pub fn start() {
    let clock = CLOCK.get_or_init(|| match Clock::new() {
        Ok(c) => Some(Mutex::new(c)),
        Err(why) => {
            super::hooks::report(&[ReportLine::Warning {
                what: format!("no clock calibration: {why}; launch times read 0"),
            }]);
            None
        }
    });
    if clock.is_none() {
        return;
    }
    recheck("start");
    let spawned = std::thread::Builder::new()
        .name("bpftime-clock".into())
        .spawn(|| {
            let Some(Some(c)) = CLOCK.get() else { return };
            let ctx = match c.lock() {
                Ok(c) => c.ctx,
                Err(_) => return,
            };
            // SAFETY: the real cuCtxSetCurrent's slot holds that signature.
            if let Ok(set) = unsafe { fn_of::<driver::CtxSetCurrent>(Hook::CtxSetCurrent) } {
                // SAFETY: the application's live context, made current on our thread.
                if unsafe { set(ctx) } != CUDA_SUCCESS {
                    return;
                }
            }
            loop {
                std::thread::sleep(PERIOD);
                if super::devmaps::usable_here().is_some_and(|u| u.is_err()) {
                    return;
                }
                recheck("periodic");
            }
        });
    if spawned.is_err() {
        super::hooks::report(&[ReportLine::Warning {
            what: "clock: no re-check thread; only the first calibration is used".into(),
        }]);
    }
}

/// Calibrates now (if the clock was set up) and reports it; `when` names the occasion.
pub fn recheck(when: &str) {
    let Some(Some(c)) = CLOCK.get() else { return };
    let Ok(mut c) = c.lock() else { return };
    match c.calibrate() {
        Ok(cal) => {
            record(cal);
            super::hooks::report(&[ReportLine::Clock {
                when: when.to_string(),
                offset_ns: cal.offset_ns,
                uncertainty_ns: cal.uncertainty_ns,
                at_ns: cal.at_ns,
            }]);
        }
        Err(why) => super::hooks::report(&[ReportLine::Warning {
            what: format!("clock calibration ({when}) failed: {why}"),
        }]),
    }
}

/// The last calibration, before the context goes (once).
pub fn recheck_exit() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| recheck("exit"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_word_carries_the_round_and_the_time() {
        let w = pong(0x1234_5678, 987_654_321);
        assert_eq!(
            unpong(w),
            (0x34_5678, 987_654_321),
            "the round's low 24 bits"
        );
        // Times past 2^40 ns wrap (the kernel lives 200 ms).
        assert_eq!(unpong(pong(1, (1 << 40) + 5)), (1, 5));
        assert_ne!(pong(2, 0), pong(1, 0));
    }

    #[test]
    fn the_tightest_round_wins() {
        // GPU clock = host + 1000; round trips 400, 100 (asymmetric by 10), 300.
        let rounds = [(0, 1200, 400), (1000, 2060, 1100), (5000, 6150, 5300)];
        let c = estimate(&rounds).unwrap();
        assert_eq!(c.uncertainty_ns, 50);
        assert_eq!(c.at_ns, 1050);
        assert_eq!(c.offset_ns, 1010);
        assert!((c.offset_ns - 1000).unsigned_abs() <= c.uncertainty_ns);
        assert_eq!(estimate(&[]), None);
    }

    #[test]
    fn launch_times_follow_the_measured_drift() {
        let cal = |offset_ns, at_ns| Calibration {
            offset_ns,
            uncertainty_ns: 1000,
            at_ns,
        };
        // 12 µs per second apart (what an H200 showed), calibrations 2 s apart.
        let (a, b) = (cal(5_000_000, 1_000_000_000), cal(5_024_000, 3_000_000_000));
        let r = drift_ppb(a, b);
        assert_eq!(r, 12_000);
        assert_eq!(offset_at(b, r, 3_500_000_000), 5_030_000);
        assert_eq!(offset_at(b, 0, 3_500_000_000), 5_024_000);
        // Too close to tell a rate; absurd rates are clamped.
        assert_eq!(drift_ppb(a, cal(5_001_000, 1_100_000_000)), 0);
        assert_eq!(
            drift_ppb(a, cal(6_000_000_000, 3_000_000_000)),
            DRIFT_MAX_PPB
        );
    }
}
