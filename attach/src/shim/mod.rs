//! The interception layer, as plain Rust: the `attach/shim` cdylib exports these under the
//! driver's names (and `dlsym`), so that every path by which an application reaches
//! `libcuda.so.1` passes through [`hooks`].
//!
//! | path to the driver | how the shim sits on it |
//! |--------------------|-------------------------|
//! | linked with `-lcuda` | exported symbols, first in the global scope (`LD_PRELOAD`) |
//! | `dlopen("libcuda.so.1")` + `dlsym` (CuPy, Numba, PyTorch) | the exported `dlsym` swaps wrapped entries |
//! | cudart, static (nvcc's default) or shared: `dlsym("cuGetProcAddress_v2")`, then `cuGetProcAddress("cuGetProcAddress")`, then everything through that | the `cuGetProcAddress` wrappers hand out wrappers, themselves included |
//!
//! cudart's fat-binary registration (`__cudaRegisterFatBinary`) is lazy: the images reach
//! the driver through `cuLibraryLoadData` (or `cuModuleLoadData`) at first use, which the
//! shim sees on every path above.

pub mod api;
pub mod clock;
pub mod devmaps;
pub mod driver;
pub mod hooks;
pub mod hot;
pub mod launch;
pub mod memtrace;
pub mod symprobes;
pub mod uprobes;
pub mod userstack;
