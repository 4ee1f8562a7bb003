//! Correlation ids and launch times: what the shim passes to kernels whose probes read
//! `correlation_id` or `launch_time` ([`ebpf::ProbeCtx`]).
//!
//! ```text
//! instrument: kernel k(p0 … pn-1)  ──▶  k(p0 … pn-1, .u64 __bpftime_corr, .u64 __bpftime_launch)
//!             (only kernels with such a probe: crate::instrument::HiddenParams)
//! launch:     cuLaunchKernel(f, …, params[n], extra)            [api.rs wrappers]
//!               └─ f one of ours? ──▶ params[n+2] = {…, &corr, &time}   (or the extra buffer,
//!                                                                          grown by 16 bytes)
//! graph node: cuGraphAdd*/Set* kernel node params                  [the graph wrappers below]
//!               └─ the same, with a time of 0 (a node runs at every graph launch)
//! ```
//!
//! Every launch gets the next id of one process-wide counter (from 1), hidden parameters
//! or not: the API log records it (`dst` of a launch event), a host probe on the launch
//! reads it with `bpftime_correlation_id()` (helper 521), and the kernel's probes read the
//! same number from their ctx. The time is `CLOCK_MONOTONIC` at the call, moved onto the
//! GPU's `%globaltimer` by the clock calibration ([`super::clock`]); 0 before a
//! calibration succeeded.
//!
//! **Which functions are ours.** A launch names a `CUfunction` (or a `CUkernel`); the shim
//! asks the driver its name (`cuFuncGetName`, else `cuKernelGetName`) and looks it up among
//! the kernels it gave hidden parameters, then checks the loaded function's parameter count
//! with `cuFuncGetParamInfo` where the driver has it (the same name in a module loaded
//! without probes has two fewer). Answers are cached per handle; every module load clears
//! the cache (a handle freed by an unload can come back for another function). A driver
//! without `cuFuncGetName` (before CUDA 12.3) gets no hidden parameters at all: the
//! instrumenter is told so at setup, and the fields read 0.

use super::driver::{self, CuResult, Handle};
use crate::instrument::HiddenParams;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};

