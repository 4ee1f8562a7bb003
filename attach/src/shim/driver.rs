//! The few CUDA driver types the hooks need, and the real entry points behind them.
//!
//! A hooked function's real address is kept in one slot per [`Hook`]. It is filled by
//! whichever path the application used: `cuGetProcAddress` (what cudart does, statically
//! linked or not), `dlsym` on `libcuda.so.1` (CuPy, Numba, PyTorch), or, for applications
//! linked with `-lcuda`, on first use from `libcuda.so.1` itself. The real `dlsym` comes
//! from `dlvsym(RTLD_NEXT, "dlsym", …)`, so our own `dlsym` is never re-entered.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `CUresult`.
pub type CuResult = c_int;
/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: CuResult = 0;
/// `CUDA_ERROR_INVALID_VALUE`.
pub const CUDA_ERROR_INVALID_VALUE: CuResult = 1;
/// `CUDA_ERROR_NOT_FOUND`.
pub const CUDA_ERROR_NOT_FOUND: CuResult = 500;
/// `CUDA_ERROR_FILE_NOT_FOUND`.
pub const CUDA_ERROR_FILE_NOT_FOUND: CuResult = 301;
/// An opaque driver handle (`CUmodule`, `CUlibrary`, `CUcontext`, `CUlinkState`, …).
pub type Handle = *mut c_void;
/// `CU_JIT_INPUT_CUBIN`.
pub const CU_JIT_INPUT_CUBIN: c_uint = 0;
/// `CU_JIT_INPUT_PTX`.
pub const CU_JIT_INPUT_PTX: c_uint = 1;
/// `CU_JIT_INPUT_FATBINARY`.
pub const CU_JIT_INPUT_FATBINARY: c_uint = 2;
/// `CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP`.
pub const HOST_REGISTER_FLAGS: c_uint = 0x1 | 0x2;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
pub const ATTR_CC_MAJOR: c_int = 75;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
pub const ATTR_CC_MINOR: c_int = 76;

/// `cuModuleLoadData`.
pub type ModuleLoadData = unsafe extern "C" fn(*mut Handle, *const c_void) -> CuResult;
/// `cuModuleLoadDataEx`.
pub type ModuleLoadDataEx = unsafe extern "C" fn(
    *mut Handle,
    *const c_void,
    c_uint,
    *mut c_int,
    *mut *mut c_void,
) -> CuResult;
/// `cuModuleLoad`.
pub type ModuleLoad = unsafe extern "C" fn(*mut Handle, *const c_char) -> CuResult;
/// `cuLibraryLoadData`.
pub type LibraryLoadData = unsafe extern "C" fn(
    *mut Handle,
    *const c_void,
    *mut c_int,
    *mut *mut c_void,
    c_uint,
    *mut c_int,
    *mut *mut c_void,
    c_uint,
) -> CuResult;
/// `cuLibraryLoadFromFile`.
pub type LibraryLoadFromFile = unsafe extern "C" fn(
    *mut Handle,
    *const c_char,
    *mut c_int,
    *mut *mut c_void,
    c_uint,
    *mut c_int,
    *mut *mut c_void,
    c_uint,
) -> CuResult;
/// `cuLinkAddData_v2`.
pub type LinkAddData = unsafe extern "C" fn(
    Handle,
    c_uint,
    *mut c_void,
    usize,
    *const c_char,
    c_uint,
    *mut c_int,
    *mut *mut c_void,
) -> CuResult;
/// `cuLinkAddFile_v2`.
pub type LinkAddFile = unsafe extern "C" fn(
    Handle,
    c_uint,
    *const c_char,
    c_uint,
    *mut c_int,
    *mut *mut c_void,
) -> CuResult;
/// `cuGetProcAddress_v2`.
pub type GetProcAddressV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult;
/// `cuGetProcAddress` (before CUDA 12).
pub type GetProcAddressV1 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
/// `cuCtxGetCurrent`.
pub type CtxGetCurrent = unsafe extern "C" fn(*mut Handle) -> CuResult;
/// `cuCtxGetDevice`.
pub type CtxGetDevice = unsafe extern "C" fn(*mut c_int) -> CuResult;
/// `cuDeviceGetAttribute`.
pub type DeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult;
/// `cuMemHostRegister_v2`.
pub type MemHostRegister = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> CuResult;
/// `cuMemHostGetDevicePointer_v2`.
pub type MemHostGetDevicePointer = unsafe extern "C" fn(*mut u64, *mut c_void, c_uint) -> CuResult;
/// `cuThreadExchangeStreamCaptureMode`.
pub type ThreadExchangeStreamCaptureMode = unsafe extern "C" fn(*mut c_int) -> CuResult;
/// `cuLinkCreate_v2`.
pub type LinkCreate =
    unsafe extern "C" fn(c_uint, *mut c_int, *mut *mut c_void, *mut Handle) -> CuResult;
