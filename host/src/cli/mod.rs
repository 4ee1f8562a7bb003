//! Command-line interface: argument definitions and dispatch.
//!
//! | command   | what it does                                                  |
//! |-----------|---------------------------------------------------------------|
//! | `exec`    | load, verify and run one program once; print r0               |
//! | `verify`  | run the verifier and print its verdict                        |
//! | `inspect` | list programs, maps and sections of an object                 |
//! | `disasm`  | print the linked instructions of each program                 |
//! | `jit`     | translate a program to PTX, or a cubin through the CUDA driver |
//! | `instrument` | splice probes into a GPU image offline; print what went where |
//! | `trace`   | run a CUDA program with GPU kernel probes; print their maps live |
//! | `memtrace` | read a memory trace from `trace --mem-trace`: per-site lines, reuse distances |
//! | `run --persistent` | start the service                                    |
//! | `load`, `unload`, `replace`, `list` | manage a running service's programs  |
//! | `submit`  | run an offload job through the shared-memory queue            |
//! | `map dump`, `map update` | read and write maps while jobs run             |
//! | `status`, `stop` | service figures; drain and stop                        |
//! | any other `NAME` | runs the extension `bpftime-super-NAME` (e.g. `llm-cache`), see [`external`] |
//!
//! Every command takes `--json` for scripts. Errors leave through `anyhow` with context and
//! give a non-zero exit status.

mod exec;
mod external;
mod inspect;
mod instrument;
mod jit;
mod memtrace;
mod service;
mod trace;
mod verify;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// bpftime-super: run eBPF programs as offload jobs on GPUs and CPUs.
#[derive(Parser, Debug)]
#[command(
    name = "bpftime-super",
    version,
    about,
    after_help = "Any other COMMAND runs the extension `bpftime-super-COMMAND` found beside this binary or on PATH, e.g. `bpftime-super llm-cache simulate TRACE --capacity 2GB`."
)]
pub struct Cli {
    /// Log debug information to stderr (or set BPFTIME_LOG=<filter>).
    #[arg(short, long, global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by commands that pick one program.
#[derive(clap::Args, Debug, Clone)]
pub struct ProgArgs {
    /// ELF object from `clang -target bpf`, raw bytecode, or hex text (`-` reads stdin).
    pub prog_file: String,
    /// Program to use, by function or section name.
    #[arg(long = "prog")]
    pub prog: Option<String>,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run one program once and print r0.
    Exec(exec::ExecArgs),
    /// Verify programs and print the verdict.
    Verify(verify::VerifyArgs),
    /// List the programs, maps and sections of an object.
    Inspect(inspect::InspectArgs),
    /// Disassemble programs.
    Disasm(inspect::DisasmArgs),
    /// Translate a program to PTX (or a cubin, through the CUDA driver).
    Jit(jit::JitArgs),
    /// Instrument a GPU image offline: splice probes into its PTX and print what went where.
    Instrument(instrument::InstrumentArgs),
    /// Run a CUDA program with GPU kernel probes attached; print their maps live.
    Trace(trace::TraceArgs),
    /// Read a memory trace written by `trace --mem-trace FILE`.
    Memtrace(memtrace::MemtraceArgs),
    /// Start the service (`run --persistent`).
    Run(service::RunArgs),
    /// Verify and install a program in a running service.
    Load(service::LoadArgs),
    /// Remove a program from a running service.
    Unload(service::UnloadArgs),
    /// Hot-swap a program in a running service.
    Replace(service::ReplaceArgs),
    /// List the programs of a running service.
    List(service::CommonArgs),
    /// Submit an offload job and print its completion.
    Submit(service::SubmitArgs),
    /// Dump or update a map of a running service.
    Map(service::MapArgs),
    /// Show the status of a running service.
    Status(service::CommonArgs),
    /// Stop a running service (draining its queue unless --now).
    Stop(service::StopArgs),
    /// Internal: the GPU worker process a CUDA-backend service starts.
    #[command(hide = true)]
    GpuWorker {
        /// Arguments as JSON (`device::cuda::wire::WorkerArgs`).
        args: String,
    },
    /// An extension: `bpftime-super NAME ARGS` runs `bpftime-super-NAME ARGS`.
    #[command(external_subcommand)]
    External(Vec<String>),
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Exec(a) => exec::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Inspect(a) => inspect::run_inspect(a),
        Command::Disasm(a) => inspect::run_disasm(a),
        Command::Jit(a) => jit::run(a),
        Command::Instrument(a) => instrument::run(a),
        Command::Trace(a) => trace::run(a),
        Command::Memtrace(a) => memtrace::run(a),
        Command::Run(a) => service::run(a),
        Command::Load(a) => service::load(a),
        Command::Unload(a) => service::unload(a),
        Command::Replace(a) => service::replace(a),
        Command::List(a) => service::list(a),
        Command::Submit(a) => service::submit(a),
        Command::Map(a) => service::map(a),
        Command::Status(a) => service::status(a),
        Command::Stop(a) => service::stop(a),
        Command::GpuWorker { args } => {
            let code = device::cuda::worker::main(&args);
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
        Command::External(args) => external::run(&args),
    }
}

/// Parses `--mem`-style data: hex text, or `@FILE` for a file's raw bytes.
pub fn parse_bytes_arg(s: &str) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context;
    if let Some(path) = s.strip_prefix('@') {
        return std::fs::read(path).with_context(|| format!("cannot read {path}"));
    }
    host::hex::decode(s).map_err(anyhow::Error::msg)
}

/// Formats bytes as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    host::hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_args() {
        assert_eq!(parse_bytes_arg("01ff 10").unwrap(), vec![1, 0xff, 0x10]);
        assert!(parse_bytes_arg("abc").is_err());
        assert!(parse_bytes_arg("@/nonexistent/file").is_err());
    }
}
