//! The one module that calls the CUDA driver API (through cudarc's dynamically loaded
//! bindings). Each function checks for `libcuda` first.

use super::DeviceError;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::OnceLock;

/// Whether `libcuda` can be loaded here.
pub fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: `is_culib_present` only tries to dlopen the library.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

fn check(call: &'static str, r: sys::CUresult) -> Result<(), DeviceError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(DeviceError::Call {
            call,
            code: format!("{r:?}"),
            log: String::new(),
        })
    }
}

/// Initializes the driver and makes device `ordinal`'s primary context current.
fn context(ordinal: i32) -> Result<sys::CUdevice, DeviceError> {
    if !driver_present() {
        return Err(DeviceError::NoDriver);
    }
    let mut dev: sys::CUdevice = 0;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: the library is present (checked); the out-pointers are valid locals.
    unsafe {
        check("cuInit", sys::cuInit(0))?;
        check("cuDeviceGet", sys::cuDeviceGet(&mut dev, ordinal))?;
        // Keep local memory at its high-water mark (CU_CTX_LMEM_RESIZE_TO_MAX): every
        // generation's kernel needs the same large stack, so a launch never waits for
        // local memory to be reallocated. Fails harmlessly once the context is active.
        let _ = sys::cuDevicePrimaryCtxSetFlags_v2(dev, 0x10);
        check(
            "cuDevicePrimaryCtxRetain",
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
        )?;
        check("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx))?;
    }
    Ok(dev)
}

/// The compute capability of device `ordinal` as an `sm_XX` number (90 for an H100).
pub fn device_sm(ordinal: i32) -> Result<u32, DeviceError> {
    let dev = context(ordinal)?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: a context is current; the out-pointers are valid locals.
    unsafe {
        check(
            "cuDeviceGetAttribute",
            sys::cuDeviceGetAttribute(
                &mut major,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                dev,
            ),
        )?;
        check(
            "cuDeviceGetAttribute",
            sys::cuDeviceGetAttribute(
                &mut minor,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                dev,
            ),
        )?;
    }
    Ok(major as u32 * 10 + minor as u32)
}

/// Compiles PTX to a cubin for the current device with the driver's JIT linker.
pub fn ptx_to_cubin(ptx: &str, ordinal: i32) -> Result<Vec<u8>, DeviceError> {
    context(ordinal)?;
    link_ptx(&[("bpftime.ptx", ptx)], None)
}

/// Device memory, host memory mapping and execution control for the persistent runtime.
///
/// Every method is a thin checked wrapper of one driver call; the context of the owning
/// [`Gpu`] is made current on the calling thread first (`cuCtxSetCurrent` is cheap).
pub struct Gpu {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    ordinal: i32,
}

// SAFETY: a CUcontext may be used from any thread once made current there; every method
// makes it current first.
unsafe impl Send for Gpu {}
// SAFETY: as above; the driver API is thread safe.
unsafe impl Sync for Gpu {}

/// A non-blocking stream.
#[derive(Clone, Copy, Debug)]
pub struct Stream(pub(crate) sys::CUstream);
// SAFETY: streams are plain driver handles, usable from any thread with the context current.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

/// A loaded library (one generation's cubin) and the function of its persistent kernel.
pub struct Library {
    lib: sys::CUlibrary,
    kernel: sys::CUkernel,
    empty: sys::CUkernel,
    clock: Option<sys::CUkernel>,
    func: Option<sys::CUfunction>,
}
// SAFETY: driver handles, used with the owning context current.
unsafe impl Send for Library {}
// SAFETY: as above.
unsafe impl Sync for Library {}

/// State of a stream, from `cuStreamQuery`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamState {
    /// All work finished.
    Idle,
    /// Work still running.
    Busy,
    /// The context failed (a fault in a kernel, a lost device): sticky until reset.
    Failed(String),
}

impl Gpu {
    /// Opens device `ordinal` (its primary context).
    pub fn open(ordinal: i32) -> Result<Gpu, DeviceError> {
        let dev = context(ordinal)?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `context` initialised the driver and made the primary context current.
        unsafe { check("cuCtxGetCurrent", sys::cuCtxGetCurrent(&mut ctx))? };
        Ok(Gpu { dev, ctx, ordinal })
    }

