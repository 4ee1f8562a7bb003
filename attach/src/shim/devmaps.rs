//! Device-resident maps: the probes update a copy of each map in the GPU's memory, and the
//! shim copies it out to the session region, where `trace` reads it.
//!
//! ```text
//! setup (first module load, in the app's context):
//!   cuMemAlloc per map ── HtoD of the region's bytes (headers, initial values) ── the
//!   probes are compiled with the map at the device address, `.gpu`-scope atomics
//! every flush period (a thread of ours), at exit (atexit) and before the context dies
//! (cuCtxDestroy, cuDevicePrimaryCtxReset/Release hooks):
//!   DtoH of every map into the region, on our own non-blocking stream
//! ```
//!
//! A probe's atomic on a map in host-mapped memory crosses PCIe (7,069× on a vector add
//! where every thread counts); in device memory it is an L2 atomic. The host sees the
//! map's state as of the last flush (`trace --interval` apart, and once more at exit), not
//! live. Ring buffers stay in host-mapped memory: the host consumes them as they fill.
//!
//! The copies belong to the context that was current at setup. Modules loaded in another
//! context (a second GPU) or after that context died run without probes, with a warning:
//! their kernels could not reach the memory (`trace --maps host` serves those programs).
//! Copies use `CU_STREAM_NON_BLOCKING` streams and this thread's relaxed capture mode, so
//! they neither wait for the application's legacy-stream work nor disturb a capture.

use super::driver::{self, CUDA_SUCCESS, Handle, Hook};
use super::hooks::{check, fn_of as call};
use crate::instrument::Bindings;
use ebpf::MapKind;
use jit::AtomicScope;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;
use std::time::Duration;

/// Whether and how a map gets a copy in GPU memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copy {
    /// None: it stays in the region (host probes update it there; GPU probes reach it
    /// through host-mapped memory).
    None,
    /// The probes update the device copy; the shim copies it out to the region.
    ToHost,
    /// The probes only read it and the host may change it ([`crate::ProbeSet::host_owned`]):
    /// the device copy
    /// follows the region ([`sync_inbound`]).
    FromHost,
}

/// One map's two copies.
struct Mirror {
    /// Its bytes in the session region (host address).
    host: usize,
    /// Its bytes in device memory (the first stripe).
    dev: u64,
    len: usize,
    /// Stripes (1: none), `stride` bytes apart, summed word by word into the region.
    stripes: u32,
    stride: usize,
    /// Where striped copies land before they are summed.
    stage: Vec<u8>,
    /// The probes only read it: the host owns its contents. Its device copy is refreshed
    /// from the region when the region's bytes change ([`sync_inbound`]) and never copied
    /// back. `snapshot` holds the bytes last uploaded.
    inbound: bool,
    snapshot: Vec<u8>,
}

/// Stripes of a counter map: one per SM (128 covers an H100's 132 with little sharing),
/// fewer where the copies would pass [`STRIPED_BYTES`].
pub const STRIPES: u32 = 128;
/// Most device bytes the stripes of one map may take.
pub const STRIPED_BYTES: usize = 16 << 20;

/// `(stripes, stride)` for a striped map of `len` bytes: strides are whole 256-byte
/// blocks, so stripes never share a cache line. `None` when fewer than 2 fit.
pub fn stripe_plan(len: usize) -> Option<(u32, usize)> {
    let stride = len.div_ceil(256) * 256;
    let mut n = STRIPES;
    while n >= 2 && n as usize * stride > STRIPED_BYTES {
        n /= 2;
    }
    (n >= 2).then_some((n, stride))
}

/// The map as the program would see it unstriped: every 8-byte word of `out` is the
/// wrapping sum of that word over the `stripes` copies in `stage`, `stride` bytes apart.
/// Stripe 0 holds the header and initial values, the others start zeroed and receive only
/// 64-bit adds, so the sum is exactly the unstriped map.
pub fn sum_stripes(stage: &[u8], stripes: u32, stride: usize, out: &mut [u8]) {
    for (w, chunk) in out.chunks_exact_mut(8).enumerate() {
        let mut v = 0u64;
        for k in 0..stripes as usize {
            let at = k * stride + w * 8;
            v = v.wrapping_add(u64::from_le_bytes(
                stage[at..at + 8].try_into().expect("8 bytes"),
            ));
        }
        chunk.copy_from_slice(&v.to_le_bytes());
    }
}

