//! bpftime-super's host side: program loading for the CLI now; the service, the control
//! plane and the client library build on it.
//!
//! ```text
//! file / stdin ──[source::read]──▶ bytes ──[ebpf::elf::load]──▶ Program
//!                                                   └──[ebpf::verifier]──▶ Verified
//! ```
#![deny(missing_docs)]

pub mod source;
