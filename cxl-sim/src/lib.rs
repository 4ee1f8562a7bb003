//! cxl-sim: what would a second, slower memory tier (CXL.mem) do to a GPU kernel?
//!
//! A built-in memory probe ([`probe`]) runs at every global access of the application's
//! kernels (the attach shim's memory pass); accesses to the emulated tier's address ranges
//! wait out the delay [`model`] computes, and accesses elsewhere pay only the range check.
//!
//! ```text
//! Params (preset + flags) ──[Params::config]──▶ CxlConfig ──[probe::object_with]──▶ probe object
//!   ──▶ `bpftime-super trace` (the shim: memory pass, maps in GPU memory) ──▶ CMD's kernels, slowed
//! allocations (API log) ──[placement::Policy::place]──▶ tier ranges ──▶ CxlConfig.ranges
//! ```
//!
//! | module | owns |
//! |--------|------|
//! | [`model`] | the delay as a pure function: pattern classes, queueing term, token bucket ([`model::Emulator`], the reference the probe is tested against) |
//! | [`abi`] | the structures the probe and the host share, and the C header generated from them |
//! | [`probe`] | the embedded probe object, patched with a configuration |
//! | [`placement`] | which allocations are the tier's: everything, by size, by call site, local capacity first, page interleave |
//! | [`presets`] | published CXL devices as parameters |
//! | [`calibrate`] | the probe's own cost on a dependent load, which it takes off every wait |
//! | [`plot`] | the sweep's PNGs |
//!
//! The `bpftime-super-cxl` binary (`src/main.rs`, `src/cli.rs`) is the command line;
//! `bpftime-super cxl …` reaches it through the host CLI's external-command dispatch.

#![deny(missing_docs)]

pub mod abi;
pub mod calibrate;
pub mod live;
pub mod model;
pub mod placement;
pub mod plot;
pub mod presets;
pub mod probe;

pub use abi::CxlConfig;
pub use model::{Params, Pattern};
