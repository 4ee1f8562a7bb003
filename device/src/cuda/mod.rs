//! The CUDA side: what the host needs from the driver, behind safe functions.
//!
//! Only [`driver`] touches `cudarc::driver::sys`. Every entry point first checks that
//! `libcuda` can be loaded and returns [`DeviceError::NoDriver`] otherwise, so a machine with
//! no GPU gets an error (and the service its CPU backend), never a panic.
//!
//! Today this module compiles PTX to cubin through the driver's linker and reports the
//! device's architecture (`bpftime-super jit --emit cubin`); the persistent kernel builds on
//! the same layer.

pub mod bytecode;
mod driver;

pub use driver::{device_sm, driver_present, ptx_to_cubin};

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
