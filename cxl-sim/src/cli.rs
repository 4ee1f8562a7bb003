//! The `bpftime-super cxl` command line: `run`, `sweep`, `place`, `presets`.
//!
//! `run` writes the tier's parameters into the delay probe's object and runs
//! `bpftime-super trace OBJ --json -- CMD`; from trace's JSON it takes the kernel names,
//! what could not be instrumented ("not emulated") and, at exit, the probe's maps: the
//! tier's counters and each kernel's time from its entry/exit probes. `sweep` repeats that
//! per setting, with a progress bar, and writes a CSV and plots. `calibrate` measures the
//! probe's own cost on a pointer chase ([`cxl_sim::calibrate`]), which `run` and `sweep`
//! then take off every wait.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use cxl_sim::abi::{self, CxlConfig, CxlKernel, STATS};
use cxl_sim::calibrate::{self, Calibration};
use cxl_sim::model::{Params, WaitMode};
use cxl_sim::placement::{Alloc, Policy};
use cxl_sim::{plot, presets};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `bpftime-super cxl`: emulate a CXL.mem tier under a CUDA application's kernels.
#[derive(Parser, Debug)]
#[command(name = "bpftime-super cxl", version)]
pub struct Cli {
    /// More logging (-v, -vv).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run CMD with the tier emulated; print kernel times and the tier's counters.
    Run {
        #[command(flatten)]
        tier: TierArgs,
        /// Change parameters while CMD runs: `2s:latency-ns=800`, `500ms:bandwidth-gbps=16,
        /// queue-k=2` (repeatable; each applies on top of the last). Kernels running then
        /// see it within the shim's 200 µs poll (the queueing term at the next 65.5 µs
        /// bandwidth window).
        #[arg(long = "at", value_name = "WHEN:NAME=VALUE[,…]")]
        changes: Vec<cxl_sim::live::Change>,
        /// One JSON object on stdout at the end instead of the table.
        #[arg(long)]
        json: bool,
        /// The command, after `--`.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Run CMD once per setting (latency × bandwidth) and write results.csv and plots.
    Sweep {
        #[command(flatten)]
        tier: TierArgs,
        /// Added random latencies, ns (`0,100,200,400,800`).
        #[arg(long, value_delimiter = ',', default_value = "0,100,200,400,800")]
        latency: Vec<f64>,
        /// Bandwidth caps, GB/s (`none` for no cap).
        #[arg(long, value_delimiter = ',', default_value = "none")]
        bandwidth: Vec<String>,
        /// Where results.csv and the PNGs go.
        #[arg(long, default_value = "cxl-sweep")]
        out: PathBuf,
        /// The command, after `--`.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Measure the probe's own cost on a chain of dependent loads and write it to the
    /// calibration file; `run` and `sweep` then take it off every wait. CMD: a pointer
    /// chase (`cxl-sim/examples/chase.cu`), run 2 × RUNS + 1 times.
    Calibrate {
        /// Δt of the delayed runs, ns (longer than the probe's cost).
        #[arg(long, default_value_t = 1000)]
        latency_ns: u64,
        /// Runs at Δt = 0 and at Δt = LATENCY_NS each, alternating (medians are taken).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where to write it (default: ~/.config/bpftime-super/cxl-calibration.json, under
        /// $XDG_CONFIG_HOME when set).
        #[arg(long)]
        calibration: Option<PathBuf>,
        /// The bpftime-super binary (default: next to this one, else on PATH).
        #[arg(long)]
        bpftime: Option<PathBuf>,
        /// A probe object other than the embedded one (to measure a variant; its
        /// calibration goes to --calibration, never to the default file).
        #[arg(long, hide = true)]
        object: Option<PathBuf>,
        /// Print the calibration as JSON.
        #[arg(long)]
        json: bool,
        /// The command, after `--`.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Show the placement a policy chooses for the allocations of a `trace --api-log` file.
    Place {
        /// The policy (`all`, `size>=64MB`, `site=TEXT`, `local=4GB`, `interleave=1:3@4KB`).
        #[arg(long)]
        placement: Policy,
        /// The API log (`bpftime-super trace --api-log FILE -- CMD`).
        api_log: PathBuf,
        /// JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Load a program into a running service (CPU or CUDA backend) with some of its maps in
    /// the emulated tier: every helper access to them waits the tier's random latency and,
    /// with a cap, its bytes through the link. Runs `bpftime-super load … --map-placement
    /// MAP=cxl:LATENCY_NS[:GBPS]`.
    Load {
        #[command(flatten)]
        tier: TierParams,
        /// A map to place in the tier (repeat for more).
        #[arg(long = "map", required = true)]
        maps: Vec<String>,
        /// The program's object, then any other `bpftime-super load` arguments
        /// (`--name SERVICE`, `--prog`, `--as`, `--json`).
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
        load: Vec<String>,
    },
    /// List the presets.
    Presets {
        /// JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The tier's parameters, a preset then overrides, and the probe's options (`run`,
/// `sweep`).
#[derive(Args, Debug, Clone)]
struct TierArgs {
    #[command(flatten)]
    tier: TierParams,
    /// Which memory is the tier's: `all`, `size>=64MB`, `local=4GB` (local capacity first),
    /// `interleave=1:3@4KB`, `site=FUNCTION` (what the executable's FUNCTION allocates,
    /// however deep); host probes on the driver's allocator place each allocation as it
    /// is made.
    #[arg(long, default_value = "all")]
    placement: Policy,
    /// Compute every delay, never wait (the emulator's own cost; with one fixed latency,
    /// no cache, no cap and no statistics there is nothing to compute, and the probe
    /// returns after its range check).
    #[arg(long)]
    count_only: bool,
    /// Do not time kernels with entry/exit probes (they cost a call per thread at entry
    /// and exit); `run` then prints no kernel times and `sweep` cannot run.
    #[arg(long)]
    no_kernel_time: bool,
    /// Keep no counters (requests by class, bytes, delay): one atomic fewer per counter
    /// and request. Kernel times are still measured.
    #[arg(long)]
    no_stats: bool,
    /// A probe object built from bpf/cxl.bpf.c other than the embedded one (to measure a
    /// variant of the probe).
    #[arg(long, hide = true)]
    object: Option<PathBuf>,
    /// ns the probe takes off every wait: its own cost on a dependent load (default: what
    /// `cxl calibrate` measured on this machine's GPU, else 0).
    #[arg(long)]
    compensate_ns: Option<u64>,
    /// The calibration file `cxl calibrate` writes.
    #[arg(long, default_value_os_t = calibrate::default_path())]
    calibration: PathBuf,
}

impl TierArgs {
    fn params(&self) -> Result<Params> {
        self.tier.params()
    }

    /// These arguments with the compensation decided (`--compensate-ns`, else the
    /// calibration file's for this GPU, else 0), and a line that says where it came from.
    fn resolved(&self, p: &Params) -> Result<(TierArgs, String)> {
        let mut t = self.clone();
        let (n, why) = match self.compensate_ns {
            Some(n) => (n, "--compensate-ns".to_string()),
            // `cxl calibrate` measures the spin; a sleep's own cost is another.
            None if p.wait != WaitMode::Spin => (
                0,
                "the calibration is for --wait spin; --compensate-ns sets one by hand".to_string(),
            ),
            None => {
                let path = &self.calibration;
                match Calibration::load(path)
                    .with_context(|| format!("calibration file {}", path.display()))?
                {
                    None => (
                        0,
                        "not calibrated: `bpftime-super cxl calibrate -- CHASE` measures it"
                            .to_string(),
                    ),
                    Some(c) => {
                        let gpu = gpu_name();
                        match c.for_gpu(gpu.as_deref()) {
                            Some(n) => (n, format!("calibrated in {}", path.display())),
                            None => (
                                0,
                                format!(
                                    "{} was calibrated on {}, this is {}: calibrate again",
                                    path.display(),
                                    c.gpu.as_deref().unwrap_or("?"),
                                    gpu.as_deref().unwrap_or("?")
                                ),
                            ),
                        }
                    }
                }
            }
        };
        if n > calibrate::MAX_COMPENSATION_NS {
            bail!(
                "compensation {n} ns is out of range: expected at most {} ns",
                calibrate::MAX_COMPENSATION_NS
            );
        }
        t.compensate_ns = Some(n);
        Ok((t, format!("probe compensation {n} ns ({why})")))
    }
}

/// The GPU CUDA will use first, as `nvidia-smi` names it (the first of
/// `CUDA_VISIBLE_DEVICES` when that names one by index or UUID, else GPU 0), if it can say.
fn gpu_name() -> Option<String> {
    let mut cmd = Command::new("nvidia-smi");
    cmd.args(["--query-gpu=name", "--format=csv,noheader"]);
    if let Some(first) = std::env::var("CUDA_VISIBLE_DEVICES")
        .ok()
        .and_then(|v| v.split(',').next().map(|s| s.trim().to_string()))
        .filter(|s| s.parse::<u32>().is_ok() || s.starts_with("GPU-"))
    {
        cmd.args(["-i", &first]);
    }
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    let name = s.lines().next()?.trim();
    (out.status.success() && !name.is_empty()).then(|| name.to_string())
}

/// The tier's parameters: a preset, then overrides.
#[derive(Args, Debug, Clone)]
struct TierParams {
    /// Start from a preset (`bpftime-super cxl presets`).
    #[arg(long)]
    preset: Option<String>,
    /// Added latency of a random access, ns.
    #[arg(long, allow_negative_numbers = true)]
    latency_ns: Option<f64>,
    /// The tier's bandwidth cap, GB/s.
    #[arg(long, allow_negative_numbers = true)]
    bandwidth_gbps: Option<f64>,
    /// No bandwidth cap (overrides the preset's).
    #[arg(long, conflicts_with = "bandwidth_gbps")]
    no_cap: bool,
    /// Random accesses pay this many times what sequential ones pay.
    #[arg(long, allow_negative_numbers = true)]
    seq_ratio: Option<f64>,
    /// Strided accesses pay this fraction of the random latency.
    #[arg(long, allow_negative_numbers = true)]
    strided_fraction: Option<f64>,
    /// Queueing coefficient (0: no queueing term).
    #[arg(long, allow_negative_numbers = true)]
    queue_k: Option<f64>,
    /// MiB of the emulated GPU cache in front of the tier (0: every access reaches it;
    /// default: the preset's, else 64, about an H100's 50 MB L2).
    #[arg(long)]
    cache_mib: Option<u64>,
    /// Bytes that pass the cap at once after idle.
    #[arg(long)]
    burst_bytes: Option<u64>,
    /// How the GPU waits.
    #[arg(long, value_enum)]
    wait: Option<WaitMode>,
    /// The bpftime-super binary (default: next to this one, else on PATH).
    #[arg(long)]
    bpftime: Option<PathBuf>,
}

impl TierParams {
    fn params(&self) -> Result<Params> {
        let mut p = match &self.preset {
            Some(n) => {
                presets::by_name(n)
                    .with_context(|| {
                        let names: Vec<&str> = presets::all().iter().map(|p| p.name).collect();
                        format!("no preset `{n}`: the presets are {}", names.join(", "))
                    })?
                    .params
            }
            None => Params {
                cache_mib: 64,
                ..Params::default()
            },
        };
        if let Some(v) = self.cache_mib {
            p.cache_mib = v;
        }
        if let Some(v) = self.latency_ns {
            p.latency_ns = v;
        }
        if let Some(v) = self.bandwidth_gbps {
            p.bandwidth_gbps = Some(v);
        }
        if self.no_cap {
            p.bandwidth_gbps = None;
        }
        if let Some(v) = self.seq_ratio {
            p.seq_ratio = v;
        }
        if let Some(v) = self.strided_fraction {
            p.strided_fraction = v;
        }
        if let Some(v) = self.queue_k {
            p.queue_k = v;
        }
        if let Some(v) = self.burst_bytes {
            p.burst_bytes = v;
        }
        if let Some(v) = self.wait {
            p.wait = v;
        }
        p.validate()?;
        Ok(p)
    }
}

/// What one run measured.
#[derive(Debug, Default, serde::Serialize)]
struct RunOut {
    params: Option<Params>,
    /// ns the probe took off every wait.
    compensation_ns: u64,
    exit_code: i32,
    /// Kernel name → (launches, ns).
    kernels: BTreeMap<String, (u64, u64)>,
    stats: BTreeMap<String, u64>,
    not_emulated: Vec<String>,
    /// The policy, and what the allocator's host probes put in the tier.
    placement: String,
    placed: Vec<Placed>,
    /// Allocations the policy chose that found every range slot in use.
    placement_dropped: u64,
    /// `--at` changes made, with when the region was written (`CLOCK_REALTIME`).
    changes: Vec<AppliedChange>,
}

/// One `--at` change, as made.
#[derive(Debug, serde::Serialize)]
struct AppliedChange {
    after_ms: f64,
    written_unix_ns: u64,
    change: String,
}

/// One allocation the host probes put in the tier.
#[derive(Debug, serde::Serialize)]
struct Placed {
    address: u64,
    bytes: u64,
    /// `L:C@page` for an interleaved allocation.
    #[serde(skip_serializing_if = "Option::is_none")]
    interleave: Option<String>,
}

/// Runs the command line.
pub fn run(cli: Cli) -> Result<std::process::ExitCode> {
    match cli.cmd {
        Cmd::Presets { json } => {
            if json {
                let v: Vec<_> = presets::all()
                    .into_iter()
                    .map(
                        |p| serde_json::json!({"name": p.name, "what": p.what, "params": p.params}),
                    )
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                for p in presets::all() {
                    println!("{:<10} {}", p.name, p.what);
                }
            }
            Ok(std::process::ExitCode::SUCCESS)
        }
        Cmd::Place {
            placement,
            api_log,
            json,
        } => {
            let allocs = allocs_from_log(&api_log)?;
            let pl = placement.place(&allocs);
            if json {
                println!("{}", serde_json::to_string_pretty(&pl)?);
            } else {
                print!("{}", pl.table(&allocs));
                println!(
                    "{} of {} allocations in the tier, {} bytes",
                    pl.matched(),
                    allocs.len(),
                    pl.cxl_bytes(&allocs)
                );
            }
            if pl.matched() == 0 {
                eprintln!(
                    "warning: placement {placement:?} matches no allocation of {}",
                    api_log.display()
                );
            }
            for i in &pl.overflow {
                eprintln!(
                    "warning: allocation at {:#x} stays local: the probe holds {} ranges",
                    allocs[*i].addr,
                    cxl_sim::abi::MAX_RANGES
                );
            }
            Ok(std::process::ExitCode::SUCCESS)
        }
        Cmd::Load { tier, maps, load } => {
            let p = tier.params()?;
            let spec = match p.bandwidth_gbps {
                Some(g) => format!("cxl:{}:{g}", p.latency_ns.round() as u64),
                None => format!("cxl:{}", p.latency_ns.round() as u64),
            };
            let bin = bpftime_binary(tier.bpftime.as_deref())?;
            let mut cmd = Command::new(&bin);
            cmd.arg("load").args(&load);
            for m in &maps {
                cmd.arg("--map-placement").arg(format!("{m}={spec}"));
            }
            let status = cmd
                .status()
                .with_context(|| format!("cannot start {} load", bin.display()))?;
            Ok(std::process::ExitCode::from(
                status.code().unwrap_or(1).clamp(0, 255) as u8,
            ))
        }
        Cmd::Run {
            tier,
            json,
            cmd,
            changes,
        } => {
            let p = tier.params()?;
            let (tier, why) = tier.resolved(&p)?;
            if json {
                eprintln!("{why}");
            } else {
                println!("{why}");
            }
            let out = run_once_with(&tier, &p, &cmd, !json, &changes, true)?;
            if json {
                println!("{}", serde_json::to_string(&out)?);
            } else {
                print_run(&out);
            }
            Ok(std::process::ExitCode::from(
                out.exit_code.clamp(0, 255) as u8
            ))
        }
        Cmd::Sweep {
            tier,
            latency,
            bandwidth,
            out,
            cmd,
        } => {
            let (tier, why) = tier.resolved(&tier.params()?)?;
            eprintln!("{why}");
            sweep(&tier, &latency, &bandwidth, &out, &cmd)
        }
        Cmd::Calibrate {
            latency_ns,
            runs,
            calibration,
            bpftime,
            object,
            json,
            cmd,
        } => {
            let calibration = match (calibration, &object) {
                (Some(f), _) => f,
                (None, None) => calibrate::default_path(),
                (None, Some(_)) => bail!(
                    "--object: a variant's calibration needs its own file (--calibration FILE)"
                ),
            };
            let c = calibrate_on(latency_ns, runs, bpftime, object, &cmd)?;
            c.save(&calibration)
                .with_context(|| format!("write {}", calibration.display()))?;
            if json {
                println!("{}", serde_json::to_string(&c)?);
            } else {
                println!(
                    "the probe's own cost: {} ns a load ({:.1} measured; {} requests in the tier, {:.1} ns a \
                     load at Δt 0, {:.1} at Δt {}; medians of {} runs each)",
                    c.compensation_ns,
                    c.measured_ns,
                    c.loads,
                    c.zero_ns_per_load,
                    c.delayed_ns_per_load,
                    c.latency_ns,
                    c.runs
                );
                println!(
                    "written to {}: `cxl run` and `cxl sweep` take it off every wait \
                     (--compensate-ns 0: not)",
                    calibration.display()
                );
            }
            Ok(std::process::ExitCode::SUCCESS)
        }
    }
}

/// `cxl calibrate`: CMD at Δt = 0 and at Δt = `latency_ns` (one latency for every class,
/// no cache, no cap, no statistics, no compensation), alternating, then once counting the
/// tier's loads.
fn calibrate_on(
    latency_ns: u64,
    runs: usize,
    bpftime: Option<PathBuf>,
    object: Option<PathBuf>,
    cmd: &[String],
) -> Result<Calibration> {
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    let tier = |latency: u64, stats: bool| TierArgs {
        tier: TierParams {
            preset: None,
            latency_ns: Some(latency as f64),
            bandwidth_gbps: None,
            no_cap: true,
            seq_ratio: Some(1.0),
            strided_fraction: Some(1.0),
            queue_k: Some(0.0),
            cache_mib: Some(0),
            burst_bytes: None,
            wait: None,
            bpftime: bpftime.clone(),
        },
        placement: Policy::All,
        count_only: stats,
        no_kernel_time: stats,
        no_stats: !stats,
        object: object.clone(),
        compensate_ns: Some(0),
        calibration: PathBuf::new(),
    };
    let (zero, delayed, count) = (
        tier(0, false),
        tier(latency_ns, false),
        tier(latency_ns, true),
    );
    let bar = indicatif::ProgressBar::new(2 * runs as u64 + 1);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .expect("a valid template"),
    );
    let once = |t: &TierArgs, what: &str| -> Result<RunOut> {
        bar.set_message(what.to_string());
        let o = run_once(t, &t.params()?, cmd, false)?;
        bar.inc(1);
        if o.exit_code != 0 {
            bail!("{} exited with {} ({what})", cmd.join(" "), o.exit_code);
        }
        Ok(o)
    };
    let total = |o: &RunOut| o.kernels.values().map(|k| k.1).sum::<u64>();
    let (mut t0, mut td) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        t0.push(total(&once(&zero, "Δt 0")?));
        td.push(total(&once(&delayed, &format!("Δt {latency_ns}"))?));
    }
    let o = once(&count, "counting the loads")?;
    bar.finish_and_clear();
    let g = |k: &str| o.stats.get(k).copied().unwrap_or(0);
    let loads = g("sequential") + g("strided") + g("random");
    let mut c = Calibration::from_times(latency_ns, loads, &t0, &td)?;
    c.gpu = gpu_name();
    c.command = cmd.to_vec();
    c.unix_time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(c)
}

fn bpftime_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    let exe = std::env::current_exe().context("cannot locate this executable")?;
    let beside = exe.with_file_name("bpftime-super");
    if beside.is_file() {
        return Ok(beside);
    }
    Ok(PathBuf::from("bpftime-super"))
}

/// The file name the process of `cmd` will have as its executable: `cmd` found on `PATH`
/// when it has no `/`, with symbolic links resolved (`python3` is `python3.11`), as the
/// shim compares it with `/proc/self/exe`. `cmd`'s own file name when it is not found.
fn executable_name(cmd: &str) -> String {
    let path = std::path::Path::new(cmd);
    let found = if cmd.contains('/') {
        Some(path.to_path_buf())
    } else {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(cmd))
                .find(|c| c.is_file())
        })
    };
    found
        .and_then(|f| std::fs::canonicalize(f).ok())
        .as_deref()
        .unwrap_or(path)
        .file_name()
        .map_or_else(|| cmd.to_string(), |f| f.to_string_lossy().into_owned())
}