    /// Number of CUDA devices (0 without a driver).
    pub fn count() -> i32 {
        if !driver_present() {
            return 0;
        }
        let mut n = 0;
        // SAFETY: the library is present; out-pointer is a valid local.
        unsafe {
            if sys::cuInit(0) != sys::CUresult::CUDA_SUCCESS
                || sys::cuDeviceGetCount(&mut n) != sys::CUresult::CUDA_SUCCESS
            {
                return 0;
            }
        }
        n
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    fn cur(&self) -> Result<(), DeviceError> {
        // SAFETY: `ctx` is this device's retained primary context.
        unsafe { check("cuCtxSetCurrent", sys::cuCtxSetCurrent(self.ctx)) }
    }

    /// An integer device attribute.
    pub fn attribute(&self, a: sys::CUdevice_attribute) -> Result<i32, DeviceError> {
        self.cur()?;
        let mut v = 0;
        // SAFETY: context current, valid out-pointer.
        unsafe {
            check(
                "cuDeviceGetAttribute",
                sys::cuDeviceGetAttribute(&mut v, a, self.dev),
            )?
        };
        Ok(v)
    }

    /// Whether the current context keeps local memory at its high-water mark
    /// (`CU_CTX_LMEM_RESIZE_TO_MAX` in `cuCtxGetFlags`).
    pub fn lmem_resize_to_max(&self) -> bool {
        let mut f: std::ffi::c_uint = 0;
        // SAFETY: a context is current (`open`); a local out-pointer.
        let r = unsafe { sys::cuCtxGetFlags(&mut f) };
        r == sys::CUresult::CUDA_SUCCESS && f & 0x10 != 0
    }

    /// Sets the stack of every thread to `bytes` (`CU_LIMIT_STACK_SIZE`), which sizes the
    /// context's local memory before a kernel asks for it. Returns the limit now in force.
    pub fn set_stack_limit(&self, bytes: usize) -> Result<usize, DeviceError> {
        let mut v = 0usize;
        // SAFETY: a context is current (`open`); a local out-pointer.
        unsafe {
            check(
                "cuCtxSetLimit",
                sys::cuCtxSetLimit(sys::CUlimit::CU_LIMIT_STACK_SIZE, bytes),
            )?;
            check(
                "cuCtxGetLimit",
                sys::cuCtxGetLimit(&mut v, sys::CUlimit::CU_LIMIT_STACK_SIZE),
            )?;
        }
        Ok(v)
    }

    /// Streaming multiprocessors.
    pub fn sm_count(&self) -> Result<u32, DeviceError> {
        Ok(
            self.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
                as u32,
        )
    }

    /// Whether the GPU's atomics on host memory are atomic with the host's and other
    /// devices' (`CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED`). Without it, two GPUs
    /// adding to one word of host memory lose updates (measured: `bench/results/gpu_multi.md`).
    pub fn host_native_atomics(&self) -> bool {
        let mut v = 0;
        // SAFETY: a valid device handle and a local out-pointer.
        let r = unsafe {
            sys::cuDeviceGetAttribute(
                &mut v,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED,
                self.dev,
            )
        };
        r == sys::CUresult::CUDA_SUCCESS && v != 0
    }

    /// The device name.
    pub fn name(&self) -> String {
        let mut buf = [0 as std::ffi::c_char; 128];
        // SAFETY: buffer length passed; NUL-terminated by the driver.
        unsafe {
            if sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, self.dev)
                != sys::CUresult::CUDA_SUCCESS
            {
                return "unknown".into();
            }
            std::ffi::CStr::from_ptr(buf.as_ptr())
                .to_string_lossy()
                .into_owned()
        }
    }

    /// The driver version as `major.minor` (e.g. 13.0).
    pub fn driver_version() -> String {
        let mut v = 0;
        if !driver_present()
            // SAFETY: out-pointer is a valid local; the driver is present (checked first).
            || unsafe { sys::cuDriverGetVersion(&mut v) } != sys::CUresult::CUDA_SUCCESS
        {
            return "none".into();
        }
        format!("{}.{}", v / 1000, (v % 1000) / 10)
    }

    /// `cuMemAlloc`: device memory (does not block a running kernel).
    pub fn alloc(&self, bytes: usize) -> Result<u64, DeviceError> {
        self.cur()?;
        let mut p: sys::CUdeviceptr = 0;
        // SAFETY: context current, valid out-pointer.
        unsafe { check("cuMemAlloc", sys::cuMemAlloc_v2(&mut p, bytes.max(1)))? };
        Ok(p)
    }

    /// `cuMemFree` (blocks while a kernel runs: call only between generations).
    pub fn free(&self, p: u64) -> Result<(), DeviceError> {
        self.cur()?;
        // SAFETY: `p` came from `alloc` of this context.
        unsafe { check("cuMemFree", sys::cuMemFree_v2(p)) }
    }

