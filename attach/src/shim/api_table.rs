// The one list of the driver entry points the API log wraps, read by two macros named
// `api_table`: `attach::shim::api` makes the wrappers from it, `attach/shim` the C exports.
// Each entry: variant = exported symbol, cuGetProcAddress name, per-thread-stream variant,
// event kind, the wrapper's name and C signature, and how the event is filled in.

api_table! {
    /// `cuMemcpyHtoD_v2`.
    MemcpyHtoD = cuMemcpyHtoD_v2, b"cuMemcpyHtoD", false, HtoD,
    fn memcpy_htod(dst: u64, src: *const c_void, n: usize) |e| { copy(&mut e, dst, src as u64, n) }
    /// `cuMemcpyHtoD_v2_ptds`.
    MemcpyHtoDPtds = cuMemcpyHtoD_v2_ptds, b"cuMemcpyHtoD", true, HtoD,
    fn memcpy_htod_ptds(dst: u64, src: *const c_void, n: usize) |e| { copy(&mut e, dst, src as u64, n) }
    /// `cuMemcpyDtoH_v2`.
    MemcpyDtoH = cuMemcpyDtoH_v2, b"cuMemcpyDtoH", false, DtoH,
    fn memcpy_dtoh(dst: *mut c_void, src: u64, n: usize) |e| { copy(&mut e, dst as u64, src, n) }
    /// `cuMemcpyDtoH_v2_ptds`.
    MemcpyDtoHPtds = cuMemcpyDtoH_v2_ptds, b"cuMemcpyDtoH", true, DtoH,
    fn memcpy_dtoh_ptds(dst: *mut c_void, src: u64, n: usize) |e| { copy(&mut e, dst as u64, src, n) }
    /// `cuMemcpyDtoD_v2`.
    MemcpyDtoD = cuMemcpyDtoD_v2, b"cuMemcpyDtoD", false, DtoD,
    fn memcpy_dtod(dst: u64, src: u64, n: usize) |e| { copy(&mut e, dst, src, n) }
    /// `cuMemcpyDtoD_v2_ptds`.
    MemcpyDtoDPtds = cuMemcpyDtoD_v2_ptds, b"cuMemcpyDtoD", true, DtoD,
    fn memcpy_dtod_ptds(dst: u64, src: u64, n: usize) |e| { copy(&mut e, dst, src, n) }
    /// `cuMemcpy` (unified addressing: the direction from the pointers).
    Memcpy = cuMemcpy, b"cuMemcpy", false, HtoH,
    fn memcpy(dst: u64, src: u64, n: usize) |e| { copy(&mut e, dst, src, n); e.kind = classify(dst, src) }
    /// `cuMemcpy_ptds`.
    MemcpyPtds = cuMemcpy_ptds, b"cuMemcpy", true, HtoH,
    fn memcpy_ptds(dst: u64, src: u64, n: usize) |e| { copy(&mut e, dst, src, n); e.kind = classify(dst, src) }
    /// `cuMemcpyHtoDAsync_v2`.
    MemcpyHtoDAsync = cuMemcpyHtoDAsync_v2, b"cuMemcpyHtoDAsync", false, HtoD,
    fn memcpy_htod_async(dst: u64, src: *const c_void, n: usize, s: Handle) |e| { copy_async(&mut e, dst, src as u64, n, s) }
    /// `cuMemcpyHtoDAsync_v2_ptsz`.
    MemcpyHtoDAsyncPtsz = cuMemcpyHtoDAsync_v2_ptsz, b"cuMemcpyHtoDAsync", true, HtoD,
    fn memcpy_htod_async_ptsz(dst: u64, src: *const c_void, n: usize, s: Handle) |e| { copy_async(&mut e, dst, src as u64, n, s) }
    /// `cuMemcpyDtoHAsync_v2`.
    MemcpyDtoHAsync = cuMemcpyDtoHAsync_v2, b"cuMemcpyDtoHAsync", false, DtoH,
    fn memcpy_dtoh_async(dst: *mut c_void, src: u64, n: usize, s: Handle) |e| { copy_async(&mut e, dst as u64, src, n, s) }
    /// `cuMemcpyDtoHAsync_v2_ptsz`.
    MemcpyDtoHAsyncPtsz = cuMemcpyDtoHAsync_v2_ptsz, b"cuMemcpyDtoHAsync", true, DtoH,
    fn memcpy_dtoh_async_ptsz(dst: *mut c_void, src: u64, n: usize, s: Handle) |e| { copy_async(&mut e, dst as u64, src, n, s) }
    /// `cuMemcpyDtoDAsync_v2`.
    MemcpyDtoDAsync = cuMemcpyDtoDAsync_v2, b"cuMemcpyDtoDAsync", false, DtoD,
    fn memcpy_dtod_async(dst: u64, src: u64, n: usize, s: Handle) |e| { copy_async(&mut e, dst, src, n, s) }
    /// `cuMemcpyDtoDAsync_v2_ptsz`.
    MemcpyDtoDAsyncPtsz = cuMemcpyDtoDAsync_v2_ptsz, b"cuMemcpyDtoDAsync", true, DtoD,
    fn memcpy_dtod_async_ptsz(dst: u64, src: u64, n: usize, s: Handle) |e| { copy_async(&mut e, dst, src, n, s) }
    /// `cuMemcpyAsync` (unified addressing).
    MemcpyAsync = cuMemcpyAsync, b"cuMemcpyAsync", false, HtoH,
    fn memcpy_async(dst: u64, src: u64, n: usize, s: Handle) |e| { copy_async(&mut e, dst, src, n, s); e.kind = classify(dst, src) }
    /// `cuMemcpyAsync_ptsz`.
    MemcpyAsyncPtsz = cuMemcpyAsync_ptsz, b"cuMemcpyAsync", true, HtoH,
    fn memcpy_async_ptsz(dst: u64, src: u64, n: usize, s: Handle) |e| { copy_async(&mut e, dst, src, n, s); e.kind = classify(dst, src) }
    /// `cuMemAlloc_v2`.
    MemAlloc = cuMemAlloc_v2, b"cuMemAlloc", false, Alloc,
    fn mem_alloc(d: *mut u64, n: usize) |e| { e.dst = out_u64(e.result, d); e.bytes = n as u64 }
    /// `cuMemAllocManaged`.
    MemAllocManaged = cuMemAllocManaged, b"cuMemAllocManaged", false, Managed,
    fn mem_alloc_managed(d: *mut u64, n: usize, flags: c_uint) |e| { e.dst = out_u64(e.result, d); e.bytes = n as u64; e.aux = flags as u64 }
    /// `cuMemAllocAsync`.
    MemAllocAsync = cuMemAllocAsync, b"cuMemAllocAsync", false, Alloc,
    fn mem_alloc_async(d: *mut u64, n: usize, s: Handle) |e| { e.dst = out_u64(e.result, d); e.bytes = n as u64; e.stream = s as u64; e.flags |= FLAG_ASYNC }
    /// `cuMemAllocAsync_ptsz`.
    MemAllocAsyncPtsz = cuMemAllocAsync_ptsz, b"cuMemAllocAsync", true, Alloc,
    fn mem_alloc_async_ptsz(d: *mut u64, n: usize, s: Handle) |e| { e.dst = out_u64(e.result, d); e.bytes = n as u64; e.stream = s as u64; e.flags |= FLAG_ASYNC }
    /// `cuMemFree_v2`.
    MemFree = cuMemFree_v2, b"cuMemFree", false, Free,
    fn mem_free(d: u64) |e| { e.dst = d }
    /// `cuMemFreeAsync`.
    MemFreeAsync = cuMemFreeAsync, b"cuMemFreeAsync", false, Free,
    fn mem_free_async(d: u64, s: Handle) |e| { e.dst = d; e.stream = s as u64; e.flags |= FLAG_ASYNC }
    /// `cuMemFreeAsync_ptsz`.
    MemFreeAsyncPtsz = cuMemFreeAsync_ptsz, b"cuMemFreeAsync", true, Free,
    fn mem_free_async_ptsz(d: u64, s: Handle) |e| { e.dst = d; e.stream = s as u64; e.flags |= FLAG_ASYNC }
    /// `cuMemHostAlloc`.
    MemHostAlloc = cuMemHostAlloc, b"cuMemHostAlloc", false, HostAlloc,
    fn mem_host_alloc(p: *mut *mut c_void, n: usize, flags: c_uint) |e| { e.src = out_ptr(e.result, p); e.bytes = n as u64; e.aux = flags as u64 }
    /// `cuMemAllocHost_v2`.
    MemAllocHost = cuMemAllocHost_v2, b"cuMemAllocHost", false, HostAlloc,
    fn mem_alloc_host(p: *mut *mut c_void, n: usize) |e| { e.src = out_ptr(e.result, p); e.bytes = n as u64 }
    /// `cuMemFreeHost`.
    MemFreeHost = cuMemFreeHost, b"cuMemFreeHost", false, HostFree,
    fn mem_free_host(p: *mut c_void) |e| { e.src = p as u64 }
    /// `cuMemHostRegister_v2`.
    MemHostRegister = cuMemHostRegister_v2, b"cuMemHostRegister", false, HostRegister,
    fn mem_host_register(p: *mut c_void, n: usize, flags: c_uint) |e| { e.src = p as u64; e.bytes = n as u64; e.aux = flags as u64 }
    /// `cuMemHostUnregister`.
    MemHostUnregister = cuMemHostUnregister, b"cuMemHostUnregister", false, HostUnregister,
    fn mem_host_unregister(p: *mut c_void) |e| { e.src = p as u64 }
    /// `cuMemPrefetchAsync`.
    MemPrefetchAsync = cuMemPrefetchAsync, b"cuMemPrefetchAsync", false, Prefetch,
    fn mem_prefetch_async(d: u64, n: usize, dev: c_int, s: Handle) |e| { e.dst = d; e.bytes = n as u64; e.aux = dev as i64 as u64; e.stream = s as u64; e.flags |= FLAG_ASYNC }
    /// `cuMemPrefetchAsync_ptsz`.
    MemPrefetchAsyncPtsz = cuMemPrefetchAsync_ptsz, b"cuMemPrefetchAsync", true, Prefetch,
    fn mem_prefetch_async_ptsz(d: u64, n: usize, dev: c_int, s: Handle) |e| { e.dst = d; e.bytes = n as u64; e.aux = dev as i64 as u64; e.stream = s as u64; e.flags |= FLAG_ASYNC }
    /// `cuLaunchKernel` (`dst` = the correlation id).
    LaunchKernel = cuLaunchKernel, b"cuLaunchKernel", false, Launch,
    fn launch_kernel(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shm: c_uint, s: Handle, params: *mut *mut c_void, extra: *mut *mut c_void)
    pre |f, params, extra| pre = s;
    |e| { launch(&mut e, f, [gx, gy, gz, bx, by, bz, shm], s); e.dst = pre.corr(); e.flags |= pre.flags(); }
    /// `cuLaunchKernel_ptsz`.
    LaunchKernelPtsz = cuLaunchKernel_ptsz, b"cuLaunchKernel", true, Launch,
    fn launch_kernel_ptsz(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shm: c_uint, s: Handle, params: *mut *mut c_void, extra: *mut *mut c_void)
    pre |f, params, extra| pre = s;
    |e| { launch(&mut e, f, [gx, gy, gz, bx, by, bz, shm], s); e.dst = pre.corr(); e.flags |= pre.flags(); }
    /// `cuLaunchKernelEx`.
    LaunchKernelEx = cuLaunchKernelEx, b"cuLaunchKernelEx", false, Launch,
    fn launch_kernel_ex(config: *const LaunchConfig, f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void)
    pre |f, params, extra| pre = config_stream(config);
    |e| { launch_ex(&mut e, config, f); e.dst = pre.corr(); e.flags |= pre.flags(); }
    /// `cuLaunchKernelEx_ptsz`.
    LaunchKernelExPtsz = cuLaunchKernelEx_ptsz, b"cuLaunchKernelEx", true, Launch,
    fn launch_kernel_ex_ptsz(config: *const LaunchConfig, f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void)
    pre |f, params, extra| pre = config_stream(config);
    |e| { launch_ex(&mut e, config, f); e.dst = pre.corr(); e.flags |= pre.flags(); }
    /// `cuLaunchCooperativeKernel`.
    LaunchCooperativeKernel = cuLaunchCooperativeKernel, b"cuLaunchCooperativeKernel", false, Launch,
    fn launch_cooperative_kernel(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shm: c_uint, s: Handle, params: *mut *mut c_void)
    pre |f, params| pre = s;
    |e| { launch(&mut e, f, [gx, gy, gz, bx, by, bz, shm], s); e.dst = pre.corr(); e.flags |= pre.flags(); }
    /// `cuLaunchCooperativeKernel_ptsz`.
    LaunchCooperativeKernelPtsz = cuLaunchCooperativeKernel_ptsz, b"cuLaunchCooperativeKernel", true, Launch,
    fn launch_cooperative_kernel_ptsz(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shm: c_uint, s: Handle, params: *mut *mut c_void)
    pre |f, params| pre = s;
    |e| { launch(&mut e, f, [gx, gy, gz, bx, by, bz, shm], s); e.dst = pre.corr(); e.flags |= pre.flags(); }
    /// `cuStreamSynchronize`.
    StreamSynchronize = cuStreamSynchronize, b"cuStreamSynchronize", false, Sync,
    fn stream_synchronize(s: Handle) |e| { e.stream = s as u64 }
    /// `cuStreamSynchronize_ptsz`.
    StreamSynchronizePtsz = cuStreamSynchronize_ptsz, b"cuStreamSynchronize", true, Sync,
    fn stream_synchronize_ptsz(s: Handle) |e| { e.stream = s as u64 }
    /// `cuCtxSynchronize`.
    CtxSynchronize = cuCtxSynchronize, b"cuCtxSynchronize", false, Sync,
    fn ctx_synchronize() |e| {}
    /// `cuEventSynchronize` (`aux` = the event).
    EventSynchronize = cuEventSynchronize, b"cuEventSynchronize", false, Sync,
    fn event_synchronize(ev: Handle) |e| { e.aux = ev as u64 }
}
