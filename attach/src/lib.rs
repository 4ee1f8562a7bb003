//! The attach side of bpftime-super: eBPF probes in unmodified CUDA applications.
//!
//! ```text
//! bpftime-super trace PROG.bpf.o -- CMD
//!   │  verifies the probes, creates the session's shared-memory region and maps,
//!   │  starts CMD with LD_PRELOAD=libbpftime_attach.so (attach/shim) and the session in the env
//!   ▼
//! CMD ── cuModuleLoadData / cuLibraryLoadData / cuLink* / cudart's registration ─┐
//!                                     (direct, dlsym, or cuGetProcAddress)      │
//!   shim::hooks ◀────────────────────────────────────────────────────────────────┘
//!     └─[instrument]── image ─[image]─▶ PTX ─[jit::ptx::parse]─▶ kernels ─[probes]─▶ matches
//!                        ─[codegen: JIT each probe, one block per site]─[jit::passes::probe]─▶ PTX
//!     └─▶ the real driver loads the instrumented PTX; the probes update maps in the region
//! trace prints the maps live, and once more at exit
//! ```
//!
//! | module       | owns                                                                       |
//! |--------------|----------------------------------------------------------------------------|
//! | [`api`]      | the driver entry points the shim wraps, as data; what host probe sections name |
//! | [`apilog`]   | the `--api-log` file: copies, allocations, launches and syncs the app made |
//! | [`image`]    | recognising and unpacking PTX, fat binaries (compressed too), cubins, host ELF |
//! | [`probes`]   | loading and verifying `kprobe/`/`kretprobe/` programs; kernel name matching |
//! | [`codegen`]  | the probe `.func`s and the per-site ctx blocks                              |
//! | [`instrument`] | image → what the driver should load, with a report; the content cache    |
//! | [`memtrace`] | the `--mem-trace` ring, record and file layout                               |
//! | [`occupancy`] | `.maxnreg` caps that keep an instrumented kernel's resident warps          |
//! | [`session`]  | the contract between `trace` and the shim: environment, region, maps, report file |
//! | [`shim`]     | the interception layer: driver types, real entry points, the hooks          |
//!
//! The C symbols that interpose the driver live in `attach/shim` (the `cdylib`), never in
//! this rlib: a Rust binary that links this crate (the CLI does) must not interpose its own
//! `dlsym`.

#![deny(missing_docs)]

pub mod api;
pub mod apilog;
pub mod codegen;
pub mod image;
pub mod instrument;
pub mod memtrace;
pub mod occupancy;
pub mod probes;
pub mod session;
pub mod shim;

pub use instrument::{Instrumenter, Outcome, Report};
pub use probes::{Probe, ProbeSet, SiteKind};

/// Why probes could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// A file could not be read.
    #[error("cannot read `{path}`")]
    Read {
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An object is not a usable eBPF ELF.
    #[error("`{path}`")]
    Elf {
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: Box<ebpf::elf::ElfError>,
    },
    /// An object holds no kprobe/kretprobe program.
    #[error("`{path}` has no kprobe/<kernel> or kretprobe/<kernel> program")]
    NoProbes {
        /// The path.
        path: String,
    },
    /// A probe section is malformed.
    #[error("`{path}` section `{section}` {what}")]
    Section {
        /// The path.
        path: String,
        /// The section.
        section: String,
        /// What is wrong.
        what: String,
    },
    /// The verifier rejected a probe.
    #[error("probe `{program}` rejected by the verifier")]
    Rejected {
        /// The program.
        program: String,
        /// The verifier's error (names the instruction).
        #[source]
        source: Box<ebpf::verifier::VerifyError>,
    },
    /// The session's region or maps could not be set up or opened.
    #[error("session region `{region}`: {what}")]
    Region {
        /// The region name.
        region: String,
        /// What failed.
        what: String,
    },
    /// The session environment is malformed.
    #[error("session environment {var}: {what}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong.
        what: String,
    },
}