    /// Pinned, device-mapped host memory, zeroed; returns (host pointer, device address).
    pub fn host_alloc(&self, bytes: usize) -> Result<(*mut u8, u64), DeviceError> {
        self.cur()?;
        let mut h: *mut c_void = std::ptr::null_mut();
        let mut d: sys::CUdeviceptr = 0;
        // SAFETY: context current; DEVICEMAP (2) | PORTABLE (1); the allocation is zeroed
        // before anyone reads it.
        unsafe {
            check("cuMemHostAlloc", sys::cuMemHostAlloc(&mut h, bytes, 0x3))?;
            std::ptr::write_bytes(h as *mut u8, 0, bytes);
            check(
                "cuMemHostGetDevicePointer",
                sys::cuMemHostGetDevicePointer_v2(&mut d, h, 0),
            )?;
        }
        Ok((h as *mut u8, d))
    }

    /// Frees [`Gpu::host_alloc`] memory.
    pub fn host_free(&self, h: *mut u8) {
        let _ = self.cur();
        // SAFETY: `h` came from `host_alloc`.
        unsafe {
            sys::cuMemFreeHost(h as *mut c_void);
        }
    }

    /// Registers an existing mapping (the shared-memory region) with the device and returns
    /// its device address.
    pub fn register(&self, host: *mut u8, bytes: usize) -> Result<u64, DeviceError> {
        self.cur()?;
        let mut d: sys::CUdeviceptr = 0;
        // SAFETY: the caller passes a live mapping of `bytes` bytes that outlives the
        // registration (unregistered in `unregister` before unmapping).
        unsafe {
            check(
                "cuMemHostRegister",
                sys::cuMemHostRegister_v2(host as *mut c_void, bytes, 0x3),
            )?;
            check(
                "cuMemHostGetDevicePointer",
                sys::cuMemHostGetDevicePointer_v2(&mut d, host as *mut c_void, 0),
            )?;
        }
        Ok(d)
    }

    /// Undoes [`Gpu::register`].
    pub fn unregister(&self, host: *mut u8) {
        let _ = self.cur();
        // SAFETY: `host` was registered by `register`.
        unsafe {
            sys::cuMemHostUnregister(host as *mut c_void);
        }
    }

    /// A non-blocking stream.
    pub fn stream(&self) -> Result<Stream, DeviceError> {
        self.cur()?;
        let mut s: sys::CUstream = std::ptr::null_mut();
        // SAFETY: context current; CU_STREAM_NON_BLOCKING = 1.
        unsafe { check("cuStreamCreate", sys::cuStreamCreate(&mut s, 1))? };
        Ok(Stream(s))
    }