/// The device copies of one context.
struct DeviceMaps {
    ctx: usize,
    dev: c_int,
    stream: usize,
    mirrors: Vec<Mirror>,
    /// False once the context is gone (or going): nothing is copied any more.
    live: bool,
    /// `--mem-trace`'s ring, drained with every copy.
    trace: Option<super::memtrace::Ring>,
}

static MAPS: Mutex<Option<DeviceMaps>> = Mutex::new(None);
/// Whether some mirror is host-owned: [`sync_inbound`], called after every probed driver
/// call, returns at once without it (no lock on that path).
static INBOUND: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a module loaded now can use the device copies: they exist, their context is
/// alive and current. `None` when there are no device copies (host-mapped maps).
pub fn usable_here() -> Option<Result<(), String>> {
    let g = MAPS.lock().ok()?;
    let m = g.as_ref()?;
    if !m.live {
        return Some(Err(
            "the CUDA context that holds the device-resident maps was destroyed".into(),
        ));
    }
    let mut cur: Handle = std::ptr::null_mut();
    // SAFETY: the real cuCtxGetCurrent, writing one handle.
    let ok = unsafe { call::<driver::CtxGetCurrent>(Hook::CtxGetCurrent) }
        .map(|f| unsafe { f(&mut cur) } == CUDA_SUCCESS)
        .unwrap_or(false);
    if !ok || cur as usize != m.ctx {
        return Some(Err(
            "the module is loaded in another CUDA context than the one holding the device-resident maps (use `trace --maps host` for programs on several GPUs)".into(),
        ));
    }
    Some(Ok(()))
}

