//! `libbpftime_attach.so`: the `LD_PRELOAD` shim of `bpftime-super trace`.
//!
//! Only the C symbols live here; each forwards to `attach::shim::hooks`. Keeping them out
//! of the `attach` rlib matters: a Rust binary linking that rlib (the CLI) must not
//! interpose its own `dlsym` or driver calls.

use attach::shim::{driver::CuResult, driver::Handle, hooks};
use std::ffi::{c_char, c_int, c_uint, c_void};

/// Runs when the shim is loaded, before the application's `main`: host probes on library
/// functions patch the calls to them now (`attach::shim::symprobes`).
extern "C" fn bpftime_shim_init() {
    attach::shim::symprobes::install();
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = bpftime_shim_init;

/// Pauses (`paused` non-zero) or resumes the session's host probes and API log records;
/// returns 1 if they were paused, else 0. For the application itself, through `dlsym(RTLD_DEFAULT,
/// "bpftime_host_probes_pause")`, which finds nothing without the shim: a benchmark can
/// alternate blocks of work with and without probes in one process
/// (`bench/gpu/train_step.py`).
#[unsafe(no_mangle)]
pub extern "C" fn bpftime_host_probes_pause(paused: c_int) -> c_int {
    attach::shim::uprobes::set_paused(paused != 0) as c_int
}

/// Interposed `dlsym`: the real lookup, with wrapped driver entries swapped in.
///
/// # Safety
/// As `dlsym(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { hooks::dlsym(handle, symbol) }
}

/// Interposed `cuGetProcAddress_v2`.
///
/// # Safety
/// The driver's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    // SAFETY: forwarded contract.
    unsafe { hooks::get_proc_address_v2(symbol, pfn, version, flags, status) }
}

/// Interposed `cuGetProcAddress` (the pre-12 ABI).
///
/// # Safety
/// The driver's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CuResult {
    // SAFETY: forwarded contract.
    unsafe { hooks::get_proc_address_v1(symbol, pfn, version, flags) }
}

/// Interposed `cuModuleLoadData`.
///
/// # Safety
/// The driver's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut Handle, image: *const c_void) -> CuResult {
    // SAFETY: forwarded contract.
    unsafe { hooks::module_load_data(module, image) }
}

/// Interposed `cuModuleLoadDataEx`.
///
/// # Safety
/// The driver's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut Handle,
    image: *const c_void,
    n: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> CuResult {
    // SAFETY: forwarded contract.
    unsafe { hooks::module_load_data_ex(module, image, n, options, values) }
}

/// Interposed `cuModuleLoadFatBinary`.
///
/// # Safety
/// The driver's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadFatBinary(
    module: *mut Handle,
    image: *const c_void,
) -> CuResult {
    // SAFETY: forwarded contract.
    unsafe { hooks::module_load_fat_binary(module, image) }
}

/// Interposed `cuModuleLoad`.
///
/// # Safety
/// The driver's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoad(module: *mut Handle, path: *const c_char) -> CuResult {
    // SAFETY: forwarded contract.
    unsafe { hooks::module_load(module, path) }
}

/// Interposed `cuLibraryLoadData`.
///
/// # Safety
/// The driver's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLibraryLoadData(
    library: *mut Handle,
    code: *const c_void,
    jit_options: *mut c_int,
    jit_values: *mut *mut c_void,
    n_jit: c_uint,
    lib_options: *mut c_int,
    lib_values: *mut *mut c_void,
    n_lib: c_uint,
) -> CuResult {
    // SAFETY: forwarded contract.
    unsafe {
        hooks::library_load_data(
            library,
            code,
            jit_options,
            jit_values,
            n_jit,
            lib_options,
            lib_values,
            n_lib,
        )
    }
}

/// Interposed `cuLibraryLoadFromFile`.
///
/// # Safety
/// The driver's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLibraryLoadFromFile(
    library: *mut Handle,
    path: *const c_char,
    jit_options: *mut c_int,
    jit_values: *mut *mut c_void,
    n_jit: c_uint,
    lib_options: *mut c_int,
    lib_values: *mut *mut c_void,
    n_lib: c_uint,
) -> CuResult {
    // SAFETY: forwarded contract.
    unsafe {
        hooks::library_load_from_file(
            library,
            path,
            jit_options,
            jit_values,
            n_jit,
            lib_options,
            lib_values,
            n_lib,
        )
    }
}

/// Interposed `cuLinkAddData_v2` (what `cuLinkAddData` means in `cuda.h`).
///
/// # Safety
/// The driver's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkAddData_v2(
    state: Handle,
    kind: c_uint,
    data: *mut c_void,
    size: usize,
    name: *const c_char,
    n: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> CuResult {
    // SAFETY: forwarded contract.
    unsafe { hooks::link_add_data(state, kind, data, size, name, n, options, values) }
}

/// Interposed `cuLinkAddFile_v2` (what `cuLinkAddFile` means in `cuda.h`).
///
/// # Safety
/// The driver's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkAddFile_v2(
    state: Handle,
    kind: c_uint,
    path: *const c_char,
    n: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> CuResult {
    // SAFETY: forwarded contract.
    unsafe { hooks::link_add_file(state, kind, path, n, options, values) }
}

/// Interposed `cuCtxDestroy_v2` (device-resident maps are copied out first).
///
/// # Safety
/// The driver's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: Handle) -> CuResult {
    // SAFETY: forwarded contract.
    unsafe { hooks::ctx_destroy(ctx) }
}

/// Interposed `cuDevicePrimaryCtxRelease_v2`.
///
/// # Safety
/// The driver's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: c_int) -> CuResult {
    // SAFETY: forwarded contract.
    unsafe { hooks::primary_ctx_release(dev) }
}

