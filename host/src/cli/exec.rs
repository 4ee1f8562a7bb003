//! `bpftime-super exec`: load, verify and run one program once, on the native JIT
//! (`--engine jit`, the default) or the interpreter (`--engine interp`).
//!
//! Only verified programs reach the JIT: with `--no-verify` the interpreter runs. A
//! program the JIT cannot compile runs on the interpreter, with a warning.
//!
//! Without `--mem`, r1 points to a `struct bpftime_job_ctx` for record 0 of a one-record
//! job whose input is `--input` (empty by default) and whose output is `--out-size` zeroed
//! bytes. With `--mem`, r1 points to a copy of that memory and r2 holds its length.

use super::{ProgArgs, hex, parse_bytes_arg};
use anyhow::{Context, Result};
use ebpf::interp::{Env, Vm};
use ebpf::verifier::{CtxKind, VerifyOptions};
use jit::cpu::{Engine, Executor};
use serde::Serialize;
use std::process::ExitCode;
use std::sync::Arc;

/// Arguments of `exec`.
#[derive(clap::Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    prog: ProgArgs,
    /// Memory for r1 (r2 = its length): hex bytes, or @FILE.
    #[arg(long, value_name = "HEX|@FILE", conflicts_with_all = ["input", "out_size", "args"])]
    mem: Option<String>,
    /// Input record for the job ctx (`data..data_end`): hex bytes, or @FILE.
    #[arg(long, value_name = "HEX|@FILE")]
    input: Option<String>,
    /// Size of the zeroed output record (`out..out_end`).
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    out_size: usize,
    /// Job arguments `args[0..4]`, comma-separated.
    #[arg(long, value_delimiter = ',', num_args = 1..=4)]
    args: Vec<u64>,
    /// Run without verifying (on the interpreter, which checks every memory access).
    #[arg(long)]
    no_verify: bool,
    /// Engine: the native JIT (default) or the interpreter.
    #[arg(long, default_value_t = jit::cpu::Engine::Jit, value_name = "interp|jit")]
    engine: jit::cpu::Engine,
    /// Show the verifier's state trail when it rejects the program.
    #[arg(long)]
    log: bool,
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct MapDump {
    name: String,
    kind: ebpf::MapKind,
    entries: Vec<(String, String)>,
}

#[derive(Serialize)]
struct ExecReport {
    program: String,
    section: String,
    verified: bool,
    /// Engine that ran the program.
    engine: String,
    /// Native compile time in µs (JIT engine).
    #[serde(skip_serializing_if = "Option::is_none")]
    compile_us: Option<u64>,
    /// Why the interpreter ran although the JIT was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    fallback: Option<String>,
    r0: String,
    r0_u64: u64,
    trace: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mem: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    out: Option<String>,
    maps: Vec<MapDump>,
}

/// Runs `exec`.
pub fn run(a: ExecArgs) -> Result<ExitCode> {
    let prog = host::source::load_program(&a.prog.prog_file, a.prog.prog.as_deref())?;
    let mut mem = a
        .mem
        .as_deref()
        .map(parse_bytes_arg)
        .transpose()
        .context("bad --mem")?;
    let input = a
        .input
        .as_deref()
        .map(parse_bytes_arg)
        .transpose()
        .context("bad --input")?
        .unwrap_or_default();
    if !a.no_verify {
        let ctx = match &mem {
            Some(m) => CtxKind::Mem { len: m.len() },
            None => CtxKind::Job,
        };
        let opts = VerifyOptions {
            ctx,
            log: a.log,
            ..VerifyOptions::default()
        };
        if let Err(e) = ebpf::verifier::verify(&prog, &opts) {
            if a.log && !e.log.is_empty() {
                eprintln!("{}", e.log);
            }
            anyhow::bail!("verifier rejected the program: {e}");
        }
    }
    let maps = prog
        .maps
        .iter()
        .map(|d| {
            ebpf::maps::create_local(d, 1)
                .with_context(|| format!("cannot create map `{}`", d.name))
        })
        .collect::<Result<Vec<_>>>()?;
    let vm = Vm::new(&prog, maps.clone())?;
    let engine = if a.no_verify {
        Engine::Interp
    } else {
        a.engine
    };
    // Verified for the ctx it runs with: the native code needs no bounds checks.
    let ex = if a.no_verify {
        Executor::new(vm, engine)
    } else {
        Executor::verified(vm, engine)
    };
    if let Some(e) = ex.fallback_reason() {
        eprintln!("warning: JIT compile failed, running on the interpreter: {e}");
    }
    let mut env = Env::default();
    let mut out = vec![0u8; a.out_size];
    let mut job_args = [0u64; 4];
    for (slot, v) in job_args.iter_mut().zip(&a.args) {
        *slot = *v;
    }
    let r0 = match &mut mem {
        Some(m) => ex.run_mem(m, &mut env)?,
        None => ex.run_job(&input, &mut out, 0, 1, job_args, &mut env)?,
    };
    let trace = std::mem::take(&mut env.trace);
    if a.json {
        let report = ExecReport {
            program: prog.name.clone(),
            section: prog.section.clone(),
            verified: !a.no_verify,
            engine: ex.engine().to_string(),
            compile_us: ex.compile_time().map(|t| t.as_micros() as u64),
            fallback: ex.fallback_reason().map(|e| e.to_string()),
            r0: format!("{r0:#x}"),
            r0_u64: r0,
            trace,
            mem: mem.as_deref().map(hex),
            out: (a.out_size > 0).then(|| hex(&out)),
            maps: dump_maps(&maps),
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for line in &trace {
            eprintln!("trace: {line}");
        }
        if a.out_size > 0 {
            eprintln!("out: {}", hex(&out));
        }
        println!("{r0:#x}");
    }
    Ok(ExitCode::SUCCESS)
}

fn dump_maps(maps: &[Arc<dyn ebpf::maps::MapOps>]) -> Vec<MapDump> {
    maps.iter()
        .map(|m| MapDump {
            name: m.def().name.clone(),
            kind: m.def().kind,
            entries: m
                .entries()
                .into_iter()
                .map(|(k, v)| (hex(&k), hex(&v)))
                .collect(),
        })
        .collect()
}
