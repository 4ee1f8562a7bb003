//! bpftime-super's shared-memory region: the job queue, completions, the client table,
//! the data arena and the maps, laid out in one named `/dev/shm` object.
//!
//! ```text
//! client process                     /dev/shm/NAME                       service
//!  alloc buffers (via service) ──▶  arena ◀───────────── workers read input, write output
//!  push JobDesc ───────────────▶   queue ───────────────▶ workers pop
//!  poll Completion ◀────────────   completions ◀────────  workers publish DONE
//! ```
//!
//! Nothing here needs CUDA: a client links this crate and maps the region. Every shared word
//! is an atomic at a fixed offset (see [`layout`]), so the same memory can be registered with
//! a GPU and polled by a persistent kernel.
#![deny(missing_docs)]

pub mod arena;
pub mod client;
#[cfg(not(loom))]
pub mod fuzz;
pub mod layout;
pub mod maps;
pub mod queue;
pub mod region;
pub mod sync;
#[cfg(not(loom))]
pub mod wake;

pub use layout::{Completion, JobDesc, job_flags, status};
pub use queue::{Alone, JobQueue, QueueFull};
pub use region::{CompletionData, DirEntry, OnStale, RegionConfig, RegionError, ShmRegion};
