//! bpftime-super's execution backends.
//!
//! A backend takes jobs from the shared-memory queue of a [`shm_maps::ShmRegion`], runs
//! the program each one names for every record, and publishes a completion. All backends
//! speak the same protocol (the queue, completion and status words of
//! [`shm_maps::layout`]), so a client cannot tell them apart except by speed.
//!
//! ```text
//!   control plane (host) ──install/replace/unload──▶ ProgramTable ◀──snapshot per job── workers
//!   clients ──JobDesc──▶ region queue ──pop_batch──▶ workers ──run records──▶ Completion DONE
//! ```
//!
//! - [`programs`]: the table of installed programs and their versions (hot swap);
//! - [`job`]: validating a descriptor and running one job, the logic every backend shares;
//! - [`stats`]: counters and the latency histogram behind `status` and the metrics;
//! - [`cpu`]: the CPU backend: worker threads that poll, spin briefly, then park;
//! - [`tier`]: maps in an emulated slower memory tier (latency and a bandwidth cap per
//!   helper access; the CPU backend);
//! - [`cuda`]: the CUDA backend: the persistent kernel, generations and hot swap, the
//!   instant-tier interpreter, host mailboxes and fault recovery, over a driver layer that is
//!   dynamically loaded (an error, never a panic, without a GPU).
#![deny(missing_docs)]

pub mod cpu;
pub mod cuda;
pub mod job;
pub mod programs;
pub mod stats;
pub mod tier;

/// Which backend to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Worker threads on the host CPU.
    Cpu,
    /// The persistent kernel on a CUDA GPU ([`cuda::CudaBackend`]).
    Cuda,
}

/// How `auto` was resolved, with the reason to log.
pub fn select_auto() -> (BackendKind, &'static str) {
    if !cuda::driver_present() {
        (
            BackendKind::Cpu,
            "no CUDA driver on this machine: using the CPU backend",
        )
    } else if cuda::Gpu::count() == 0 {
        (
            BackendKind::Cpu,
            "a CUDA driver is installed but reports no GPU: using the CPU backend",
        )
    } else if !cuda::source::nvrtc_present() {
        (
            BackendKind::Cpu,
            "a GPU is present but NVRTC (libnvrtc) is missing, so the persistent kernel cannot \
             be compiled: using the CPU backend",
        )
    } else {
        (
            BackendKind::Cuda,
            "a CUDA GPU is present: using the persistent kernel",
        )
    }
}