/// Interposed `cuDevicePrimaryCtxReset_v2`.
///
/// # Safety
/// The driver's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset_v2(dev: c_int) -> CuResult {
    // SAFETY: forwarded contract.
    unsafe { hooks::primary_ctx_reset(dev) }
}

/// The C exports of the API log's entry points ([`attach::shim::api`]), made from the same
/// table as the wrappers they forward to.
mod api_exports {
    use attach::shim::api::LaunchConfig;
    use attach::shim::driver::Handle;
    use std::ffi::{c_int, c_uint, c_void};

    macro_rules! api_table {
        ($(
            $(#[$doc:meta])*
            $variant:ident = $sym:ident, $base:literal, $ptds:literal, $kind:ident,
            fn $wrapper:ident($($a:ident: $t:ty),*)
            $(pre |$pf:ident, $pp:ident $(, $pe:ident)?| $pv:ident = $ps:expr;)?
            |$ev:ident| $fill:block
        )*) => {$(
            $(#[$doc])*
            ///
            /// # Safety
            /// The driver's contract.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $sym($($a: $t),*) -> attach::shim::driver::CuResult {
                // SAFETY: forwarded contract.
                unsafe { attach::shim::api::$wrapper($($a),*) }
            }
        )*};
    }

    include!("../../src/shim/api_table.rs");
}

/// The C exports of the graph kernel-node entries, which pass the hidden launch
/// parameters ([`attach::shim::launch`]).
mod graph_exports {
    use attach::shim::driver::{CuResult, Handle};
    use attach::shim::launch;
    use std::ffi::c_void;

    /// Interposed `cuGraphAddKernelNode`.
    ///
    /// # Safety
    /// The driver's contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn cuGraphAddKernelNode(
        node: *mut Handle,
        graph: Handle,
        deps: *const Handle,
        n: usize,
        params: *const u8,
    ) -> CuResult {
        // SAFETY: forwarded contract.
        unsafe { launch::graph_add_kernel_node(node, graph, deps, n, params) }
    }

    /// Interposed `cuGraphAddKernelNode_v2`.
    ///
    /// # Safety
    /// The driver's contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn cuGraphAddKernelNode_v2(
        node: *mut Handle,
        graph: Handle,
        deps: *const Handle,
        n: usize,
        params: *const u8,
    ) -> CuResult {
        // SAFETY: forwarded contract.
        unsafe { launch::graph_add_kernel_node_v2(node, graph, deps, n, params) }
    }

    /// Interposed `cuGraphKernelNodeSetParams`.
    ///
    /// # Safety
    /// The driver's contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn cuGraphKernelNodeSetParams(
        node: Handle,
        params: *const u8,
    ) -> CuResult {
        // SAFETY: forwarded contract.
        unsafe { launch::graph_kernel_node_set_params(node, params) }
    }

    /// Interposed `cuGraphKernelNodeSetParams_v2`.
    ///
    /// # Safety
    /// The driver's contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn cuGraphKernelNodeSetParams_v2(
        node: Handle,
        params: *const u8,
    ) -> CuResult {
        // SAFETY: forwarded contract.
        unsafe { launch::graph_kernel_node_set_params_v2(node, params) }
    }

    /// Interposed `cuGraphExecKernelNodeSetParams`.
    ///
    /// # Safety
    /// The driver's contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams(
        exec: Handle,
        node: Handle,
        params: *const u8,
    ) -> CuResult {
        // SAFETY: forwarded contract.
        unsafe { launch::graph_exec_kernel_node_set_params(exec, node, params) }
    }

    /// Interposed `cuGraphExecKernelNodeSetParams_v2`.
    ///
    /// # Safety
    /// The driver's contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams_v2(
        exec: Handle,
        node: Handle,
        params: *const u8,
    ) -> CuResult {
        // SAFETY: forwarded contract.
        unsafe { launch::graph_exec_kernel_node_set_params_v2(exec, node, params) }
    }

    /// Interposed `cuGraphAddNode`.
    ///
    /// # Safety
    /// The driver's contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn cuGraphAddNode(
        node: *mut Handle,
        graph: Handle,
        deps: *const Handle,
        n: usize,
        params: *const u8,
    ) -> CuResult {
        // SAFETY: forwarded contract.
        unsafe { launch::graph_add_node(node, graph, deps, n, params) }
    }

    /// Interposed `cuGraphAddNode_v2`.
    ///
    /// # Safety
    /// The driver's contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn cuGraphAddNode_v2(
        node: *mut Handle,
        graph: Handle,
        deps: *const Handle,
        edges: *const c_void,
        n: usize,
        params: *const u8,
    ) -> CuResult {
        // SAFETY: forwarded contract.
        unsafe { launch::graph_add_node_v2(node, graph, deps, edges, n, params) }
    }

    /// Interposed `cuGraphNodeSetParams`.
    ///
    /// # Safety
    /// The driver's contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn cuGraphNodeSetParams(node: Handle, params: *const u8) -> CuResult {
        // SAFETY: forwarded contract.
        unsafe { launch::graph_node_set_params(node, params) }
    }

    /// Interposed `cuGraphExecNodeSetParams`.
    ///
    /// # Safety
    /// The driver's contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn cuGraphExecNodeSetParams(
        exec: Handle,
        node: Handle,
        params: *const u8,
    ) -> CuResult {
        // SAFETY: forwarded contract.
        unsafe { launch::graph_exec_node_set_params(exec, node, params) }
    }
}