    /// Copies host bytes to device memory on `s` and waits for that copy only.
    pub fn upload(&self, s: Stream, dst: u64, src: &[u8]) -> Result<(), DeviceError> {
        if src.is_empty() {
            return Ok(());
        }
        self.cur()?;
        // SAFETY: `dst..dst+len` is device memory of this context (the caller's allocation);
        // `src` outlives the copy because the stream is synchronised before returning.
        unsafe {
            check(
                "cuMemcpyHtoDAsync",
                sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr() as *const c_void, src.len(), s.0),
            )?;
            check("cuStreamSynchronize", sys::cuStreamSynchronize(s.0))
        }
    }

    /// Queues a copy of host bytes to device memory on `s` without waiting for it. The
    /// source is pageable memory, which the driver stages before returning, so `src` may
    /// be reused at once; call [`Gpu::sync`] before relying on the device contents.
    pub fn upload_async(&self, s: Stream, dst: u64, src: &[u8]) -> Result<(), DeviceError> {
        if src.is_empty() {
            return Ok(());
        }
        self.cur()?;
        // SAFETY: `dst..dst+len` is device memory of this context; pageable `src` is copied
        // to a staging buffer before the call returns (CUDA's documented behaviour).
        unsafe {
            check(
                "cuMemcpyHtoDAsync",
                sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr() as *const c_void, src.len(), s.0),
            )
        }
    }

    /// Copies device memory to the host on `s` and waits.
    pub fn download(&self, s: Stream, dst: &mut [u8], src: u64) -> Result<(), DeviceError> {
        if dst.is_empty() {
            return Ok(());
        }
        self.cur()?;
        // SAFETY: as in `upload`, the other way round.
        unsafe {
            check(
                "cuMemcpyDtoHAsync",
                sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr() as *mut c_void, src, dst.len(), s.0),
            )?;
            check("cuStreamSynchronize", sys::cuStreamSynchronize(s.0))
        }
    }

    /// Device-to-device copy on `s`, waited for.
    pub fn copy(&self, s: Stream, dst: u64, src: u64, len: usize) -> Result<(), DeviceError> {
        self.cur()?;
        // SAFETY: both ranges are device memory of this context (checked by the caller).
        unsafe {
            check(
                "cuMemcpyDtoDAsync",
                sys::cuMemcpyDtoDAsync_v2(dst, src, len, s.0),
            )?;
            check("cuStreamSynchronize", sys::cuStreamSynchronize(s.0))
        }
    }

    /// Fills `words` u32 words at `dst` with `v` on `s`, waited for.
    pub fn memset32(&self, s: Stream, dst: u64, v: u32, words: usize) -> Result<(), DeviceError> {
        self.cur()?;
        // SAFETY: device memory of this context (the caller's allocation).
        unsafe {
            check(
                "cuMemsetD32Async",
                sys::cuMemsetD32Async(dst, v, words, s.0),
            )?;
            check("cuStreamSynchronize", sys::cuStreamSynchronize(s.0))
        }
    }

    /// Links PTX inputs into one cubin (the driver's JIT linker; never blocks a kernel).
    pub fn link(&self, inputs: &[(&str, &str)]) -> Result<Vec<u8>, DeviceError> {
        self.cur()?;
        link_ptx(inputs, None)
    }

    /// As [`Gpu::link`], compiling every input with at most `max_regs` registers a thread
    /// (a kernel's `__launch_bounds__` bind the functions it calls).
    pub fn link_max_regs(
        &self,
        inputs: &[(&str, &str)],
        max_regs: u32,
    ) -> Result<Vec<u8>, DeviceError> {
        self.cur()?;
        link_ptx(inputs, Some(max_regs))
    }

    /// Loads a generation's cubin as a library (lazy loading: does not block a running
    /// kernel) and finds its kernels.
    pub fn load_library(&self, cubin: &[u8]) -> Result<Library, DeviceError> {
        self.cur()?;
        let mut lib: sys::CUlibrary = std::ptr::null_mut();
        let mut kernel: sys::CUkernel = std::ptr::null_mut();
        let mut empty: sys::CUkernel = std::ptr::null_mut();
        // SAFETY: context current; `cubin` is a complete image (the driver copies it).
        unsafe {
            check(
                "cuLibraryLoadData",
                sys::cuLibraryLoadData(
                    &mut lib,
                    cubin.as_ptr() as *const c_void,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                ),
            )?;
            check(
                "cuLibraryGetKernel",
                sys::cuLibraryGetKernel(&mut kernel, lib, c"bpft_persistent".as_ptr()),
            )?;
            check(
                "cuLibraryGetKernel",
                sys::cuLibraryGetKernel(&mut empty, lib, c"bpft_empty".as_ptr()),
            )?;
        }
        let mut ck: sys::CUkernel = std::ptr::null_mut();
        // SAFETY: as above; the runtime's libraries have `bpft_clock`, baselines do not.
        let has_clock = unsafe { sys::cuLibraryGetKernel(&mut ck, lib, c"bpft_clock".as_ptr()) }
            == sys::CUresult::CUDA_SUCCESS;
        Ok(Library {
            lib,
            kernel,
            empty,
            clock: has_clock.then_some(ck),
            func: None,
        })
    }

    /// `cuLibraryUnload` (blocks while a kernel runs: call only between generations).
    pub fn unload(&self, l: Library) {
        let _ = self.cur();
        // SAFETY: the library is no longer used by any running kernel (caller's contract).
        unsafe {
            sys::cuLibraryUnload(l.lib);
        }
    }

    fn function(&self, k: sys::CUkernel) -> Result<sys::CUfunction, DeviceError> {
        self.cur()?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: `k` belongs to a loaded library of this context. This uploads the code
        // and blocks while any kernel runs (GPU-FACTS §2): call it between generations.
        unsafe { check("cuKernelGetFunction", sys::cuKernelGetFunction(&mut f, k))? };
        Ok(f)
    }

    /// Blocks of `threads` threads of the persistent kernel that fit on one SM.
    pub fn occupancy(&self, l: &Library, threads: u32) -> Result<u32, DeviceError> {
        let f = self.function(l.kernel)?;
        let mut n = 0;
        // SAFETY: valid function handle and out-pointer.
        unsafe {
            check(
                "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut n, f, threads as i32, 0),
            )?
        };
        Ok(n.max(0) as u32)
    }

    /// Fetches the persistent kernel's function: uploads the library's code, which blocks
    /// while any kernel runs (GPU-FACTS §2). [`Gpu::launch_persistent`] does it if needed.
    pub fn prepare(&self, l: &mut Library) -> Result<(), DeviceError> {
        if l.func.is_none() {
            l.func = Some(self.function(l.kernel)?);
        }
        Ok(())
    }

    /// Launches the persistent kernel of `l` with `params` (passed by value).
    pub fn launch_persistent<P>(
        &self,
        l: &mut Library,
        s: Stream,
        grid: u32,
        threads: u32,
        params: &P,
    ) -> Result<(), DeviceError> {
        self.prepare(l)?;
        let f = l.func.expect("prepared");
        let mut args = [params as *const P as *mut c_void];
        // SAFETY: the kernel takes one by-value struct whose layout `P` mirrors
        // (`#[repr(C)]`, size-asserted); the driver copies the argument at launch.
        unsafe {
            check(
                "cuLaunchKernel",
                sys::cuLaunchKernel(
                    f,
                    grid,
                    1,
                    1,
                    threads,
                    1,
                    1,
                    0,
                    s.0,
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                ),
            )
        }
    }

    /// Launches the empty kernel `<<<1, 1>>>` writing `v` to `out` (benchmark baseline).
    pub fn launch_empty(
        &self,
        l: &Library,
        s: Stream,
        out: u64,
        v: u64,
    ) -> Result<(), DeviceError> {
        let f = self.function(l.empty)?;
        let (mut a, mut b) = (out, v);
        let mut args = [
            &mut a as *mut u64 as *mut c_void,
            &mut b as *mut u64 as *mut c_void,
        ];
        // SAFETY: `bpft_empty(u64*, u64)`; arguments are copied at launch.
        unsafe {
            check(
                "cuLaunchKernel",
                sys::cuLaunchKernel(
                    f,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    s.0,
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                ),
            )
        }
    }

    /// Launches `bpft_clock(out)` (writes `%globaltimer` to `out`) on `s`. Fetches the
    /// function, so call it only while no kernel runs.
    pub fn launch_clock(&self, l: &Library, s: Stream, out: u64) -> Result<(), DeviceError> {
        let k = l.clock.ok_or_else(|| DeviceError::Call {
            call: "cuLibraryGetKernel",
            code: "this library has no bpft_clock".into(),
            log: String::new(),
        })?;
        let f = self.function(k)?;
        let mut a = out;
        let mut args = [&mut a as *mut u64 as *mut c_void];
        // SAFETY: `bpft_clock(u64 *)`; the argument is copied at launch.
        unsafe {
            check(
                "cuLaunchKernel",
                sys::cuLaunchKernel(
                    f,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    s.0,
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                ),
            )
        }
    }

    /// Captures one empty-kernel launch into a graph and returns a closure-free handle
    /// for [`Gpu::graph_launch`].
    pub fn empty_graph(
        &self,
        l: &Library,
        s: Stream,
        out: u64,
        v: u64,
    ) -> Result<GraphExec, DeviceError> {
        self.cur()?;
        let mut g: sys::CUgraph = std::ptr::null_mut();
        let mut e: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: standard capture sequence on a stream of this context.
        unsafe {
            check(
                "cuStreamBeginCapture",
                sys::cuStreamBeginCapture_v2(
                    s.0,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                ),
            )?;
            let r = self.launch_empty(l, s, out, v);
            check("cuStreamEndCapture", sys::cuStreamEndCapture(s.0, &mut g))?;
            r?;
            check(
                "cuGraphInstantiate",
                sys::cuGraphInstantiateWithFlags(&mut e, g, 0),
            )?;
        }
        Ok(GraphExec(e))
    }

    /// Launches an instantiated graph on `s`.
    pub fn graph_launch(&self, g: &GraphExec, s: Stream) -> Result<(), DeviceError> {
        self.cur()?;
        // SAFETY: a graph instantiated in this context.
        unsafe { check("cuGraphLaunch", sys::cuGraphLaunch(g.0, s.0)) }
    }

    /// Waits for all work on `s`.
    pub fn sync(&self, s: Stream) -> Result<(), DeviceError> {
        self.cur()?;
        // SAFETY: a stream of this context.
        unsafe { check("cuStreamSynchronize", sys::cuStreamSynchronize(s.0)) }
    }

    /// Polls `s` without blocking.
    pub fn query(&self, s: Stream) -> StreamState {
        if self.cur().is_err() {
            return StreamState::Failed("cuCtxSetCurrent failed".into());
        }
        // SAFETY: a stream of this context.
        let r = unsafe { sys::cuStreamQuery(s.0) };
        match r {
            sys::CUresult::CUDA_SUCCESS => StreamState::Idle,
            sys::CUresult::CUDA_ERROR_NOT_READY => StreamState::Busy,
            e => StreamState::Failed(format!("{e:?}")),
        }
    }

    /// Resets the device's primary context after a sticky error. Every allocation,
    /// registration, stream and library of this `Gpu` is gone afterwards; open again.
    pub fn reset(self) -> Result<(), DeviceError> {
        // SAFETY: releases this handle's reference and resets the primary context; no
        // handle of the old context is used afterwards (self is consumed).
        unsafe {
            let _ = sys::cuDevicePrimaryCtxRelease_v2(self.dev);
            check(
                "cuDevicePrimaryCtxReset",
                sys::cuDevicePrimaryCtxReset_v2(self.dev),
            )
        }
    }
}

