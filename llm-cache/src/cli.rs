//! The `bpftime-super-llm-cache` command line (also `bpftime-super llm-cache`, through the
//! host CLI's external-command dispatch).
//!
//! | command | what it does |
//! |---------|--------------|
//! | `observe -o TRACE -- CMD` | run CMD under `bpftime-super trace --api-log` and turn its copies into a trace |
//! | `simulate TRACE` | replay a trace's lookups through policies × capacities; text table, `--json`, `--plot`, `--recommend` |
//!
//! Output goes to stdout (plot paths to stderr, so
//! `--json` stays one JSON document); errors leave through `anyhow` with context.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use llm_cache::report::{self, Bandwidth};
use llm_cache::sim::{self, SimConfig, Workload};
use llm_cache::trace::{Format, Trace};
use llm_cache::{PolicyKind, plot, units};
use std::path::PathBuf;

/// Replay an LLM offload framework's object transfers through GPU cache policies.
#[derive(Parser, Debug)]
#[command(
    name = "bpftime-super-llm-cache",
    bin_name = "bpftime-super llm-cache",
    version,
    about
)]
pub struct Cli {
    /// Log debug information to stderr (or set BPFTIME_LOG=<filter>).
    #[arg(short, long, global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Replay a trace through cache policies at several capacities.
    Simulate(SimulateArgs),
    /// Run a CUDA program and record its host↔device object transfers as a trace.
    Observe(ObserveArgs),
}

/// `observe` options.
#[derive(Args, Debug)]
pub struct ObserveArgs {
    /// Where to write the trace (binary `BPFLLMC`; `--csv` for CSV).
    #[arg(short, long, value_name = "TRACE")]
    pub output: PathBuf,
    /// Write CSV (`time_ns,object,bytes,direction,duration_ns`) instead of binary.
    #[arg(long)]
    pub csv: bool,
    /// Object names: CSV `host_addr,bytes,name` (a framework hook's dump of its tensors),
    /// or `host_addr,bytes,from_ns,name` (names from a time on, for buffers that change
    /// hands), read once CMD has exited (CMD may write it).
    #[arg(long, value_name = "CSV")]
    pub names: Option<PathBuf>,
    /// Keep the raw API log here (default: a temporary file, removed).
    #[arg(long, value_name = "FILE")]
    pub api_log: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// The `bpftime-super` binary (default: next to this one, else on PATH).
    #[arg(long, value_name = "PATH")]
    pub bpftime: Option<PathBuf>,
    /// Arguments for `bpftime-super trace` (for example `--shim PATH`), before CMD.
    #[arg(long = "trace-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub trace_args: Vec<String>,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub cmd: Vec<String>,
}

/// `--format`.
#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum FormatArg {
    /// Binary if the file starts with the magic `BPFLLMC\0`, CSV if it has the header.
    Auto,
    /// The binary format.
    Binary,
    /// CSV with a `time_ns,object,bytes,direction[,duration_ns]` header.
    Csv,
}

/// `simulate` options.
#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// The trace: binary (`BPFLLMC`) or CSV.
    pub trace: PathBuf,
    /// The trace's format.
    #[arg(long, value_enum, default_value = "auto")]
    pub format: FormatArg,
    /// Cache capacities, comma-separated (512KB, 2GB, 1.5GiB, 4096; powers of 1024).
    #[arg(long, value_delimiter = ',', value_parser = parse_capacity, required_unless_present = "recommend")]
    pub capacity: Vec<u64>,
    /// Policies, comma-separated: lru, lfu, static, hybrid, belady.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "lru,lfu,static,hybrid,belady"
    )]
    pub policy: Vec<PolicyKind>,
    /// Fraction of the capacity that bounds hybrid's pinned set (the rest is LRU).
    #[arg(long, default_value_t = 0.5, value_parser = parse_fraction)]
    pub hybrid_pinned: f64,
    /// Host-to-device bandwidth for stall estimates, GB/s (10^9 B/s); default: measured
    /// from the trace's transfer durations, else 25.
    #[arg(long, value_parser = parse_gbps)]
    pub pcie_gbps: Option<f64>,
    /// Print JSON: a list of results (an object with `results` and `recommend` when
    /// --recommend is given).
    #[arg(long)]
    pub json: bool,
    /// Write hit_rate.png and bytes_moved.png into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Name the objects to pin within this budget (512MB, 4GB ...), by static's ranking.
    #[arg(long, value_name = "BUDGET", value_parser = parse_capacity)]
    pub recommend: Option<u64>,
    /// Simulation threads (default: the available cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

fn parse_capacity(s: &str) -> Result<u64, String> {
    units::parse_capacity(s).map_err(|e| e.to_string())
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("`{s}`: expected a fraction from 0 to 1")),
    }
}

fn parse_gbps(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(f),
        _ => Err(format!("`{s}`: expected a positive bandwidth in GB/s")),
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Simulate(a) => simulate(a),
        Command::Observe(a) => observe(a),
    }
}

