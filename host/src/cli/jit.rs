//! `bpftime-super jit`: verify a program and translate it to PTX, or to a cubin through the
//! CUDA driver.
//!
//! Map addresses are baked into the code as immediates. Outside a running service there is
//! no device memory to point at, so `--map-base` sets where the maps are assumed to live:
//! each map in declaration order at the next 4 KiB boundary, sized by its shared-memory
//! layout (`shm_maps::maps::layout_size`).

use super::ProgArgs;
use anyhow::{Context, Result, bail};
use ebpf::verifier::{VerifyOptions, verify};
use jit::{JitOptions, MapBinding};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// What to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    /// PTX text.
    Ptx,
    /// A cubin, compiled by the CUDA driver (needs a GPU machine).
    Cubin,
}

/// Arguments of `jit`.
#[derive(clap::Args, Debug)]
pub struct JitArgs {
    #[command(flatten)]
    prog: ProgArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "ptx")]
    emit: Emit,
    /// Target architecture, `sm_XX` (default: the GPU's own, or sm_90 without one).
    #[arg(long)]
    arch: Option<String>,
    /// PTX ISA version.
    #[arg(long, default_value = "8.0")]
    ptx_version: String,
    /// Device address the maps are laid out from.
    #[arg(long, default_value = "0", value_parser = parse_u64)]
    map_base: u64,
    /// Per-thread array slot sets (GPU threads that own a slot).
    #[arg(long, default_value_t = 1)]
    threads: u32,
    /// Split unaligned input/output accesses into byte accesses.
    #[arg(long)]
    unaligned: bool,
    /// Write to this file instead of stdout.
    #[arg(short, long)]
    output: Option<PathBuf>,
}

fn parse_u64(s: &str) -> Result<u64, String> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("bad address `{s}`: {e}"))
}

/// Runs `jit`.
pub fn run(a: JitArgs) -> Result<ExitCode> {
    let prog = host::source::load_program(&a.prog.prog_file, a.prog.prog.as_deref())?;
    let verified = verify(&prog, &VerifyOptions::default())
        .map_err(|e| anyhow::anyhow!("verifier rejected the program: {e}"))?;
    let sm = match &a.arch {
        Some(s) => s
            .trim_start_matches("sm_")
            .parse::<u32>()
            .with_context(|| format!("bad --arch `{s}`: expected sm_XX, like sm_90"))?,
        None => device::cuda::device_sm(0).unwrap_or(90),
    };
    let (maj, min) = a
        .ptx_version
        .split_once('.')
        .and_then(|(x, y)| Some((x.parse().ok()?, y.parse().ok()?)))
        .with_context(|| format!("bad --ptx-version `{}`: expected like 8.0", a.ptx_version))?;
    let mut maps = Vec::new();
    let mut addr = a.map_base;
    for d in &prog.maps {
        maps.push(MapBinding::for_def(d, addr, a.threads));
        let len = shm_maps::maps::layout_size(d, a.threads)
            .map_err(|e| anyhow::anyhow!("map `{}`: {e}", d.name))?;
        addr += len.div_ceil(4096) * 4096;
    }
    let stack = verified
        .stack_depths
        .iter()
        .map(|(_, d)| *d)
        .max()
        .unwrap_or(0);
    let opts = JitOptions {
        ptx_version: (maj, min),
        sm,
        stack_size: Some(stack.max(8) as u32),
        maps,
        unaligned: a.unaligned,
        ..JitOptions::default()
    };
    let module = jit::compile(&prog, &opts)?;
    let text = module.text();
    let bytes = match a.emit {
        Emit::Ptx => text.into_bytes(),
        Emit::Cubin => {
            if a.output.is_none() {
                bail!("--emit cubin writes binary data: give -o FILE");
            }
            device::cuda::ptx_to_cubin(&text, 0)
                .context("--emit cubin compiles through the CUDA driver (use --emit ptx and ptxas where there is no GPU)")?
        }
    };
    match &a.output {
        Some(p) => {
            std::fs::write(p, &bytes).with_context(|| format!("cannot write {}", p.display()))?
        }
        None => std::io::stdout().write_all(&bytes)?,
    }
    Ok(ExitCode::SUCCESS)
}
