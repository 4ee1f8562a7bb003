//! llm-cache: what would a GPU-side cache have saved an LLM offload framework?
//!
//! A trace of the framework's host↔device object transfers (from the CUDA shim's transfer
//! log, or CSV from another tool) is replayed through cache policies at several
//! capacities, reporting hits, bytes moved and the stall they cost against what the
//! framework really moved.
//!
//! ```text
//! file ──[trace::Trace::read]──▶ Trace ──[sim::Workload::from_trace]──▶ Workload
//!      ──[sim::simulate]──▶ Vec<RunResult> ──[report / plot]──▶ table, JSON, PNGs
//! ```
//!
//! | module | owns |
//! |--------|------|
//! | [`observe`] | the CUDA shim's API log → a trace: copies grouped into objects by host range |
//! | [`trace`] | the in-memory trace, the binary format (`BPFLLMC\0`), CSV, [`trace::TraceWriter`] |
//! | [`policy`] | LRU, LFU, static, hybrid and Belady behind [`policy::Policy`] |
//! | [`sim`] | lookups from a trace, policies × capacities in parallel, [`sim::RunResult`] |
//! | [`report`] | the text table, `--json` rows, bandwidth and stall estimates, `--recommend` |
//! | [`plot`] | `hit_rate.png`, `bytes_moved.png` |
//! | [`units`] | `512KB`/`2GB` sizes |
//! | [`synth`] | seeded synthetic traces (Zipf, a small LLM-shaped one) |
//!
//! The `bpftime-super-llm-cache` binary (`src/main.rs`, `src/cli.rs`) is the command line;
//! `bpftime-super llm-cache …` reaches it through the host CLI's external-command dispatch.
//! It depends on `attach` (the API log's format) and `host` (the plot font).

#![deny(missing_docs)]

pub mod observe;
pub mod plot;
pub mod policy;
pub mod report;
pub mod sim;
pub mod synth;
pub mod trace;
pub mod units;

pub use policy::{Policy, PolicyKind};
pub use sim::{RunResult, SimConfig, Workload};
pub use trace::{Access, Direction, Object, Trace, TraceError, TraceWriter};