/// `bpftime-super`: `--bpftime`, else next to this binary, else on PATH.
fn bpftime(explicit: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p);
    }
    let here = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("bpftime-super")))
        .filter(|p| p.is_file());
    let on_path = || {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("bpftime-super"))
                .find(|p| p.is_file())
        })
    };
    here.or_else(on_path)
        .context("cannot find `bpftime-super` next to this binary or on PATH (give --bpftime)")
}

fn observe(a: ObserveArgs) -> Result<()> {
    use llm_cache::observe;
    let log = a.api_log.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("bpftime-llm-cache-{}.apilog", std::process::id()))
    });
    let bin = bpftime(a.bpftime.clone())?;
    let status = std::process::Command::new(&bin)
        .arg("trace")
        .args(["--quiet", "--interval", "0", "--api-log"])
        .arg(&log)
        .args(&a.trace_args)
        .arg("--")
        .args(&a.cmd)
        .status()
        .with_context(|| format!("run {}", bin.display()))?;
    let events = attach::apilog::read(&log);
    if a.api_log.is_none() {
        let _ = std::fs::remove_file(&log);
    }
    let events = events.with_context(|| {
        format!(
            "no API log from `{}` (exit status {status}): did it use CUDA?",
            a.cmd.join(" ")
        )
    })?;
    // Read after the run: the program itself may write the names (as the examples do).
    let names = match &a.names {
        Some(p) => observe::read_names(
            &std::fs::read_to_string(p).with_context(|| format!("--names {}", p.display()))?,
        )
        .map_err(|e| anyhow::anyhow!("--names {}: {e}", p.display()))?,
        None => observe::Names::new(),
    };
    let (trace, summary) = observe::trace_of(&events, &names)?;
    if a.csv {
        let f = std::fs::File::create(&a.output)
            .with_context(|| format!("create {}", a.output.display()))?;
        trace.write_csv(std::io::BufWriter::new(f))?;
    } else {
        trace.write_binary(&a.output)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "{}: {} objects; {} host-to-device copies ({} bytes), {} device-to-host ({} bytes), {} prefetches; {} launches, {} allocations ({} bytes), {} failed calls left out",
            a.output.display(),
            summary.objects,
            summary.h2d_copies,
            summary.h2d_bytes,
            summary.d2h_copies,
            summary.d2h_bytes,
            summary.prefetches,
            summary.launches,
            summary.allocs,
            summary.alloc_bytes,
            summary.failed
        );
        let calls: Vec<String> = summary
            .calls
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        println!("calls: {}", calls.join(", "));
    }
    if !status.success() {
        bail!("`{}` exited with {status}", a.cmd.join(" "));
    }
    Ok(())
}

fn simulate(a: SimulateArgs) -> Result<()> {
    let format = match a.format {
        FormatArg::Auto => Format::Auto,
        FormatArg::Binary => Format::Binary,
        FormatArg::Csv => Format::Csv,
    };
    let trace = Trace::read_as(&a.trace, format)?;
    let totals = trace.totals();
    let w = Workload::from_trace(&trace)
        .with_context(|| format!("cannot replay {}", a.trace.display()))?;
    if w.is_empty() {
        bail!(
            "{}: no host-to-device transfers, so nothing to look up",
            a.trace.display()
        );
    }
    if a.plot.is_some() && a.capacity.is_empty() {
        bail!("--plot needs --capacity");
    }
    let bw = Bandwidth::choose(a.pcie_gbps, &totals);
    let results = if a.capacity.is_empty() {
        Vec::new()
    } else {
        let cfg = SimConfig {
            policies: a.policy.clone(),
            capacities: a.capacity.clone(),
            hybrid_pinned: a.hybrid_pinned,
            threads: a.threads,
        };
        let start = std::time::Instant::now();
        let r = sim::simulate(&w, &cfg)?;
        tracing::info!(
            runs = r.len(),
            lookups = w.len(),
            elapsed_s = start.elapsed().as_secs_f64(),
            "simulated"
        );
        r
    };
    if let Some(dir) = &a.plot {
        for p in plot::write(&w, &results, dir)? {
            eprintln!("wrote {}", p.display());
        }
    }
    let rec = a.recommend.map(|b| report::recommend(&trace, &w, b));
    let source = a.trace.display().to_string();
    if a.json {
        let rows = report::json_rows(&results, &bw, &totals);
        let doc = match &rec {
            None => serde_json::to_string_pretty(&rows)?,
            Some(recommend) => {
                #[derive(serde::Serialize)]
                struct Doc<'a> {
                    results: Vec<report::JsonRow<'a>>,
                    recommend: &'a report::Recommendation,
                }
                serde_json::to_string_pretty(&Doc {
                    results: rows,
                    recommend,
                })?
            }
        };
        println!("{doc}");
    } else {
        if !results.is_empty() {
            print!("{}", report::text(&source, &w, &totals, &bw, &results));
        }
        if let Some(r) = &rec {
            if !results.is_empty() {
                println!();
            }
            print!("{}", report::recommendation_text(r));
        }
    }
    Ok(())
}
