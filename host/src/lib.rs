//! bpftime-super's host side: the service, its control plane, the client library, and the
//! program loading the CLI uses.
//!
//! ```text
//! file / stdin ──[source]──▶ bytes ──[ebpf::elf::load]──▶ Program ──[verifier]──▶ Verified
//!
//! client (any process) ──[client::Client]──┬── JobDesc ──▶ /dev/shm/NAME ──▶ device backend
//!                                          └── JSON lines ──▶ NAME.sock ──▶ service (control)
//! ```
//!
//! - [`source`]: reading program files (ELF, raw bytecode, hex, stdin);
//! - [`protocol`]: the control protocol's requests and replies;
//! - [`service`]: `run --persistent`: region, backend, control socket, reaper, metrics;
//! - [`client`]: the client library;
//! - [`hex`]: hex text of byte strings.
#![deny(missing_docs)]

pub mod client;
pub mod hex;
pub mod plot;
pub mod protocol;
pub mod service;
pub mod source;

/// Logs `tracing` events to stderr for a command line: `BPFTIME_LOG` (an `EnvFilter`), else
/// `debug` with `verbose`, else `warn`. Shared by `bpftime-super` and its extensions.
pub fn init_cli_logging(verbose: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BPFTIME_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(if verbose { "debug" } else { "warn" })
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