/// An instantiated CUDA graph.
pub struct GraphExec(sys::CUgraphExec);
// SAFETY: a driver handle, used with its context current.
unsafe impl Send for GraphExec {}

/// Links several PTX inputs with the driver's linker (a context must be current).
fn link_ptx(inputs: &[(&str, &str)], max_regs: Option<u32>) -> Result<Vec<u8>, DeviceError> {
    let mut log = vec![0u8; 64 << 10];
    let mut opts = vec![
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut vals = vec![log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
    if let Some(r) = max_regs {
        opts.push(sys::CUjit_option::CU_JIT_MAX_REGISTERS);
        vals.push(r as usize as *mut c_void);
    }
    let mut state: sys::CUlinkState = std::ptr::null_mut();
    let logged = |call: &'static str, r: sys::CUresult, log: &[u8]| {
        check(call, r).map_err(|e| match e {
            DeviceError::Call { call, code, .. } => DeviceError::Call {
                call,
                code,
                log: String::from_utf8_lossy(log.split(|b| *b == 0).next().unwrap_or(&[]))
                    .into_owned(),
            },
            other => other,
        })
    };
    // SAFETY: a context is current (callers); option arrays, sources and the log buffer
    // outlive the link state, destroyed before returning; the cubin is copied out first.
    unsafe {
        check(
            "cuLinkCreate",
            sys::cuLinkCreate_v2(
                opts.len() as u32,
                opts.as_mut_ptr(),
                vals.as_mut_ptr(),
                &mut state,
            ),
        )?;
        // Sources and names stay alive until the link state is destroyed.
        let mut srcs: Vec<Vec<u8>> = Vec::with_capacity(inputs.len());
        let mut names: Vec<std::ffi::CString> = Vec::with_capacity(inputs.len());
        for (name, ptx) in inputs {
            let mut src = ptx.as_bytes().to_vec();
            src.push(0);
            srcs.push(src);
            names.push(std::ffi::CString::new(*name).unwrap_or_default());
            let (src, cname) = (
                srcs.last_mut().expect("pushed"),
                names.last().expect("pushed"),
            );
            let r = sys::cuLinkAddData_v2(
                state,
                sys::CUjitInputType::CU_JIT_INPUT_PTX,
                src.as_mut_ptr() as *mut c_void,
                src.len(),
                cname.as_ptr(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
            if let Err(e) = logged("cuLinkAddData", r, &log) {
                sys::cuLinkDestroy(state);
                return Err(e);
            }
        }
        let mut cubin: *mut c_void = std::ptr::null_mut();
        let mut size = 0usize;
        let r = sys::cuLinkComplete(state, &mut cubin, &mut size);
        if let Err(e) = logged("cuLinkComplete", r, &log) {
            sys::cuLinkDestroy(state);
            return Err(e);
        }
        let out = std::slice::from_raw_parts(cubin as *const u8, size).to_vec();
        sys::cuLinkDestroy(state);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_is_an_error_not_a_panic() {
        if driver_present() {
            return; // a GPU machine: covered by the GPU runs
        }
        assert_eq!(device_sm(0), Err(DeviceError::NoDriver));
        assert_eq!(ptx_to_cubin(".version 8.0", 0), Err(DeviceError::NoDriver));
    }
}