/// One run of CMD under trace with the configured probe, for a sweep: the probe inlined
/// whole at every setting, the baseline's included, so that every setting's time is
/// divided by one with the same probe code (a split probe at the baseline alone would put
/// the inlined probe's own cost into each slowdown).
fn run_once(tier: &TierArgs, p: &Params, cmd: &[String], echo: bool) -> Result<RunOut> {
    run_once_with(tier, p, cmd, echo, &[], false)
}

/// The configuration the probe gets for `p` under `tier`'s placement and flags.
fn probe_config(tier: &TierArgs, p: &Params) -> Result<CxlConfig> {
    let mut config = p.config(tier.placement == Policy::All)?;
    config.place_kind = match &tier.placement {
        Policy::All => abi::PLACE_NONE,
        Policy::SizeAtLeast(n) => {
            config.place_arg = *n;
            abi::PLACE_SIZE
        }
        Policy::LocalFirst(n) => {
            config.place_arg = *n;
            abi::PLACE_LOCAL
        }
        Policy::Interleave {
            local,
            cxl,
            page_shift,
        } => {
            config.place_interleave =
                *local as u64 | (*cxl as u64) << 16 | (*page_shift as u64) << 32;
            abi::PLACE_INTERLEAVE
        }
        // On a running application the site is a function of its executable, by name:
        // allocations made while it runs (`place` on an API log matches text in the call
        // site's name instead).
        Policy::Site(_) => abi::PLACE_SITE,
    };
    if tier.count_only {
        config.flags |= cxl_sim::abi::FLAG_NO_WAIT;
    }
    if tier.no_stats {
        config.flags &= !cxl_sim::abi::FLAG_STATS;
    }
    config.compensation = tier.compensate_ns.unwrap_or(0);
    Ok(config)
}