/// Moves every map of `bindings` but ring buffers to device memory in the current context
/// (`dev`), copying the region's bytes there, and rebinds them (device address, `.gpu`
/// atomics). `to_host(device_address)` gives a binding's host address in the region and
/// its length; `striped(device_address)` whether it is a counter map to stripe per SM
/// ([`crate::ProbeSet::add_only`]); `copy(device_address)` where the map lives
/// ([`Copy`]).
/// Starts the flusher (every `period`; none when zero) and the exit hook.
pub fn create(
    bindings: &mut Bindings,
    to_host: impl Fn(u64) -> Option<(usize, usize)>,
    striped: impl Fn(u64) -> bool,
    copy: impl Fn(u64) -> Copy,
    dev: c_int,
    period: Duration,
    trace: Option<(String, u64)>,
) -> Result<(usize, usize, Option<crate::instrument::TraceRing>), String> {
    // SAFETY: each function pointer is the real driver entry of that name and signature;
    // the pointers passed are live locals or region bytes of `len` (checked by `to_host`).
    unsafe {
        let get_ctx: driver::CtxGetCurrent = call(Hook::CtxGetCurrent)?;
        let alloc: driver::MemAlloc = call(Hook::MemAlloc)?;
        let free: driver::MemFree = call(Hook::MemFree)?;
        let stream_create: driver::StreamCreate = call(Hook::StreamCreate)?;
        let htod: driver::MemcpyHtoDAsync = call(Hook::MemcpyHtoDAsync)?;
        let sync: driver::StreamSynchronize = call(Hook::StreamSynchronize)?;
        call::<driver::MemcpyDtoHAsync>(Hook::MemcpyDtoHAsync)?;
        call::<driver::CtxSetCurrent>(Hook::CtxSetCurrent)?;
        let mut ctx: Handle = std::ptr::null_mut();
        check(get_ctx(&mut ctx), "cuCtxGetCurrent")?;
        let mut stream: Handle = std::ptr::null_mut();
        check(
            stream_create(&mut stream, driver::STREAM_NON_BLOCKING),
            "cuStreamCreate",
        )?;
        let mut mirrors: Vec<Mirror> = Vec::new();
        // Source of the zeroed stripes (the copies are ordered on one stream, and the
        // stream is synchronised before this is dropped).
        let zeros = vec![0u8; STRIPED_BYTES];
        let mut placed: Vec<(u64, u64)> = Vec::new();
        let undo = |mirrors: &[Mirror]| {
            for m in mirrors {
                free(m.dev);
            }
        };
        for object in bindings.iter_mut() {
            for b in object.values_mut() {
                if b.kind == MapKind::RingBuf || copy(b.base_addr) == Copy::None {
                    continue;
                }
                // Maps shared by name between objects are one region entry: one copy.
                if let Some(&(_, d)) = placed.iter().find(|(h, _)| *h == b.base_addr) {
                    b.base_addr = d;
                    b.scope = AtomicScope::Gpu;
                    continue;
                }
                let Some((host, len)) = to_host(b.base_addr) else {
                    undo(&mirrors);
                    return Err(format!("map at {:#x} is not in the region", b.base_addr));
                };
                let (stripes, stride) = if len % 8 == 0 && striped(b.base_addr) {
                    stripe_plan(len).unwrap_or((1, len))
                } else {
                    (1, len)
                };
                let total = stripes as usize * stride;
                let mut d: u64 = 0;
                if let Err(e) = check(alloc(&mut d, total), "cuMemAlloc of a map") {
                    undo(&mirrors);
                    return Err(e);
                }
                let from_host = stripes == 1 && copy(b.base_addr) == Copy::FromHost;
                mirrors.push(Mirror {
                    host,
                    dev: d,
                    len,
                    stripes,
                    stride,
                    stage: if stripes > 1 {
                        vec![0; total]
                    } else {
                        Vec::new()
                    },
                    inbound: from_host,
                    // SAFETY (of the slice): `to_host` gave the map's `len` region bytes.
                    snapshot: if from_host {
                        std::slice::from_raw_parts(host as *const u8, len).to_vec()
                    } else {
                        Vec::new()
                    },
                });
                // Stripe 0 gets the region's bytes; the others start at zero.
                let r = if stripes > 1 {
                    htod(
                        d,
                        zeros.as_ptr() as *const c_void,
                        total.min(zeros.len()),
                        stream,
                    )
                } else {
                    CUDA_SUCCESS
                };
                if let Err(e) = check(r, "cuMemcpyHtoDAsync of zeros").and_then(|()| {
                    check(
                        htod(d, host as *const c_void, len, stream),
                        "cuMemcpyHtoDAsync of a map",
                    )
                }) {
                    undo(&mirrors);
                    return Err(e);
                }
                placed.push((b.base_addr, d));
                b.base_addr = d;
                b.scope = AtomicScope::Gpu;
                b.stripes = stripes;
                b.stripe_stride = if stripes > 1 { stride as u64 } else { 0 };
            }
        }
        if let Err(e) = check(sync(stream), "cuStreamSynchronize") {
            undo(&mirrors);
            return Err(e);
        }
        let ring = match trace {
            Some((path, cap)) => match super::memtrace::Ring::create(&path, cap, stream) {
                Ok(r) => Some(r),
                Err(e) => {
                    super::hooks::report(&[crate::session::ReportLine::Warning {
                        what: format!("--mem-trace: {e}; no trace"),
                    }]);
                    None
                }
            },
            None => None,
        };
        let target = ring.as_ref().map(|r| crate::instrument::TraceRing {
            ring: r.ring,
            ctl: r.ctl,
            cap: r.cap,
        });
        let has_inbound = mirrors.iter().any(|m| m.inbound);
        let n = (
            mirrors.len(),
            mirrors.iter().filter(|m| m.stripes > 1).count(),
            target,
        );
        if let Ok(mut g) = MAPS.lock() {
            *g = Some(DeviceMaps {
                ctx: ctx as usize,
                dev,
                stream: stream as usize,
                mirrors,
                live: true,
                trace: ring,
            });
        }
        libc::atexit(at_exit);
        if !period.is_zero() {
            let _ = std::thread::Builder::new()
                .name("bpftime-flush".into())
                .spawn(move || flusher(period));
        }
        if has_inbound {
            INBOUND.store(true, std::sync::atomic::Ordering::Release);
            let _ = std::thread::Builder::new()
                .name("bpftime-inbound".into())
                .spawn(|| {
                    while sync_inbound() {
                        std::thread::sleep(INBOUND_POLL);
                    }
                });
        }
        Ok(n)
    }
}

/// Copies every map out, now. `false` when there is nothing (left) to copy.
pub fn flush() -> bool {
    let Ok(mut g) = MAPS.lock() else {
        return false;
    };
    match g.as_mut() {
        Some(m) if m.live => {
            copy_out(m);
            true
        }
        _ => false,
    }
}

