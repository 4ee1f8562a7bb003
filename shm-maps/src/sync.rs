//! The atomics every shared structure uses: `loom`'s under `cfg(loom)`, `core`'s otherwise.
//!
//! Everything in this crate that is shared between processes takes its atomic types from
//! here, so the queue protocol can be model-checked with loom
//! (`RUSTFLAGS="--cfg loom" cargo test -p shm-maps --test loom_queue --release`).

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

#[cfg(not(loom))]
pub use core::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

/// Spin-loop hint.
#[inline(always)]
pub fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}