/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`, `CU_LAUNCH_PARAM_BUFFER_SIZE`
/// (and `CU_LAUNCH_PARAM_END_AS_INT`, the same value).
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;
/// `CUDA_ERROR_INVALID_VALUE`: `cuFuncGetParamInfo` past the last parameter.
const INVALID_VALUE: CuResult = 1;

static ON: AtomicBool = AtomicBool::new(false);
static NEXT: AtomicU64 = AtomicU64::new(1);

/// Kernels with hidden parameters, by mangled name.
fn kernels() -> &'static RwLock<HashMap<String, (u32, u32)>> {
    static K: OnceLock<RwLock<HashMap<String, (u32, u32)>>> = OnceLock::new();
    K.get_or_init(Default::default)
}

/// A function's own parameter count and the hidden parameters' byte offset.
type Layout = (u32, u32);
/// What each function handle seen at a launch is: `Some(layout)` for ours.
type Handles = RwLock<HashMap<usize, Option<Layout>>>;

fn handles() -> &'static Handles {
    static H: OnceLock<Handles> = OnceLock::new();
    H.get_or_init(Default::default)
}

thread_local! {
    /// The correlation id of this thread's launch in flight (or its last one).
    static CURRENT: Cell<u64> = const { Cell::new(0) };
}

/// Turns launch tracking on: every launch is numbered, and launches of kernels with hidden
/// parameters pass them. Set at the shim's start when a probe reads the launch fields.
pub fn enable() {
    ON.store(true, Ordering::Release);
}

/// Whether launches are tracked.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Whether this driver can tell the shim which function a launch names (`cuFuncGetName`):
/// without it, no kernel may be given hidden parameters.
pub fn supported() -> bool {
    name_fn().is_some()
}

/// Records kernels an instrumented image gave hidden parameters.
pub fn register(hidden: &[HiddenParams]) {
    if hidden.is_empty() {
        return;
    }
    if let Ok(mut k) = kernels().write() {
        for h in hidden {
            k.insert(h.kernel.clone(), (h.params, h.offset));
        }
    }
}

/// Forgets what each handle was (at every module load).
pub fn forget_handles() {
    if let Ok(mut h) = handles().write()
        && !h.is_empty()
    {
        h.clear();
    }
}

/// The correlation id of the calling thread's launch in flight (0: none yet).
pub fn current() -> u64 {
    CURRENT.try_with(|c| c.get()).unwrap_or(0)
}

type FuncGetName = unsafe extern "C" fn(*mut *const c_char, Handle) -> CuResult;
type FuncGetParamInfo = unsafe extern "C" fn(Handle, usize, *mut usize, *mut usize) -> CuResult;

fn name_fn() -> Option<FuncGetName> {
    driver::export_fn!(c"cuFuncGetName", FuncGetName)
}

fn kernel_name_fn() -> Option<FuncGetName> {
    // cuKernelGetName(const char **, CUkernel) has the same shape.
    driver::export_fn!(c"cuKernelGetName", FuncGetName)
}

fn param_info_fn() -> Option<FuncGetParamInfo> {
    driver::export_fn!(c"cuFuncGetParamInfo", FuncGetParamInfo)
}

/// The mangled name of a launched function: a `CUfunction` (`cuFuncGetName`) or a
/// `CUkernel` (`cuKernelGetName`).
pub(crate) fn function_name(f: Handle) -> Option<String> {
    let mut name: *const c_char = std::ptr::null();
    let named = [name_fn(), kernel_name_fn()]
        .into_iter()
        .flatten()
        .any(|get| {
            // SAFETY: `name` is a valid out-pointer; the driver checks the handle.
            unsafe { get(&mut name, f) == driver::CUDA_SUCCESS && !name.is_null() }
        });
    if !named {
        return None;
    }
    // SAFETY: the driver returned a NUL-terminated name it owns.
    let name = unsafe { CStr::from_ptr(name) };
    Some(name.to_string_lossy().into_owned())
}

/// The hidden-parameter layout of the function `f`, if it is one of ours.
fn resolve(f: Handle) -> Option<(u32, u32)> {
    if f.is_null() {
        return None;
    }
    if let Ok(h) = handles().read()
        && let Some(v) = h.get(&(f as usize))
    {
        return *v;
    }
    let found = identify(f);
    if let Ok(mut h) = handles().write() {
        h.insert(f as usize, found);
    }
    found
}

fn identify(f: Handle) -> Option<(u32, u32)> {
    let kernels = kernels().read().ok()?;
    if kernels.is_empty() {
        return None;
    }
    let name = function_name(f)?;
    let (params, offset) = *kernels.get(&name)?;
    if let Some(info) = param_info_fn() {
        let (mut off, mut size) = (0usize, 0usize);
        // SAFETY: valid out-pointers; the driver checks the handle and the index.
        let last = unsafe { info(f, params as usize + 1, &mut off, &mut size) };
        // SAFETY: as above.
        let past = unsafe { info(f, params as usize + 2, &mut off, &mut size) };
        match (last, past) {
            // Exactly two more parameters than its own: the instrumented one.
            (driver::CUDA_SUCCESS, r) if r != driver::CUDA_SUCCESS => {}
            // Fewer, or more: a function of that name loaded without probes.
            (INVALID_VALUE, _) | (driver::CUDA_SUCCESS, _) => return None,
            // The driver does not answer for this handle: the name decides.
            _ => {}
        }
    }
    Some((params, offset))
}

/// A launch's rewritten arguments; alive until the driver call returns.
pub struct Pre {
    corr: u64,
    captured: bool,
    /// The hidden values: correlation id, launch time (their addresses go in `params`);
    /// boxed, so that moving the `Pre` leaves them in place (no allocation without them).
    values: Option<Box<[u64; 2]>>,
    params: Vec<*mut c_void>,
    buffer: Vec<u8>,
    buffer_size: Option<Box<usize>>,
    extra: Vec<*mut c_void>,
}

impl Pre {
    fn none() -> Pre {
        Pre {
            corr: 0,
            captured: false,
            values: None,
            params: Vec::new(),
            buffer: Vec::new(),
            buffer_size: None,
            extra: Vec::new(),
        }
    }

    /// The correlation id (0 when launches are not tracked).
    pub fn corr(&self) -> u64 {
        self.corr
    }

    /// [`crate::apilog`] flags of the launch: [`crate::apilog::FLAG_CAPTURED`].
    pub fn flags(&self) -> u8 {
        if self.captured {
            crate::apilog::FLAG_CAPTURED
        } else {
            0
        }
    }

    /// The `kernelParams` and `extra` to give the driver.
    pub fn args(
        &mut self,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> (*mut *mut c_void, *mut *mut c_void) {
        let p = if self.params.is_empty() {
            params
        } else {
            self.params.as_mut_ptr()
        };
        let e = if self.extra.is_empty() {
            extra
        } else {
            self.extra.as_mut_ptr()
        };
        (p, e)
    }
}

type StreamIsCapturing = unsafe extern "C" fn(Handle, *mut c_int) -> CuResult;

/// Whether `stream` is capturing a graph: a captured launch runs at every replay of the
/// graph, so it gets no launch time.
fn capturing(stream: Handle) -> bool {
    let Some(is) = driver::export_fn!(c"cuStreamIsCapturing", StreamIsCapturing) else {
        return false;
    };
    let mut status: c_int = 0;
    // SAFETY: the application's stream and a local out-pointer.
    unsafe { is(stream, &mut status) == driver::CUDA_SUCCESS && status != 0 }
}

/// Numbers a launch of `f` on `stream` and, for a kernel with hidden parameters, builds the
/// arguments that pass them. `time`: stamp the launch time (false for graph nodes; a
/// launch captured into a graph gets none either).
///
/// # Safety
/// `params` and `extra` are what the application gives the driver for `f`.
pub unsafe fn prepare(
    f: Handle,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    time: bool,
) -> Pre {
    if !on() {
        return Pre::none();
    }
    let mut pre = Pre::none();
    pre.corr = NEXT.fetch_add(1, Ordering::Relaxed);
    let _ = CURRENT.try_with(|c| c.set(pre.corr));
    let Some((n, offset)) = resolve(f) else {
        return pre;
    };
    pre.captured = time && capturing(stream);
    let launched = if time && !pre.captured {
        super::clock::to_gpu(ebpf::interp::monotonic_ns()).unwrap_or(0)
    } else {
        0
    };
    let values = pre.values.insert(Box::new([pre.corr, launched]));
    let vp = values.as_mut_ptr();
    if !params.is_null() {
        // SAFETY: the driver reads `n` entries of `params` for this function's own
        // parameters (its contract with the application).
        let own = unsafe { std::slice::from_raw_parts(params, n as usize) };
        pre.params.extend_from_slice(own);
        // SAFETY: both elements of `values`.
        pre.params
            .extend([vp.cast::<c_void>(), unsafe { vp.add(1) }.cast::<c_void>()]);
        return pre;
    }
    if extra.is_null() {
        return pre;
    }
    // `extra`: key/value pairs up to CU_LAUNCH_PARAM_END.
    let (mut buf, mut size): (*const u8, usize) = (std::ptr::null(), 0);
    let mut i = 0;
    loop {
        // SAFETY: the list is terminated by CU_LAUNCH_PARAM_END (the driver's contract).
        let key = unsafe { *extra.add(i) } as usize;
        if key == PARAM_END {
            break;
        }
        // SAFETY: every key but the end has a value after it.
        let val = unsafe { *extra.add(i + 1) };
        match key {
            PARAM_BUFFER_POINTER => buf = val as *const u8,
            // SAFETY: the value of BUFFER_SIZE points to a size_t.
            PARAM_BUFFER_SIZE if !val.is_null() => size = unsafe { *(val as *const usize) },
            _ => {}
        }
        i += 2;
        if i > 64 {
            return pre;
        }
    }
    if buf.is_null() {
        return pre;
    }
    let offset = offset as usize;
    pre.buffer = vec![0u8; offset + 16];
    // SAFETY: the application's buffer holds `size` bytes.
    let own = unsafe { std::slice::from_raw_parts(buf, size.min(offset)) };
    pre.buffer[..own.len()].copy_from_slice(own);
    pre.buffer[offset..offset + 8].copy_from_slice(&pre.corr.to_le_bytes());
    pre.buffer[offset + 8..].copy_from_slice(&launched.to_le_bytes());
    let size = pre.buffer_size.insert(Box::new(pre.buffer.len()));
    let size_ptr: *mut usize = &mut **size;
    pre.extra = vec![
        PARAM_BUFFER_POINTER as *mut c_void,
        pre.buffer.as_mut_ptr().cast(),
        PARAM_BUFFER_SIZE as *mut c_void,
        size_ptr.cast(),
        PARAM_END as *mut c_void,
    ];
    pre
}

/// Offsets in `CUDA_KERNEL_NODE_PARAMS` (v1, v2 and v3 agree): `func`, `kernelParams`,
/// `extra`; v2/v3 add `kern` (used when `func` is null) and `ctx`.
const NODE_FUNC: usize = 0;
const NODE_PARAMS: usize = 40;
const NODE_EXTRA: usize = 48;
const NODE_KERN: usize = 56;
/// Sizes of `CUDA_KERNEL_NODE_PARAMS` v1 and v2 (v3 = v2).
const NODE_V1: usize = 56;
const NODE_V2: usize = 72;
/// Offset of the kernel parameters in `CUgraphNodeParams`, and its type value for kernels.
const GENERIC_KERNEL: usize = 16;
const TYPE_KERNEL: c_int = 0;

/// A kernel node's parameters with hidden values added, if its function needs them:
/// the copy to give the driver, and what keeps its arrays alive.
///
/// # Safety
/// `node` points to a `CUDA_KERNEL_NODE_PARAMS` of `size` bytes (v1 or v2).
unsafe fn node_params(node: *const u8, size: usize) -> Option<(Vec<u64>, Pre)> {
    if node.is_null() || (!on() && super::hot::generation() == 0) {
        return None;
    }
    let word = |o: usize| {
        // SAFETY: `o + 8 <= size` for every offset read below (caller's contract).
        unsafe { (node.add(o) as *const u64).read_unaligned() }
    };
    let mut at = NODE_FUNC;
    if word(NODE_FUNC) == 0 && size >= NODE_V2 {
        at = NODE_KERN;
    }
    let original = word(at) as Handle;
    // A hot change moves the node to the function's newly instrumented module.
    let f = super::hot::function(original);
    // SAFETY: the node's own parameter arrays, as the driver would read them.
    let mut pre = unsafe {
        prepare(
            f,
            std::ptr::null_mut(),
            word(NODE_PARAMS) as *mut *mut c_void,
            word(NODE_EXTRA) as *mut *mut c_void,
            false,
        )
    };
    if pre.params.is_empty() && pre.extra.is_empty() && f == original {
        return None;
    }
    let mut copy: Vec<u64> = (0..size / 8).map(word).collect();
    copy[at / 8] = f as u64;
    let (p, e) = pre.args(
        word(NODE_PARAMS) as *mut *mut c_void,
        word(NODE_EXTRA) as *mut *mut c_void,
    );
    copy[NODE_PARAMS / 8] = p as u64;
    copy[NODE_EXTRA / 8] = e as u64;
    Some((copy, pre))
}

macro_rules! real_or_fail {
    ($h:expr, $ty:ty) => {{
        let p = driver::real($h);
        if p.is_null() {
            return driver::CUDA_ERROR_NOT_FOUND;
        }
        // SAFETY: the slot of `$h` holds the driver's function of type `$ty`.
        unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
    }};
}

type AddKernelNode =
    unsafe extern "C" fn(*mut Handle, Handle, *const Handle, usize, *const u8) -> CuResult;
type KernelNodeSet = unsafe extern "C" fn(Handle, *const u8) -> CuResult;
type ExecKernelNodeSet = unsafe extern "C" fn(Handle, Handle, *const u8) -> CuResult;
type AddNode =
    unsafe extern "C" fn(*mut Handle, Handle, *const Handle, usize, *const u8) -> CuResult;
type AddNodeV2 = unsafe extern "C" fn(
    *mut Handle,
    Handle,
    *const Handle,
    *const c_void,
    usize,
    *const u8,
) -> CuResult;

/// A kernel node's parameters as the driver should see them.
///
/// # Safety
/// As [`node_params`].
unsafe fn with_node<R>(p: *const u8, size: usize, call: impl FnOnce(*const u8) -> R) -> R {
    // SAFETY: forwarded contract.
    match unsafe { node_params(p, size) } {
        Some((copy, _pre)) => call(copy.as_ptr().cast()),
        None => call(p),
    }
}

/// A generic node's parameters (`CUgraphNodeParams`) as the driver should see them.
///
/// # Safety
/// `p` points to a `CUgraphNodeParams`.
unsafe fn with_generic<R>(p: *const u8, call: impl FnOnce(*const u8) -> R) -> R {
    if p.is_null() || (!on() && super::hot::generation() == 0) {
        return call(p);
    }
    // SAFETY: `type` is the struct's first field.
    if unsafe { (p as *const c_int).read_unaligned() } != TYPE_KERNEL {
        return call(p);
    }
    // SAFETY: a kernel node's parameters (v3 = v2 layout) follow at GENERIC_KERNEL.
    match unsafe { node_params(p.add(GENERIC_KERNEL), NODE_V2) } {
        Some((kernel, _pre)) => {
            // The whole struct (256 bytes: type, reserved, a 232-byte union, reserved).
            // SAFETY: CUgraphNodeParams is 256 bytes.
            let mut all = unsafe { std::slice::from_raw_parts(p, 256) }.to_vec();
            for (i, w) in kernel.iter().enumerate() {
                let o = GENERIC_KERNEL + 8 * i;
                all[o..o + 8].copy_from_slice(&w.to_le_bytes());
            }
            call(all.as_ptr())
        }
        None => call(p),
    }
}

macro_rules! node_wrappers {
    ($($(#[$doc:meta])* $name:ident = $hook:ident, $size:expr;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// The driver's contract for the entry point.
        pub unsafe extern "C" fn $name(
            node: *mut Handle,
            graph: Handle,
            deps: *const Handle,
            n: usize,
            params: *const u8,
        ) -> CuResult {
            let real = real_or_fail!(driver::Hook::$hook, AddKernelNode);
            // SAFETY: the application's arguments, forwarded (params rewritten, same layout).
            unsafe { with_node(params, $size, |p| real(node, graph, deps, n, p)) }
        }
    )*};
}

node_wrappers! {
    /// `cuGraphAddKernelNode` (v1 parameters).
    graph_add_kernel_node = GraphAddKernelNode, NODE_V1;
    /// `cuGraphAddKernelNode_v2`.
    graph_add_kernel_node_v2 = GraphAddKernelNodeV2, NODE_V2;
}

/// `cuGraphKernelNodeSetParams` (v1).
///
/// # Safety
/// The driver's contract.
pub unsafe extern "C" fn graph_kernel_node_set_params(node: Handle, params: *const u8) -> CuResult {
    let real = real_or_fail!(driver::Hook::GraphKernelNodeSetParams, KernelNodeSet);
    // SAFETY: forwarded, rewritten in the same layout.
    unsafe { with_node(params, NODE_V1, |p| real(node, p)) }
}

/// `cuGraphKernelNodeSetParams_v2`.
///
/// # Safety
/// The driver's contract.
pub unsafe extern "C" fn graph_kernel_node_set_params_v2(
    node: Handle,
    params: *const u8,
) -> CuResult {
    let real = real_or_fail!(driver::Hook::GraphKernelNodeSetParamsV2, KernelNodeSet);
    // SAFETY: forwarded, rewritten in the same layout.
    unsafe { with_node(params, NODE_V2, |p| real(node, p)) }
}

/// `cuGraphExecKernelNodeSetParams` (v1).
///
/// # Safety
/// The driver's contract.
pub unsafe extern "C" fn graph_exec_kernel_node_set_params(
    exec: Handle,
    node: Handle,
    params: *const u8,
) -> CuResult {
    let real = real_or_fail!(
        driver::Hook::GraphExecKernelNodeSetParams,
        ExecKernelNodeSet
    );
    // SAFETY: forwarded, rewritten in the same layout.
    unsafe { with_node(params, NODE_V1, |p| real(exec, node, p)) }
}

/// `cuGraphExecKernelNodeSetParams_v2`.
///
/// # Safety
/// The driver's contract.
pub unsafe extern "C" fn graph_exec_kernel_node_set_params_v2(
    exec: Handle,
    node: Handle,
    params: *const u8,
) -> CuResult {
    let real = real_or_fail!(
        driver::Hook::GraphExecKernelNodeSetParamsV2,
        ExecKernelNodeSet
    );
    // SAFETY: forwarded, rewritten in the same layout.
    unsafe { with_node(params, NODE_V2, |p| real(exec, node, p)) }
}

/// `cuGraphAddNode` (CUDA 12.2).
///
/// # Safety
/// The driver's contract.
pub unsafe extern "C" fn graph_add_node(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    params: *const u8,
) -> CuResult {
    let real = real_or_fail!(driver::Hook::GraphAddNode, AddNode);
    // SAFETY: forwarded, rewritten in the same layout.
    unsafe { with_generic(params, |p| real(node, graph, deps, n, p)) }
}

/// `cuGraphAddNode_v2` (CUDA 12.3: edge data).
///
/// # Safety
/// The driver's contract.
pub unsafe extern "C" fn graph_add_node_v2(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    edges: *const c_void,
    n: usize,
    params: *const u8,
) -> CuResult {
    let real = real_or_fail!(driver::Hook::GraphAddNodeV2, AddNodeV2);
    // SAFETY: forwarded, rewritten in the same layout.
    unsafe { with_generic(params, |p| real(node, graph, deps, edges, n, p)) }
}

/// `cuGraphNodeSetParams`.
///
/// # Safety
/// The driver's contract.
pub unsafe extern "C" fn graph_node_set_params(node: Handle, params: *const u8) -> CuResult {
    let real = real_or_fail!(driver::Hook::GraphNodeSetParams, KernelNodeSet);
    // SAFETY: forwarded, rewritten in the same layout.
    unsafe { with_generic(params, |p| real(node, p)) }
}

/// `cuGraphExecNodeSetParams`.
///
/// # Safety
/// The driver's contract.
pub unsafe extern "C" fn graph_exec_node_set_params(
    exec: Handle,
    node: Handle,
    params: *const u8,
) -> CuResult {
    let real = real_or_fail!(driver::Hook::GraphExecNodeSetParams, ExecKernelNodeSet);
    // SAFETY: forwarded, rewritten in the same layout.
    unsafe { with_generic(params, |p| real(exec, node, p)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_buffers_grow_by_the_hidden_values() {
        enable();
        // A handle no driver names: no hidden parameters, but a number.
        // SAFETY: null arrays are never read.
        let pre = unsafe {
            prepare(
                0x1234 as Handle,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                true,
            )
        };
        assert!(pre.corr() >= 1);
        assert!(pre.params.is_empty() && pre.extra.is_empty());
        assert_eq!(current(), pre.corr());
    }
}