/// The DtoH copies, on the calling thread, which keeps its current context.
fn copy_out(m: &mut DeviceMaps) {
    let _relaxed = super::hooks::RelaxedCapture::enter();
    // SAFETY: real driver entries; `m`'s context is alive (`live`, checked under the lock
    // by the caller, which the teardown hooks take too), the host ranges are region bytes.
    unsafe {
        let (Ok(get), Ok(set), Ok(dtoh), Ok(sync)) = (
            call::<driver::CtxGetCurrent>(Hook::CtxGetCurrent),
            call::<driver::CtxSetCurrent>(Hook::CtxSetCurrent),
            call::<driver::MemcpyDtoHAsync>(Hook::MemcpyDtoHAsync),
            call::<driver::StreamSynchronize>(Hook::StreamSynchronize),
        ) else {
            return;
        };
        let mut prev: Handle = std::ptr::null_mut();
        let had = get(&mut prev) == CUDA_SUCCESS;
        if !had || prev as usize != m.ctx {
            set(m.ctx as Handle);
        }
        let stream = m.stream as Handle;
        for x in m.mirrors.iter_mut().filter(|x| !x.inbound) {
            if x.stripes > 1 {
                dtoh(
                    x.stage.as_mut_ptr() as *mut c_void,
                    x.dev,
                    x.stage.len(),
                    stream,
                );
            } else {
                dtoh(x.host as *mut c_void, x.dev, x.len, stream);
            }
        }
        if let Some(t) = m.trace.as_mut() {
            t.drain(stream);
        }
        if sync(stream) == CUDA_SUCCESS {
            for x in &m.mirrors {
                if x.stripes > 1 {
                    // SAFETY (of the slice): the map's `len` bytes in the region.
                    let out = std::slice::from_raw_parts_mut(x.host as *mut u8, x.len);
                    sum_stripes(&x.stage, x.stripes, x.stride, out);
                }
            }
        }
        if had && prev as usize != m.ctx {
            set(prev);
        }
    }
}

/// How often the region's copy of host-owned maps is compared with the device's.
pub const INBOUND_POLL: Duration = Duration::from_micros(200);

/// Uploads every host-owned map whose region bytes changed since the last upload (only the
/// changed span), and waits for the copies. Called by a thread every [`INBOUND_POLL`] and
/// by host-probe wrappers after their probes ran, so a change a host probe made reaches
/// the GPU before the wrapped call returns. `false` when there is nothing (left) to sync.
pub fn sync_inbound() -> bool {
    if !INBOUND.load(std::sync::atomic::Ordering::Acquire) {
        return false;
    }
    let Ok(mut g) = MAPS.lock() else {
        return false;
    };
    let Some(m) = g.as_mut().filter(|m| m.live) else {
        return false;
    };
    if !m.mirrors.iter().any(|x| x.inbound) {
        return false;
    }
    let _relaxed = super::hooks::RelaxedCapture::enter();
    // SAFETY: real driver entries; `m`'s context is alive (`live`, under the lock the
    // teardown hooks take too); host ranges are the maps' region bytes, snapshots our own.
    unsafe {
        let (Ok(get), Ok(set), Ok(htod), Ok(sync)) = (
            call::<driver::CtxGetCurrent>(Hook::CtxGetCurrent),
            call::<driver::CtxSetCurrent>(Hook::CtxSetCurrent),
            call::<driver::MemcpyHtoDAsync>(Hook::MemcpyHtoDAsync),
            call::<driver::StreamSynchronize>(Hook::StreamSynchronize),
        ) else {
            return false;
        };
        let mut prev: Handle = std::ptr::null_mut();
        let had = get(&mut prev) == CUDA_SUCCESS;
        let mut switched = false;
        let mut copied = false;
        for x in m.mirrors.iter_mut().filter(|x| x.inbound) {
            let now = std::slice::from_raw_parts(x.host as *const u8, x.len);
            let Some((lo, hi)) = changed_span(&x.snapshot, now) else {
                continue;
            };
            if !switched && (!had || prev as usize != m.ctx) {
                set(m.ctx as Handle);
                switched = true;
            }
            x.snapshot[lo..hi].copy_from_slice(&now[lo..hi]);
            htod(
                x.dev + lo as u64,
                x.snapshot[lo..].as_ptr() as *const c_void,
                hi - lo,
                m.stream as Handle,
            );
            copied = true;
        }
        if copied {
            sync(m.stream as Handle);
        }
        if switched && had {
            set(prev);
        }
    }
    true
}

/// The byte range `[lo, hi)` where `now` differs from `old`, widened to 8-byte words; `None`
/// when they are equal.
pub fn changed_span(old: &[u8], now: &[u8]) -> Option<(usize, usize)> {
    let lo = old.iter().zip(now).position(|(a, b)| a != b)?;
    let hi = old.len()
        - old
            .iter()
            .rev()
            .zip(now.iter().rev())
            .position(|(a, b)| a != b)?;
    Some((lo / 8 * 8, (hi.div_ceil(8) * 8).min(old.len())))
}