/// `cuLinkComplete`.
pub type LinkComplete = unsafe extern "C" fn(Handle, *mut *mut c_void, *mut usize) -> CuResult;
/// `cuLinkDestroy`.
pub type LinkDestroy = unsafe extern "C" fn(Handle) -> CuResult;
/// `cuCtxSetCurrent`.
pub type CtxSetCurrent = unsafe extern "C" fn(Handle) -> CuResult;
/// `cuCtxDestroy_v2`.
pub type CtxDestroy = unsafe extern "C" fn(Handle) -> CuResult;
/// `cuDevicePrimaryCtxRelease_v2`, `cuDevicePrimaryCtxReset_v2`.
pub type PrimaryCtxRelease = unsafe extern "C" fn(c_int) -> CuResult;
/// `cuDevicePrimaryCtxGetState`.
pub type PrimaryCtxGetState = unsafe extern "C" fn(c_int, *mut c_uint, *mut c_int) -> CuResult;
/// `cuMemAlloc_v2`.
pub type MemAlloc = unsafe extern "C" fn(*mut u64, usize) -> CuResult;
/// `cuMemFree_v2`.
pub type MemFree = unsafe extern "C" fn(u64) -> CuResult;
/// `cuStreamCreate`.
pub type StreamCreate = unsafe extern "C" fn(*mut Handle, c_uint) -> CuResult;
/// `CU_STREAM_NON_BLOCKING`: no implicit synchronisation with the legacy default stream.
pub const STREAM_NON_BLOCKING: c_uint = 1;
/// `cuStreamSynchronize`.
pub type StreamSynchronize = unsafe extern "C" fn(Handle) -> CuResult;
/// `cuMemcpyHtoDAsync_v2`.
pub type MemcpyHtoDAsync = unsafe extern "C" fn(u64, *const c_void, usize, Handle) -> CuResult;
/// `cuMemsetD8Async`.
pub type MemsetD8Async = unsafe extern "C" fn(u64, u8, usize, Handle) -> CuResult;
/// `cuMemcpyDtoHAsync_v2`.
pub type MemcpyDtoHAsync = unsafe extern "C" fn(*mut c_void, u64, usize, Handle) -> CuResult;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`: the calling thread may make calls a capture forbids.
pub const CAPTURE_MODE_RELAXED: c_int = 2;
/// `nvJitLinkAddData` (libnvJitLink, the linker Numba and newer toolchains use).
pub type NvJitLinkAddData =
    unsafe extern "C" fn(Handle, c_uint, *const c_void, usize, *const c_char) -> c_int;
/// `nvJitLinkAddFile`.
pub type NvJitLinkAddFile = unsafe extern "C" fn(Handle, c_uint, *const c_char) -> c_int;
/// `NVJITLINK_INPUT_PTX`.
pub const NVJITLINK_INPUT_PTX: c_uint = 2;
/// `NVJITLINK_INPUT_FATBIN`.
pub const NVJITLINK_INPUT_FATBIN: c_uint = 4;

/// Every driver function whose real address the shim keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Hook {
    /// `cuModuleLoadData`.
    ModuleLoadData,
    /// `cuModuleLoadDataEx`.
    ModuleLoadDataEx,
    /// `cuModuleLoadFatBinary`.
    ModuleLoadFatBinary,
    /// `cuModuleLoad`.
    ModuleLoad,
    /// `cuLibraryLoadData`.
    LibraryLoadData,
    /// `cuLibraryLoadFromFile`.
    LibraryLoadFromFile,
    /// `cuLinkAddData_v2`.
    LinkAddData,
    /// `cuLinkAddFile_v2`.
    LinkAddFile,
    /// `cuGetProcAddress_v2`.
    GetProcAddress,
    /// `cuGetProcAddress` (the pre-12 ABI).
    GetProcAddressV1,
    /// `cuCtxGetCurrent` (not hooked: used by the shim).
    CtxGetCurrent,
    /// `cuCtxGetDevice` (not hooked).
    CtxGetDevice,
    /// `cuDeviceGetAttribute` (not hooked).
    DeviceGetAttribute,
    /// `cuMemHostRegister_v2` (not hooked).
    MemHostRegister,
    /// `cuMemHostGetDevicePointer_v2` (not hooked).
    MemHostGetDevicePointer,
    /// `cuThreadExchangeStreamCaptureMode` (not hooked).
    ThreadExchangeStreamCaptureMode,
    /// `nvJitLinkAddData` (found through `dlsym` only).
    NvJitLinkAddData,
    /// `nvJitLinkAddFile` (found through `dlsym` only).
    NvJitLinkAddFile,
    /// `cuCtxDestroy_v2`.
    CtxDestroy,
    /// `cuDevicePrimaryCtxRelease_v2`.
    PrimaryCtxRelease,
    /// `cuDevicePrimaryCtxReset_v2`.
    PrimaryCtxReset,
    /// `cuDevicePrimaryCtxGetState` (not hooked).
    PrimaryCtxGetState,
    /// `cuCtxSetCurrent` (not hooked).
    CtxSetCurrent,
    /// `cuMemAlloc_v2` (not hooked).
    MemAlloc,
    /// `cuMemFree_v2` (not hooked).
    MemFree,
    /// `cuStreamCreate` (not hooked).
    StreamCreate,
    /// `cuStreamSynchronize` (not hooked).
    StreamSynchronize,
    /// `cuMemcpyHtoDAsync_v2` (not hooked).
    MemcpyHtoDAsync,
    /// `cuMemcpyDtoHAsync_v2` (not hooked).
    MemcpyDtoHAsync,
    /// `cuMemsetD8Async` (not hooked).
    MemsetD8Async,
    /// `cuLinkCreate_v2` (not hooked).
    LinkCreate,
    /// `cuLinkComplete` (not hooked).
    LinkComplete,
    /// `cuLinkDestroy` (not hooked).
    LinkDestroy,
    /// `cuGraphAddKernelNode` (launch parameters, [`super::launch`]).
    GraphAddKernelNode,
    /// `cuGraphAddKernelNode_v2` (launch parameters, [`super::launch`]).
    GraphAddKernelNodeV2,
    /// `cuGraphKernelNodeSetParams` (launch parameters, [`super::launch`]).
    GraphKernelNodeSetParams,
    /// `cuGraphKernelNodeSetParams_v2` (launch parameters, [`super::launch`]).
    GraphKernelNodeSetParamsV2,
    /// `cuGraphExecKernelNodeSetParams` (launch parameters, [`super::launch`]).
    GraphExecKernelNodeSetParams,
    /// `cuGraphExecKernelNodeSetParams_v2` (launch parameters, [`super::launch`]).
    GraphExecKernelNodeSetParamsV2,
    /// `cuGraphAddNode` (launch parameters, [`super::launch`]).
    GraphAddNode,
    /// `cuGraphAddNode_v2` (launch parameters, [`super::launch`]).
    GraphAddNodeV2,
    /// `cuGraphNodeSetParams` (launch parameters, [`super::launch`]).
    GraphNodeSetParams,
    /// `cuGraphExecNodeSetParams` (launch parameters, [`super::launch`]).
    GraphExecNodeSetParams,
}

impl Hook {
    /// Every slot, in order.
    pub const ALL: [Hook; 43] = [
        Hook::ModuleLoadData,
        Hook::ModuleLoadDataEx,
        Hook::ModuleLoadFatBinary,
        Hook::ModuleLoad,
        Hook::LibraryLoadData,
        Hook::LibraryLoadFromFile,
        Hook::LinkAddData,
        Hook::LinkAddFile,
        Hook::GetProcAddress,
        Hook::GetProcAddressV1,
        Hook::CtxGetCurrent,
        Hook::CtxGetDevice,
        Hook::DeviceGetAttribute,
        Hook::MemHostRegister,
        Hook::MemHostGetDevicePointer,
        Hook::ThreadExchangeStreamCaptureMode,
        Hook::NvJitLinkAddData,
        Hook::NvJitLinkAddFile,
        Hook::CtxDestroy,
        Hook::PrimaryCtxRelease,
        Hook::PrimaryCtxReset,
        Hook::PrimaryCtxGetState,
        Hook::CtxSetCurrent,
        Hook::MemAlloc,
        Hook::MemFree,
        Hook::StreamCreate,
        Hook::StreamSynchronize,
        Hook::MemcpyHtoDAsync,
        Hook::MemcpyDtoHAsync,
        Hook::MemsetD8Async,
        Hook::LinkCreate,
        Hook::LinkComplete,
        Hook::LinkDestroy,
        Hook::GraphAddKernelNode,
        Hook::GraphAddKernelNodeV2,
        Hook::GraphKernelNodeSetParams,
        Hook::GraphKernelNodeSetParamsV2,
        Hook::GraphExecKernelNodeSetParams,
        Hook::GraphExecKernelNodeSetParamsV2,
        Hook::GraphAddNode,
        Hook::GraphAddNodeV2,
        Hook::GraphNodeSetParams,
        Hook::GraphExecNodeSetParams,
    ];

    /// The name exported by `libcuda.so.1`.
    pub fn symbol(self) -> &'static CStr {
        match self {
            Hook::ModuleLoadData => c"cuModuleLoadData",
            Hook::ModuleLoadDataEx => c"cuModuleLoadDataEx",
            Hook::ModuleLoadFatBinary => c"cuModuleLoadFatBinary",
            Hook::ModuleLoad => c"cuModuleLoad",
            Hook::LibraryLoadData => c"cuLibraryLoadData",
            Hook::LibraryLoadFromFile => c"cuLibraryLoadFromFile",
            Hook::LinkAddData => c"cuLinkAddData_v2",
            Hook::LinkAddFile => c"cuLinkAddFile_v2",
            Hook::GetProcAddress => c"cuGetProcAddress_v2",
            Hook::GetProcAddressV1 => c"cuGetProcAddress",
            Hook::CtxGetCurrent => c"cuCtxGetCurrent",
            Hook::CtxGetDevice => c"cuCtxGetDevice",
            Hook::DeviceGetAttribute => c"cuDeviceGetAttribute",
            Hook::MemHostRegister => c"cuMemHostRegister_v2",
            Hook::MemHostGetDevicePointer => c"cuMemHostGetDevicePointer_v2",
            Hook::ThreadExchangeStreamCaptureMode => c"cuThreadExchangeStreamCaptureMode",
            Hook::NvJitLinkAddData => c"nvJitLinkAddData",
            Hook::NvJitLinkAddFile => c"nvJitLinkAddFile",
            Hook::CtxDestroy => c"cuCtxDestroy_v2",
            Hook::PrimaryCtxRelease => c"cuDevicePrimaryCtxRelease_v2",
            Hook::PrimaryCtxReset => c"cuDevicePrimaryCtxReset_v2",
            Hook::PrimaryCtxGetState => c"cuDevicePrimaryCtxGetState",
            Hook::CtxSetCurrent => c"cuCtxSetCurrent",
            Hook::MemAlloc => c"cuMemAlloc_v2",
            Hook::MemFree => c"cuMemFree_v2",
            Hook::StreamCreate => c"cuStreamCreate",
            Hook::StreamSynchronize => c"cuStreamSynchronize",
            Hook::MemcpyHtoDAsync => c"cuMemcpyHtoDAsync_v2",
            Hook::MemcpyDtoHAsync => c"cuMemcpyDtoHAsync_v2",
            Hook::MemsetD8Async => c"cuMemsetD8Async",
            Hook::LinkCreate => c"cuLinkCreate_v2",
            Hook::LinkComplete => c"cuLinkComplete",
            Hook::LinkDestroy => c"cuLinkDestroy",
            Hook::GraphAddKernelNode => c"cuGraphAddKernelNode",
            Hook::GraphAddKernelNodeV2 => c"cuGraphAddKernelNode_v2",
            Hook::GraphKernelNodeSetParams => c"cuGraphKernelNodeSetParams",
            Hook::GraphKernelNodeSetParamsV2 => c"cuGraphKernelNodeSetParams_v2",
            Hook::GraphExecKernelNodeSetParams => c"cuGraphExecKernelNodeSetParams",
            Hook::GraphExecKernelNodeSetParamsV2 => c"cuGraphExecKernelNodeSetParams_v2",
            Hook::GraphAddNode => c"cuGraphAddNode",
            Hook::GraphAddNodeV2 => c"cuGraphAddNode_v2",
            Hook::GraphNodeSetParams => c"cuGraphNodeSetParams",
            Hook::GraphExecNodeSetParams => c"cuGraphExecNodeSetParams",
        }
    }

    /// The hook for a name given to `dlsym` (exported names, `_v2` included) or to
    /// `cuGetProcAddress` (base names), if the shim wraps it.
    pub fn wrapped(name: &[u8]) -> Option<Hook> {
        Some(match name {
            b"cuModuleLoadData" => Hook::ModuleLoadData,
            b"cuModuleLoadDataEx" => Hook::ModuleLoadDataEx,
            b"cuModuleLoadFatBinary" => Hook::ModuleLoadFatBinary,
            b"cuModuleLoad" => Hook::ModuleLoad,
            b"cuLibraryLoadData" => Hook::LibraryLoadData,
            b"cuLibraryLoadFromFile" => Hook::LibraryLoadFromFile,
            b"cuLinkAddData" | b"cuLinkAddData_v2" => Hook::LinkAddData,
            b"cuLinkAddFile" | b"cuLinkAddFile_v2" => Hook::LinkAddFile,
            b"cuGetProcAddress_v2" => Hook::GetProcAddress,
            b"cuGetProcAddress" => Hook::GetProcAddressV1,
            b"nvJitLinkAddData" => Hook::NvJitLinkAddData,
            b"nvJitLinkAddFile" => Hook::NvJitLinkAddFile,
            b"cuCtxDestroy" | b"cuCtxDestroy_v2" => Hook::CtxDestroy,
            b"cuDevicePrimaryCtxRelease" | b"cuDevicePrimaryCtxRelease_v2" => {
                Hook::PrimaryCtxRelease
            }
            b"cuDevicePrimaryCtxReset" | b"cuDevicePrimaryCtxReset_v2" => Hook::PrimaryCtxReset,
            _ => return None,
        })
    }

    /// The graph hook for a name given to `dlsym` (`version` 0: an exact export) or to
    /// `cuGetProcAddress` at `version`: the kernel-node entries take the v2 parameters
    /// from CUDA 12.0, `cuGraphAddNode` edge data from 12.3.
    pub fn graph(name: &[u8], version: c_int) -> Option<Hook> {
        let v2 = version >= 12000;
        Some(match name {
            b"cuGraphAddKernelNode" if v2 => Hook::GraphAddKernelNodeV2,
            b"cuGraphAddKernelNode" => Hook::GraphAddKernelNode,
            b"cuGraphAddKernelNode_v2" => Hook::GraphAddKernelNodeV2,
            b"cuGraphKernelNodeSetParams" if v2 => Hook::GraphKernelNodeSetParamsV2,
            b"cuGraphKernelNodeSetParams" => Hook::GraphKernelNodeSetParams,
            b"cuGraphKernelNodeSetParams_v2" => Hook::GraphKernelNodeSetParamsV2,
            b"cuGraphExecKernelNodeSetParams" if v2 => Hook::GraphExecKernelNodeSetParamsV2,
            b"cuGraphExecKernelNodeSetParams" => Hook::GraphExecKernelNodeSetParams,
            b"cuGraphExecKernelNodeSetParams_v2" => Hook::GraphExecKernelNodeSetParamsV2,
            b"cuGraphAddNode" if version >= 12030 => Hook::GraphAddNodeV2,
            b"cuGraphAddNode" => Hook::GraphAddNode,
            b"cuGraphAddNode_v2" => Hook::GraphAddNodeV2,
            b"cuGraphNodeSetParams" => Hook::GraphNodeSetParams,
            b"cuGraphExecNodeSetParams" => Hook::GraphExecNodeSetParams,
            _ => return None,
        })
    }
}

static SLOTS: [AtomicUsize; Hook::ALL.len()] = [const { AtomicUsize::new(0) }; Hook::ALL.len()];

/// Records `f` as the real address of `h`.
pub fn set_real(h: Hook, f: *mut c_void) {
    if !f.is_null() {
        SLOTS[h as usize].store(f as usize, Ordering::Release);
    }
}

/// The real address of `h`: its slot, else `libcuda.so.1`'s export; null when there is none.
pub fn real(h: Hook) -> *mut c_void {
    let v = SLOTS[h as usize].load(Ordering::Acquire);
    if v != 0 {
        return v as *mut c_void;
    }
    if matches!(h, Hook::NvJitLinkAddData | Hook::NvJitLinkAddFile) {
        // Not a driver entry: known only once the application resolved it.
        return std::ptr::null_mut();
    }
    let lib = libcuda();
    if lib.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `lib` is a live handle from dlopen; the name is NUL-terminated.
    let f = unsafe { real_dlsym(lib, h.symbol().as_ptr()) };
    set_real(h, f);
    f
}

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
static LIBCUDA: AtomicUsize = AtomicUsize::new(0);

/// The C library's `dlsym`, bypassing any interposed one (ours).
///
/// # Safety
/// As `dlsym(3)`: `handle` is a live handle or a pseudo-handle, `name` NUL-terminated.
pub unsafe fn real_dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let mut f = REAL_DLSYM.load(Ordering::Acquire);
    if f == 0 {
        for ver in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
            // SAFETY: dlvsym with RTLD_NEXT and constant strings; it does not call dlsym.
            let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), ver.as_ptr()) };
            if !p.is_null() {
                f = p as usize;
                break;
            }
        }
        if f == 0 {
            return std::ptr::null_mut();
        }
        REAL_DLSYM.store(f, Ordering::Release);
    }
    // SAFETY: `f` is glibc's dlsym, which has this signature.
    let dlsym: DlsymFn = unsafe { std::mem::transmute::<usize, DlsymFn>(f) };
    // SAFETY: forwarded contract.
    unsafe { dlsym(handle, name) }
}

/// A handle of `libcuda.so.1` (loading it if the application has not yet), or null.
pub fn libcuda() -> *mut c_void {
    let h = LIBCUDA.load(Ordering::Acquire);
    if h != 0 {
        return h as *mut c_void;
    }
    // SAFETY: dlopen with a constant name; RTLD_NOLOAD first so we never load a second copy.
    let mut p = unsafe {
        libc::dlopen(
            c"libcuda.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_GLOBAL | libc::RTLD_NOLOAD,
        )
    };
    if p.is_null() {
        // SAFETY: as above.
        p = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    }
    if !p.is_null() {
        LIBCUDA.store(p as usize, Ordering::Release);
    }
    p
}

/// The address of `libcuda.so.1`'s export `name` (loading the library if the application
/// has not), bypassing any interposed `dlsym`; 0 when there is none.
pub fn export(name: &CStr) -> usize {
    let lib = libcuda();
    if lib.is_null() {
        return 0;
    }
    // SAFETY: a live handle and a NUL-terminated name.
    unsafe { real_dlsym(lib, name.as_ptr()) as usize }
}

/// The driver export `$name` as a function of type `$ty`, looked up once per use site:
/// `None` when this driver lacks it. The caller names the export's C signature as `$ty`.
macro_rules! export_fn {
    ($name:literal, $ty:ty) => {{
        static F: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let f = *F.get_or_init(|| $crate::shim::driver::export($name));
        // SAFETY: the driver's export of that name has the signature `$ty` names.
        (f != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(f) })
    }};
}
pub(crate) use export_fn;

/// Whether `f` is code of the library that holds `ours` (the shim itself).
pub fn same_object(f: *const c_void, ours: *const c_void) -> bool {
    let base = |p: *const c_void| {
        let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
        // SAFETY: dladdr writes `info` and reads nothing through `p`.
        let ok = unsafe { libc::dladdr(p, info.as_mut_ptr()) };
        // SAFETY: zero-initialised, and filled by dladdr when it succeeds.
        (ok != 0).then(|| unsafe { info.assume_init() }.dli_fbase as usize)
    };
    matches!((base(f), base(ours)), (Some(a), Some(b)) if a == b)
}
