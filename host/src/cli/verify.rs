//! `bpftime-super verify`: run the verifier on one program or on every program of an object.

use super::ProgArgs;
use anyhow::Result;
use ebpf::verifier::{CtxKind, VerifyOptions};
use serde::Serialize;
use std::process::ExitCode;

/// Arguments of `verify`.
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    #[command(flatten)]
    prog: ProgArgs,
    /// Verify for `exec --mem` with a block of this many bytes instead of the job ctx.
    #[arg(long, value_name = "BYTES")]
    mem_len: Option<usize>,
    /// Print the verifier's state trail.
    #[arg(long)]
    log: bool,
    /// Budget of processed instructions.
    #[arg(long, default_value_t = 1_000_000)]
    max_insns: usize,
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Verdict {
    program: String,
    section: String,
    ok: bool,
    insns: usize,
    insns_processed: usize,
    max_stack_depth: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    log: String,
}

/// Runs `verify`.
pub fn run(a: VerifyArgs) -> Result<ExitCode> {
    let programs = super::inspect::select_programs(&a.prog)?;
    let opts = VerifyOptions {
        ctx: match a.mem_len {
            Some(len) => CtxKind::Mem { len },
            None => CtxKind::Job,
        },
        log: a.log,
        max_insns: a.max_insns,
    };
    let mut verdicts = Vec::new();
    for prog in &programs {
        let v = match ebpf::verifier::verify(prog, &opts) {
            Ok(v) => Verdict {
                program: prog.name.clone(),
                section: prog.section.clone(),
                ok: true,
                insns: prog.insns.len(),
                insns_processed: v.insns_processed,
                max_stack_depth: v.max_stack_depth,
                error: None,
                log: v.log,
            },
            Err(e) => Verdict {
                program: prog.name.clone(),
                section: prog.section.clone(),
                ok: false,
                insns: prog.insns.len(),
                insns_processed: 0,
                max_stack_depth: 0,
                error: Some(e.to_string()),
                log: e.log,
            },
        };
        verdicts.push(v);
    }
    let all_ok = verdicts.iter().all(|v| v.ok);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&verdicts)?);
    } else {
        for v in &verdicts {
            if a.log && !v.log.is_empty() {
                eprintln!("{}", v.log);
            }
            match &v.error {
                None => println!(
                    "{}:{}: ok: {} insns, {} processed, stack {} bytes",
                    v.section, v.program, v.insns, v.insns_processed, v.max_stack_depth
                ),
                Some(e) => eprintln!("rejected: {e}"),
            }
        }
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
