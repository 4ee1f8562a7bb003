//! The driver calls `trace --api-log FILE` records ([`crate::apilog`]): copies,
//! allocations and frees (device, managed, pinned host), prefetches, launches and
//! synchronisations, each with its per-thread-default-stream twin (`_ptds`/`_ptsz`).
//!
//! The application reaches them three ways, and each gets the wrapper:
//! - linked against `libcuda.so` directly: `attach/shim` exports every [`Api::symbol`],
//!   made from the same table (`api_table.rs`);
//! - `dlsym` of an exact export name;
//! - `cuGetProcAddress` of a base name (how cudart, static or shared, gets them): the
//!   wrapper is swapped in only while a log is being written, and the flags pick the
//!   per-thread-stream twin.
//!
//! A wrapper runs the function's host probes ([`super::uprobes`]) around the real call and,
//! when the session logs, appends one event after the call returns; with neither it is a
//! plain forward. Events are buffered and written at
//! exit (and whenever 1 MiB is pending).

use super::driver::{self, CuResult, Handle};
pub use crate::api::{Api, call_name};
use crate::apilog::{ApiEvent, FLAG_ASYNC, FLAG_PTDS, Kind};
use std::ffi::{c_int, c_uint, c_void};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// `CUDA_ERROR_NOT_FOUND`: what a wrapper returns when the driver lacks the entry.
const CUDA_ERROR_NOT_FOUND: CuResult = 500;
/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` and its `CU_MEMORYTYPE_DEVICE`/`_UNIFIED` values.
const ATTR_MEMORY_TYPE: c_int = 2;
const MEMORYTYPE_DEVICE: c_uint = 2;
const MEMORYTYPE_UNIFIED: c_uint = 4;

/// The head of `CUlaunchConfig` (`cuLaunchKernelEx`): grid, block, shared bytes, stream.
#[repr(C)]
pub struct LaunchConfig {
    /// gridDimX..Z, blockDimX..Z, sharedMemBytes.
    pub dims: [c_uint; 7],
    /// hStream.
    pub stream: Handle,
}

/// A launch entry's `extra` argument, or null for entries without one.
macro_rules! launch_extra {
    () => {
        std::ptr::null_mut()
    };
    ($e:ident) => {
        $e
    };
}

macro_rules! api_table {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $sym:ident, $base:literal, $ptds:literal, $kind:ident,
        fn $wrapper:ident($($a:ident: $t:ty),*)
        $(pre |$pf:ident, $pp:ident $(, $pe:ident)?| $pv:ident = $ps:expr;)?
        |$ev:ident| $fill:block
    )*) => {
        impl Api {
            /// Our wrapper of it.
            pub fn wrapper(self) -> *mut c_void {
                match self { $(Api::$variant => $wrapper as *mut c_void,)* }
            }
        }

        $(
            #[doc = concat!("The wrapper of `", stringify!($variant), "` (see [`Api::symbol`]).")]
            ///
            /// # Safety
            /// The driver's contract for the entry point.
            pub unsafe extern "C" fn $wrapper($($a: $t),*) -> CuResult {
                type F = unsafe extern "C" fn($($t),*) -> CuResult;
                let p = real(Api::$variant);
                if p.is_null() {
                    return CUDA_ERROR_NOT_FOUND;
                }
                // SAFETY: `p` is the driver's entry of this name, which has this signature.
                let f = unsafe { std::mem::transmute::<*mut c_void, F>(p) };
                $(
                    // A launch: of the function's module as hot attach changed it, numbered,
                    // and given the hidden parameters its kernel needs.
                    let $pf = super::hot::function($pf);
                    let extra_in: *mut *mut c_void = launch_extra!($($pe)?);
                    // SAFETY: the application's launch arguments, as the driver reads them.
                    let mut $pv = unsafe { super::launch::prepare($pf, $ps, $pp, extra_in, true) };
                    let (params_out, _extra_out) = $pv.args($pp, extra_in);
                    let $pp = params_out;
                    $( let $pe = _extra_out; )?
                )?
                // Libraries loaded since the last look get their symbol probes.
                super::symprobes::poll();
                let probed = super::uprobes::active(Api::$variant);
                // Paused (`bpftime_host_probes_pause`): no probes and no log records.
                if super::uprobes::paused() || (!probed && !logging()) {
                    // SAFETY: the application's arguments, forwarded.
                    return unsafe { f($($a),*) };
                }
                let args = [$($a as u64),*];
                if probed {
                    super::uprobes::run(Api::$variant, &args, p as u64, None);
                }
                let t0 = now_ns();
                // SAFETY: as above.
                let r = unsafe { f($($a),*) };
                if probed {
                    super::uprobes::run(Api::$variant, &args, p as u64, Some(r));
                }
                if !logging() {
                    return r;
                }
                let mut $ev = ApiEvent::new(Api::$variant as u16, Kind::$kind);
                $ev.start_ns = t0;
                $ev.dur_ns = now_ns().saturating_sub(t0);
                $ev.result = r;
                if $ptds {
                    $ev.flags |= FLAG_PTDS;
                }
                $fill
                log($ev);
                r
            }
        )*
    };
}

include!("api_table.rs");
static SLOTS: [AtomicUsize; 64] = [const { AtomicUsize::new(0) }; 64];
const _: () = assert!(SLOTS.len() >= Api::ALL.len(), "a slot per Api entry");

/// Records `f` as the real entry of `a` (what `cuGetProcAddress` or `dlsym` returned).
pub fn set_real(a: Api, f: *mut c_void) {
    if !f.is_null() && !driver::same_object(f, a.wrapper()) {
        SLOTS[a as usize].store(f as usize, Ordering::Release);
    }
}

/// The real entry of `a`: its slot, else `libcuda.so.1`'s export.
fn real(a: Api) -> *mut c_void {
    let v = SLOTS[a as usize].load(Ordering::Acquire);
    if v != 0 {
        return v as *mut c_void;
    }
    let lib = driver::libcuda();
    if lib.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `lib` is a live handle from dlopen; the name is NUL-terminated.
    let f = unsafe { driver::real_dlsym(lib, a.symbol().as_ptr()) };
    set_real(a, f);
    f
}

/// The open log, if this session writes one.
struct Log {
    file: std::io::BufWriter<std::fs::File>,
    path: String,
    events: u64,
}

static LOG: OnceLock<Option<Mutex<Log>>> = OnceLock::new();

fn open_log() -> Option<Mutex<Log>> {
    let path = super::hooks::api_log_path()?;
    // `trace` checks the path and leaves no file; the first process of the app to log
    // takes FILE, any other one (a second process using CUDA) writes FILE.<pid>.
    let (file, path) = match std::fs::File::create_new(&path) {
        Ok(f) => (f, path),
        Err(_) => {
            let p = format!("{path}.{}", std::process::id());
            (std::fs::File::create(&p).ok()?, p)
        }
    };
    let mut file = std::io::BufWriter::with_capacity(1 << 20, file);
    file.write_all(&crate::apilog::header()).ok()?;
    // SAFETY: registers a plain `extern "C" fn()` with the C library.
    unsafe { libc::atexit(at_exit) };
    Some(Mutex::new(Log {
        file,
        path,
        events: 0,
    }))
}

/// Whether calls are being logged.
pub fn logging() -> bool {
    LOG.get_or_init(open_log).is_some()
}

fn log(e: ApiEvent) {
    let Some(Some(m)) = LOG.get() else {
        return;
    };
    thread_local! {
        // SAFETY: gettid has no preconditions (once per thread: it is a system call).
        static TID: u32 = unsafe { libc::gettid() } as u32;
    }
    let mut e = e;
    e.tid = TID.try_with(|t| *t).unwrap_or(0);
    if let Ok(mut l) = m.lock()
        && l.file.write_all(&e.to_bytes()).is_ok()
    {
        l.events += 1;
    }
}

/// Flushes the log and reports it (at exit).
pub fn finish() {
    let Some(Some(m)) = LOG.get() else {
        return;
    };
    if let Ok(mut l) = m.lock() {
        let _ = l.file.flush();
        super::hooks::report(&[crate::session::ReportLine::ApiLog {
            events: l.events,
            path: l.path.clone(),
        }]);
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(finish);
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn copy(e: &mut ApiEvent, dst: u64, src: u64, n: usize) {
    e.dst = dst;
    e.src = src;
    e.bytes = n as u64;
}

fn copy_async(e: &mut ApiEvent, dst: u64, src: u64, n: usize, s: Handle) {
    copy(e, dst, src, n);
    e.stream = s as u64;
    e.flags |= FLAG_ASYNC;
}

/// The device address an allocation wrote, when it succeeded.
fn out_u64(r: CuResult, d: *mut u64) -> u64 {
    if r != 0 || d.is_null() {
        return 0;
    }
    // SAFETY: the driver wrote it (the call succeeded with this out-pointer).
    unsafe { *d }
}

/// The host address an allocation wrote, when it succeeded.
fn out_ptr(r: CuResult, p: *mut *mut c_void) -> u64 {
    if r != 0 || p.is_null() {
        return 0;
    }
    // SAFETY: as in `out_u64`.
    unsafe { *p as u64 }
}

fn launch(e: &mut ApiEvent, f: Handle, dims: [c_uint; 7], s: Handle) {
    e.aux = f as u64;
    e.stream = s as u64;
    e.bytes = dims[..6].iter().map(|&d| d as u64).product();
    e.flags |= FLAG_ASYNC;
}

/// The stream of a `cuLaunchKernelEx` config (null: the default stream).
fn config_stream(config: *const LaunchConfig) -> Handle {
    if config.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the application's config, which the driver reads for this launch.
    unsafe { (*config).stream }
}

fn launch_ex(e: &mut ApiEvent, config: *const LaunchConfig, f: Handle) {
    if config.is_null() {
        return;
    }
    // SAFETY: the driver read the same config for the launch that just returned.
    let c = unsafe { &*config };
    launch(e, f, c.dims, c.stream);
}

/// The direction of a unified-addressing copy: memory the driver calls device (or
/// managed) memory is the device side; anything else, pageable or pinned, is the host.
fn classify(dst: u64, src: u64) -> Kind {
    match (on_device(src), on_device(dst)) {
        (false, true) => Kind::HtoD,
        (true, false) => Kind::DtoH,
        (true, true) => Kind::DtoD,
        (false, false) => Kind::HtoH,
    }
}

type PointerGetAttribute = unsafe extern "C" fn(*mut c_void, c_int, u64) -> CuResult;

fn on_device(p: u64) -> bool {
    let Some(get) = driver::export_fn!(c"cuPointerGetAttribute", PointerGetAttribute) else {
        return false;
    };
    let mut t: c_uint = 0;
    // SAFETY: `t` is a valid out-pointer for this attribute (an unsigned int).
    let r = unsafe { get((&mut t as *mut c_uint).cast(), ATTR_MEMORY_TYPE, p) };
    r == 0 && (t == MEMORYTYPE_DEVICE || t == MEMORYTYPE_UNIFIED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launches_count_threads() {
        let mut e = ApiEvent::new(0, Kind::Launch);
        launch(&mut e, 7 as Handle, [2, 3, 1, 128, 2, 1, 0], 9 as Handle);
        assert_eq!((e.bytes, e.aux, e.stream), (2 * 3 * 128 * 2, 7, 9));
        assert!(e.flags & FLAG_ASYNC != 0);
    }
}
