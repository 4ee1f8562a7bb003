//! The CUDA side: what the host needs from the driver, behind safe functions.
//!
//! Only [`driver`] touches `cudarc::driver::sys`. Every entry point first checks that
//! `libcuda` can be loaded and returns [`DeviceError::NoDriver`] otherwise, so a machine with
//! no GPU gets an error (and the service its CPU backend), never a panic.
//!
//! | module       | what                                                                  |
//! |--------------|-----------------------------------------------------------------------|
//! | [`driver`]   | checked wrappers of the driver calls ([`Gpu`]): memory, streams, link, libraries, launch |
//! | [`source`]   | the runtime's CUDA source, the generated layout header, NVRTC, the per-generation dispatch |
//! | [`bytecode`] | relocation of programs for the device interpreter (instant tier)      |
//! | [`backend`]  | the service side: supervises the GPU worker process, host mailboxes, fault recovery |
//! | [`worker`]   | the GPU worker process: context, persistent kernel, generations and hot swap |
//! | [`wire`]     | what the two share: the mailbox block in the region, the command pipe |

pub mod backend;
pub mod baseline;
pub mod bytecode;
mod driver;
pub mod source;
pub mod wire;
pub mod worker;

pub use backend::CudaBackend;
pub use driver::{
    Gpu, GraphExec, Library, Stream, StreamState, device_sm, driver_present, ptx_to_cubin,
};
pub use wire::{CudaConfig, CudaStatus, MAILBOX_BYTES, SwapTimes, Tier};

/// CUDA failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// `libcuda` is not installed (no NVIDIA driver on this machine).
    #[error("no CUDA driver on this machine (libcuda could not be loaded)")]
    NoDriver,
    /// A driver call failed.
    #[error("{call} failed: {code}{}", if log.is_empty() { String::new() } else { format!("\n{log}") })]
    Call {
        /// The driver function.
        call: &'static str,
        /// The `CUresult`, spelled out.
        code: String,
        /// The JIT linker's error log, if any.
        log: String,
    },
}
