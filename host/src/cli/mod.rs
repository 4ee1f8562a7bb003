//! Command-line interface: argument definitions and dispatch.
//!
//! | command   | what it does                                                  |
//! |-----------|---------------------------------------------------------------|
//! | `exec`    | load, verify and run one program once; print r0               |
//! | `verify`  | run the verifier and print its verdict                        |
//! | `inspect` | list programs, maps and sections of an object                 |
//! | `disasm`  | print the linked instructions of each program                 |
//!
//! Every command takes `--json` for scripts. Errors leave through `anyhow` with context and
//! give a non-zero exit status.

mod exec;
mod inspect;
mod verify;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// bpftime-super: run eBPF programs as offload jobs on GPUs and CPUs.
#[derive(Parser, Debug)]
#[command(name = "bpftime-super", version, about)]
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
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Exec(a) => exec::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Inspect(a) => inspect::run_inspect(a),
        Command::Disasm(a) => inspect::run_disasm(a),
    }
}

/// Parses `--mem`-style data: hex text, or `@FILE` for a file's raw bytes.
pub fn parse_bytes_arg(s: &str) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context;
    if let Some(path) = s.strip_prefix('@') {
        return std::fs::read(path).with_context(|| format!("cannot read {path}"));
    }
    let digits: String = s
        .trim()
        .trim_start_matches("0x")
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '_' && *c != ':')
        .collect();
    anyhow::ensure!(
        digits.len() % 2 == 0,
        "hex data has an odd number of digits ({}): expected pairs like `01ff`",
        digits.len()
    );
    (0..digits.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&digits[i..i + 2], 16)
                .with_context(|| format!("bad hex byte `{}` at digit {i}", &digits[i..i + 2]))
        })
        .collect()
}

/// Formats bytes as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_args() {
        assert_eq!(parse_bytes_arg("01ff 10").unwrap(), vec![1, 0xff, 0x10]);
        assert_eq!(parse_bytes_arg("0x0a0b").unwrap(), vec![10, 11]);
        assert!(parse_bytes_arg("abc").is_err());
        assert!(parse_bytes_arg("zz").is_err());
        assert!(parse_bytes_arg("@/nonexistent/file").is_err());
        assert_eq!(hex(&[0, 0xab]), "00ab");
    }
}