/// A run's configurations: the one CMD starts with, then one per `--at` change (when,
/// configuration, what changed), each change applied on top of the last and checked
/// before CMD starts. Running kernels refresh their copy of the configuration only when
/// it will change (the check costs the probe's path: `abi::FLAG_REFRESH`).
type Plan = Vec<(std::time::Duration, CxlConfig, String)>;
fn run_plan(
    tier: &TierArgs,
    p: &Params,
    changes: &[cxl_sim::live::Change],
) -> Result<(CxlConfig, Plan)> {
    let live = |mut c: CxlConfig| {
        if !changes.is_empty() {
            c.flags |= cxl_sim::abi::FLAG_REFRESH;
        }
        c
    };
    let config = live(probe_config(tier, p)?);
    let mut plan = Vec::new();
    let mut q = p.clone();
    for c in changes {
        q = c.apply(&q).map_err(anyhow::Error::msg)?;
        plan.push((c.after, live(probe_config(tier, &q)?), format!("{c:?}")));
    }
    Ok((config, plan))
}

/// One run of CMD under trace, changing parameters at the given times. With `may_split`,
/// a configuration that delays and counts nothing gets the split probe (`--cold-split`).
fn run_once_with(
    tier: &TierArgs,
    p: &Params,
    cmd: &[String],
    echo: bool,
    changes: &[cxl_sim::live::Change],
    may_split: bool,
) -> Result<RunOut> {
    let (config, plan) = run_plan(tier, p, changes)?;
    // The probe objects for this run; removed when `scratch` drops, on every exit path.
    let scratch = tempfile::Builder::new()
        .prefix("bpftime-cxl-")
        .tempdir()
        .context("create a directory for the probe objects in the temp dir")?;
    let dir = scratch.path();
    let obj = dir.join("cxl.bpf.o");
    let base = match &tier.object {
        Some(p) => std::fs::read(p).with_context(|| format!("--object {}", p.display()))?,
        None => cxl_sim::probe::OBJECT.to_vec(),
    };
    let mut bytes = cxl_sim::probe::patch(&base, &config)?;
    if let Policy::Site(func) = &tier.placement {
        let first = cmd
            .first()
            .context("--placement site=FUNCTION needs the command to run")?;
        bytes = cxl_sim::probe::with_site(&bytes, &executable_name(first), func)?;
    }
    std::fs::write(&obj, bytes).with_context(|| format!("write {}", obj.display()))?;
    let mut objects = vec![obj];
    if !tier.no_kernel_time {
        let t = dir.join("cxl_time.bpf.o");
        std::fs::write(&t, cxl_sim::probe::TIME_OBJECT)
            .with_context(|| format!("write {}", t.display()))?;
        objects.push(t);
    }
    let bin = bpftime_binary(tier.tier.bpftime.as_deref())?;
    // Without statistics the probe's counters are never added to: summing them in
    // registers through the kernel's loops (trace's default for memory probes) would only
    // cost registers, hence occupancy, on every path.
    let eager: &[&str] = if tier.no_stats { &["--mem-eager"] } else { &[] };
    // A configuration that delays nothing and counts nothing (and will not change) never
    // takes the probe past its first test: split the probe, so that each kernel keeps its
    // own registers, and the emulator costs little more than that test (run 22 of
    // bench/results/cxl_gpu.md). A probe that works keeps the faster inlined path.
    let split: &[&str] = if may_split && config.probe_flags() & cxl_sim::abi::FLAG_ACTIVE == 0 {
        &["--cold-split"]
    } else {
        &[]
    };
    let mut child = Command::new(&bin)
        .arg("trace")
        .args(&objects)
        .args(eager)
        .args(split)
        .args(["--json", "--quiet", "--interval", "0", "--"])
        .args(cmd)
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {} trace", bin.display()))?;
    let started = std::time::Instant::now();
    let pid = child.id();
    let changer = std::thread::spawn(move || {
        let mut done = Vec::new();
        for (after, config, what) in plan {
            if let Some(d) = after.checked_sub(started.elapsed()) {
                std::thread::sleep(d);
            }
            match cxl_sim::live::set_params(pid, &config) {
                Ok(t) => done.push(AppliedChange {
                    after_ms: after.as_secs_f64() * 1e3,
                    written_unix_ns: t,
                    change: what,
                }),
                Err(e) => eprintln!("warning: --at {what}: {e}"),
            }
        }
        done
    });
    let mut out = RunOut {
        params: Some(p.clone()),
        compensation_ns: config.compensation,
        placement: policy_text(&tier.placement),
        ..Default::default()
    };
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    let mut kernels_raw: Vec<(usize, CxlKernel)> = Vec::new();
    let mut ends = vec![0u64; cxl_sim::abi::KERNEL_SLOTS];
    let stdout = child.stdout.take().context("trace's stdout")?;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("read trace's output")?;
        let Some(v) = line
            .starts_with('{')
            .then(|| serde_json::from_str::<serde_json::Value>(&line).ok())
            .flatten()
            .filter(|v| v.get("event").is_some())
        else {
            // The application's own output (to stderr when stdout is for our JSON).
            if echo {
                println!("{line}");
            } else {
                eprintln!("{line}");
            }
            continue;
        };
        match v["event"].as_str().unwrap_or("") {
            "attach" => {
                if let (Some(id), Some(d)) = (v["kernel_id"].as_u64(), v["demangled"].as_str()) {
                    let base = d.split_once('(').map(|(b, _)| b).unwrap_or(d);
                    names.insert(id, base.to_string());
                }
            }
            "warning" => {
                let what = v["what"].as_str().unwrap_or("").to_string();
                if !what.contains("matched no kernel") {
                    out.not_emulated.push(what);
                }
            }
            "module" if v["instrumented"] == false => {
                out.not_emulated
                    .push(format!("module left unchanged: {}", v));
            }
            "map" if v["final"] == true => {
                let map = v["map"].as_str().unwrap_or("");
                let entries = v["entries"].as_array().cloned().unwrap_or_default();
                for (i, e) in entries.iter().enumerate() {
                    let val = e
                        .get(1)
                        .and_then(|x| x.as_str())
                        .map(hex)
                        .unwrap_or_default();
                    if map.ends_with("cxl_stats") && i < STATS.len() && val.len() >= 8 {
                        out.stats.insert(
                            STATS[i].to_string(),
                            u64::from_le_bytes(val[..8].try_into().expect("8 bytes")),
                        );
                    } else if map.ends_with("cxl_kernels")
                        && let Some(k) = CxlKernel::from_bytes(&val)
                        && k.launches > 0
                    {
                        kernels_raw.push((i, k));
                    } else if map.ends_with("cxl_config")
                        && let Some(c) = CxlConfig::from_bytes(&val)
                    {
                        out.placement_dropped = c.place_dropped;
                        let n = (c.nranges as usize).min(abi::MAX_RANGES);
                        out.placed = c.ranges[..n]
                            .iter()
                            .filter(|r| r.base != 0)
                            .map(|r| Placed {
                                address: r.base,
                                bytes: r.len,
                                interleave: (r.interleave_cxl > 0).then(|| {
                                    format!(
                                        "{}:{}@{}",
                                        r.interleave_local,
                                        r.interleave_cxl,
                                        1u64 << r.page_shift
                                    )
                                }),
                            })
                            .collect();
                    } else if map.ends_with("cxl_kernel_end") && val.len() >= 8 {
                        let slot = i / cxl_sim::abi::END_STRIPES;
                        let t = u64::from_le_bytes(val[..8].try_into().expect("8 bytes"));
                        if let Some(e) = ends.get_mut(slot) {
                            *e = (*e).max(t);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let status = child.wait().context("wait for trace")?;
    out.exit_code = status.code().unwrap_or(1);
    out.changes = changer.join().unwrap_or_default();
    for (slot, k) in kernels_raw {
        let name = names
            .get(&k.kernel_id)
            .cloned()
            .unwrap_or_else(|| format!("{:#018x}", k.kernel_id));
        let e = out.kernels.entry(name).or_default();
        e.0 += k.launches;
        e.1 += k.time_ns(ends.get(slot).copied().unwrap_or(0));
    }
    Ok(out)
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .filter_map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok())
        .collect()
}

fn print_run(o: &RunOut) {
    if let Some(p) = &o.params {
        let [s, t, r] = p.latencies();
        println!(
            "tier: +{r} ns random, +{t} ns strided, +{s} ns sequential, {}",
            p.bandwidth_gbps
                .map_or("no bandwidth cap".to_string(), |b| format!("{b} GB/s cap"))
        );
    }
    println!("{:<40} {:>9} {:>14}", "kernel", "launches", "time (ms)");
    for (k, (n, ns)) in &o.kernels {
        println!("{k:<40} {n:>9} {:>14.3}", *ns as f64 / 1e6);
    }
    let g = |k: &str| o.stats.get(k).copied().unwrap_or(0);
    let acc = g("sequential") + g("strided") + g("random");
    println!(
        "tier accesses (warp requests): {acc}, {} bytes; sequential {}, strided {}, random {}; {} hit the emulated cache",
        g("bytes"),
        g("sequential"),
        g("strided"),
        g("random"),
        g("cached")
    );
    if acc > 0 {
        println!(
            "mean added delay {:.1} ns (computed), {:.1} ns (waited)",
            g("delay_ns") as f64 / acc as f64,
            g("waited_ns") as f64 / acc as f64
        );
    }
    for c in &o.changes {
        println!("changed at {:.1} ms: {}", c.after_ms, c.change);
    }
    if o.placement != "all" {
        println!(
            "placement {}: {} allocations in the tier{}",
            o.placement,
            o.placed.len(),
            if o.placement_dropped > 0 {
                format!(", {} more found no free range slot", o.placement_dropped)
            } else {
                String::new()
            }
        );
        for p in &o.placed {
            println!(
                "  {:#x} {} bytes{}{}",
                p.address,
                p.bytes,
                p.interleave.as_deref().map_or("", |_| " interleaved "),
                p.interleave.as_deref().unwrap_or("")
            );
        }
        if o.placed.is_empty() {
            println!("warning: placement {} matched no allocation", o.placement);
        }
    }
    for w in &o.not_emulated {
        println!("not emulated: {w}");
    }
}

/// A policy as the command line writes it.
fn policy_text(p: &Policy) -> String {
    match p {
        Policy::All => "all".into(),
        Policy::SizeAtLeast(n) => format!("size>={n}"),
        Policy::Site(t) => format!("site={t}"),
        Policy::LocalFirst(n) => format!("local={n}"),
        Policy::Interleave {
            local,
            cxl,
            page_shift,
        } => format!("interleave={local}:{cxl}@{}", 1u64 << page_shift),
    }
}

fn sweep(
    tier: &TierArgs,
    lat: &[f64],
    bw: &[String],
    out: &Path,
    cmd: &[String],
) -> Result<std::process::ExitCode> {
    let base = tier.params()?;
    if tier.no_kernel_time {
        bail!("sweep compares kernel times: it cannot run with --no-kernel-time");
    }
    let mut caps: Vec<Option<f64>> = Vec::new();
    for b in bw {
        caps.push(if b == "none" {
            None
        } else {
            Some(
                b.parse()
                    .with_context(|| format!("--bandwidth {b}: a number of GB/s or `none`"))?,
            )
        });
    }
    // Every setting first, so a bad one fails before anything runs.
    let mut settings = Vec::new();
    for &c in &caps {
        for &l in lat {
            let p = Params {
                latency_ns: l,
                bandwidth_gbps: c,
                ..base.clone()
            };
            p.validate()?;
            settings.push(p);
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    // The baseline: the emulator with nothing to add.
    let zero = Params {
        latency_ns: 0.0,
        bandwidth_gbps: None,
        ..base.clone()
    };
    let bar = indicatif::ProgressBar::new(settings.len() as u64 + 1);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("template"),
    );
    bar.set_message("baseline");
    let b = run_once(tier, &zero, cmd, false)?;
    if b.exit_code != 0 {
        bail!(
            "the baseline run of `{}` exited with {}",
            cmd.join(" "),
            b.exit_code
        );
    }
    let mut rows = Vec::new();
    let mut csv = String::from(
        "latency_ns,bandwidth_gbps,kernel,launches,time_ns,baseline_ns,slowdown,compensation_ns\n",
    );
    for p in &settings {
        bar.inc(1);
        bar.set_message(format!(
            "latency {} ns, {}",
            p.latency_ns,
            p.bandwidth_gbps
                .map_or("no cap".into(), |b| format!("{b} GB/s"))
        ));
        let r = run_once(tier, p, cmd, false)?;
        if r.exit_code != 0 {
            bail!(
                "`{}` exited with {} at latency {} ns",
                cmd.join(" "),
                r.exit_code,
                p.latency_ns
            );
        }
        for (k, (n, ns)) in &r.kernels {
            let b0 = b.kernels.get(k).map_or(0, |x| x.1);
            let s = if b0 > 0 {
                *ns as f64 / b0 as f64
            } else {
                f64::NAN
            };
            csv += &format!(
                "{},{},{k},{n},{ns},{b0},{s:.4},{}\n",
                p.latency_ns,
                p.bandwidth_gbps.map_or(String::new(), |x| x.to_string()),
                r.compensation_ns
            );
            rows.push(plot::Row {
                latency_ns: p.latency_ns,
                bandwidth_gbps: p.bandwidth_gbps,
                kernel: k.clone(),
                slowdown: s,
            });
        }
    }
    bar.finish_and_clear();
    let path = out.join("results.csv");
    std::fs::write(&path, &csv).with_context(|| format!("write {}", path.display()))?;
    print!("{csv}");
    match plot::write(&rows, out) {
        Ok(files) => {
            for f in files {
                eprintln!("wrote {}", f.display());
            }
        }
        Err(e) => eprintln!("warning: no plots: {e}"),
    }
    let _ = std::io::stdout().flush();
    Ok(std::process::ExitCode::SUCCESS)
}

/// Device allocations (and their frees) from a `trace --api-log` file.
fn allocs_from_log(path: &Path) -> Result<Vec<Alloc>> {
    let log = attach::apilog::read(path).with_context(|| format!("read {}", path.display()))?;
    let mut allocs: Vec<Alloc> = Vec::new();
    use attach::apilog::Kind;
    for e in &log {
        match e.kind {
            Kind::Alloc if e.result == 0 => allocs.push(Alloc {
                time_ns: e.start_ns,
                addr: e.dst,
                bytes: e.bytes,
                site: String::new(),
                freed_ns: None,
            }),
            Kind::Free => {
                if let Some(a) = allocs
                    .iter_mut()
                    .rev()
                    .find(|a| a.addr == e.dst && a.freed_ns.is_none())
                {
                    a.freed_ns = Some(e.start_ns);
                }
            }
            _ => {}
        }
    }
    Ok(allocs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_executable_is_named_as_proc_self_exe_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("app.real");
        std::fs::write(&real, b"").unwrap();
        let link = dir.path().join("app");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(executable_name(&link.display().to_string()), "app.real");
        // On PATH: `sh` is found and its links resolved (to whatever file it is).
        let sh = executable_name("sh");
        let want = std::fs::canonicalize(
            std::env::split_paths(&std::env::var_os("PATH").unwrap())
                .map(|d| d.join("sh"))
                .find(|c| c.is_file())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(sh, want.file_name().unwrap().to_string_lossy());
        assert_eq!(
            executable_name("no-such-command-here"),
            "no-such-command-here"
        );
    }

    fn run_args(args: &[&str]) -> (TierArgs, Vec<cxl_sim::live::Change>) {
        let mut argv = vec!["bpftime-super-cxl", "run"];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&["--", "true"]);
        match Cli::try_parse_from(argv).unwrap().cmd {
            Cmd::Run { tier, changes, .. } => (tier, changes),
            other => panic!("not run: {other:?}"),
        }
    }

    /// The configuration refresh costs the probe's path, so it is on only in runs whose
    /// parameters change while the application runs, and then in every configuration.
    #[test]
    fn only_runs_with_changes_refresh_the_configuration() {
        let refresh = |c: &CxlConfig| c.flags & cxl_sim::abi::FLAG_REFRESH != 0;
        let (tier, changes) = run_args(&["--latency-ns", "100"]);
        let (config, plan) = run_plan(&tier, &tier.params().unwrap(), &changes).unwrap();
        assert!(!refresh(&config) && plan.is_empty());
        let (tier, changes) = run_args(&[
            "--latency-ns",
            "100",
            "--at",
            "1s:latency-ns=800",
            "--at",
            "2s:bandwidth-gbps=16",
        ]);
        let (config, plan) = run_plan(&tier, &tier.params().unwrap(), &changes).unwrap();
        assert!(refresh(&config));
        assert_eq!(plan.len(), 2);
        assert!(plan.iter().all(|(_, c, _)| refresh(c)));
        // Each change applies on top of the last: the second keeps the first's latency.
        assert_eq!(plan[0].0, std::time::Duration::from_secs(1));
        assert_eq!(plan[1].1.latency, plan[0].1.latency);
        assert_ne!(plan[0].1.latency, config.latency);
        assert_ne!(plan[1].1.byte_cost, plan[0].1.byte_cost);
    }
}