/// Flushes every `period` for the life of the process (a context that dies and comes
/// back live after a release still gets its copies).
fn flusher(period: Duration) {
    loop {
        std::thread::sleep(period);
        flush();
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if MAPS
            .lock()
            .is_ok_and(|g| g.as_ref().is_some_and(|m| m.live))
        {
            super::clock::recheck_exit();
        }
        flush();
        if let Ok(mut g) = MAPS.lock()
            && let Some(m) = g.as_mut()
        {
            trace_done(m);
            m.live = false;
        }
    });
}

/// Reports the trace's totals once, when the last drain has run.
fn trace_done(m: &mut DeviceMaps) {
    if let Some(t) = m.trace.take() {
        super::hooks::report(&[crate::session::ReportLine::MemTrace {
            records: t.written,
            dropped: t.drops,
            path: t.path.clone(),
        }]);
    }
}

/// Before the context `ctx` (or the primary context of `dev`) is destroyed: the last copy,
/// and no more. Returns whether the copies belonged to it.
pub fn before_teardown(ctx: Option<Handle>, dev: Option<c_int>) -> bool {
    let Ok(mut g) = MAPS.lock() else { return false };
    let Some(m) = g.as_mut() else { return false };
    let ours =
        m.live && (ctx.is_some_and(|c| c as usize == m.ctx) || dev.is_some_and(|d| d == m.dev));
    if ours {
        super::clock::recheck_exit();
        copy_out(m);
        trace_done(m);
        m.live = false;
    }
    ours
}

/// After `cuDevicePrimaryCtxRelease(dev)`: the copies stay live only if the primary
/// context still is (another retain holds it).
pub fn after_release(dev: c_int) {
    // SAFETY: the real cuDevicePrimaryCtxGetState with two locals.
    let active = unsafe {
        call::<driver::PrimaryCtxGetState>(Hook::PrimaryCtxGetState).map(|f| {
            let (mut flags, mut active): (u32, c_int) = (0, 0);
            f(dev, &mut flags, &mut active) == CUDA_SUCCESS && active != 0
        })
    }
    .unwrap_or(false);
    if active
        && let Ok(mut g) = MAPS.lock()
        && let Some(m) = g.as_mut()
        && m.dev == dev
    {
        m.live = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_spans_cover_every_changed_byte_in_whole_words() {
        let old = vec![0u8; 64];
        assert_eq!(changed_span(&old, &old), None);
        let mut now = old.clone();
        now[13] = 1;
        assert_eq!(changed_span(&old, &now), Some((8, 16)));
        now[40] = 2;
        assert_eq!(changed_span(&old, &now), Some((8, 48)));
        now[63] = 3;
        now[0] = 4;
        assert_eq!(changed_span(&old, &now), Some((0, 64)));
        // A length that is not a multiple of 8 ends at the end.
        let (a, mut b) = (vec![0u8; 21], vec![0u8; 21]);
        b[20] = 1;
        assert_eq!(changed_span(&a, &b), Some((16, 21)));
    }

    #[test]
    fn stripes_sum_to_the_unstriped_map() {
        // 3 stripes of a 24-byte map, 256 bytes apart: header word only in stripe 0,
        // adds spread over all three (one wrapping past 2^64).
        let (n, stride, len) = (3u32, 256usize, 24usize);
        let mut stage = vec![0u8; n as usize * stride];
        let put = |stage: &mut Vec<u8>, k: usize, w: usize, v: u64| {
            stage[k * stride + w * 8..][..8].copy_from_slice(&v.to_le_bytes())
        };
        put(&mut stage, 0, 0, 0xB0F);
        for (k, v) in [(0, 5u64), (1, 7), (2, u64::MAX)] {
            put(&mut stage, k, 1, v);
        }
        put(&mut stage, 2, 2, 9);
        let mut out = vec![0xAAu8; len];
        sum_stripes(&stage, n, stride, &mut out);
        let word = |w: usize| u64::from_le_bytes(out[w * 8..][..8].try_into().unwrap());
        assert_eq!((word(0), word(1), word(2)), (0xB0F, 11, 9));
    }

    #[test]
    fn stripe_plans_fit_the_budget() {
        assert_eq!(stripe_plan(136), Some((128, 256)));
        assert_eq!(stripe_plan(256), Some((128, 256)));
        assert_eq!(stripe_plan(257), Some((128, 512)));
        // 1 MiB maps: 16 stripes fit in 16 MiB.
        assert_eq!(stripe_plan(1 << 20), Some((16, 1 << 20)));
        assert_eq!(stripe_plan(9 << 20), None);
    }
}
