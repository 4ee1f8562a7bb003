//! The service commands: `run --persistent` and the client commands that talk to it.

use super::hex;
use anyhow::{Context, Result, bail};
use host::client::{Client, Job};
use host::protocol::ProgramInfo;
use host::service::{BackendChoice, Service, ServiceConfig};
use shm_maps::RegionConfig;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Default service name.
pub const DEFAULT_NAME: &str = "bpftime-super";

/// Options every client command takes.
#[derive(clap::Args, Debug)]
pub struct CommonArgs {
    /// Service name (`/dev/shm/NAME`).
    #[arg(long, env = "BPFTIME_NAME", default_value = DEFAULT_NAME)]
    name: String,
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Run as a long-lived service (the only mode).
    #[arg(long)]
    persistent: bool,
    /// Backend: `auto` picks a GPU when one is usable, else the CPU.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendChoice,
    /// Service name (`/dev/shm/NAME`, socket `/dev/shm/NAME.sock`).
    #[arg(long, env = "BPFTIME_NAME", default_value = DEFAULT_NAME)]
    name: String,
    /// Worker threads of the CPU backend (default: cores - 1, at least 1).
    #[arg(long)]
    workers: Option<usize>,
    /// Permission bits of the region and socket, octal.
    #[arg(long, default_value = "600")]
    mode: String,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Adopt the region a crashed service left: its programs (same ids and versions),
    /// maps, client buffers and queued jobs come back; jobs it was running end with
    /// SERVICE_RESTARTED.
    #[arg(long)]
    recover: bool,
    /// Data arena size in MiB.
    #[arg(long, default_value_t = 1024)]
    arena_mib: u64,
    /// Job queue slots.
    #[arg(long, default_value_t = 4096)]
    queue_capacity: u32,
    /// Instruction budget per record; a record that exceeds it fails.
    #[arg(long, default_value_t = 10_000_000)]
    max_insns: u64,
    /// CPU engine: the native JIT (falls back to the interpreter with a warning when a
    /// program does not compile) or the interpreter.
    #[arg(long, default_value_t = jit::cpu::Engine::Jit, value_name = "interp|jit")]
    engine: jit::cpu::Engine,
    /// CUDA device ordinal (CUDA backend).
    #[arg(long, default_value_t = 0, conflicts_with = "devices")]
    device: i32,
    /// Several GPUs: `all`, or ordinals like `0,1`. One persistent kernel and one job
    /// queue per GPU; a job runs on the GPU it names (`Job::on_device`), else on the least
    /// loaded. Implies the CUDA backend.
    #[arg(long, value_name = "all|N,M,..")]
    devices: Option<String>,
    /// Device-resident buffer arena in MiB (CUDA backend).
    #[arg(long, default_value_t = 1280)]
    device_arena_mib: u64,
    /// Keep every program on the GPU interpreter (no native generations).
    #[arg(long)]
    no_native: bool,
    /// While the persistent kernel is stopped for a swap, leave every job in the queue for
    /// the next kernel (by default the service runs those the host can run exactly as the
    /// GPU would, so they do not wait for the new code's upload).
    #[arg(long)]
    no_host_gaps: bool,
    /// Testing: honour the INJECT_FAULT job flag, which kills the CUDA context.
    #[arg(long, hide = true)]
    allow_fault_injection: bool,
}

/// The ordinals `--devices` names (`all`: every GPU the driver reports); empty without it.
fn devices(arg: Option<&str>) -> Result<Vec<i32>> {
    let Some(arg) = arg else {
        return Ok(Vec::new());
    };
    let list: Vec<i32> = if arg == "all" {
        let n = device::cuda::Gpu::count();
        if n == 0 {
            bail!("--devices all: the CUDA driver reports no GPU on this machine");
        }
        (0..n).collect()
    } else {
        arg.split(',')
            .map(|d| {
                d.trim()
                    .parse::<i32>()
                    .ok()
                    .filter(|d| *d >= 0)
                    .with_context(|| format!("bad --devices `{arg}`: `{d}` is not a GPU ordinal"))
            })
            .collect::<Result<_>>()?
    };
    if list.is_empty() {
        bail!("--devices `{arg}` names no GPU");
    }
    Ok(list)
}

/// Runs `run --persistent`.
pub fn run(a: RunArgs) -> Result<ExitCode> {
    if !a.persistent {
        bail!(
            "`run` starts the long-lived service: pass --persistent (to run one program once, use `exec`)"
        );
    }
    let mode = u32::from_str_radix(a.mode.trim_start_matches("0o"), 8)
        .with_context(|| format!("bad --mode `{}`: expected octal like 600", a.mode))?;
    let workers = a.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get().saturating_sub(1).max(1))
            .unwrap_or(1)
    });
    let cfg = ServiceConfig {
        name: a.name.clone(),
        backend: a.backend,
        workers,
        mode,
        recover: a.recover,
        region: RegionConfig {
            arena_size: a.arena_mib << 20,
            queue_capacity: a.queue_capacity,
            ..RegionConfig::default()
        },
        metrics: a.metrics,
        max_insns: a.max_insns,
        engine: a.engine,
        cuda: device::cuda::CudaConfig {
            device: a.device,
            max_insns: a.max_insns,
            device_arena: a.device_arena_mib << 20,
            allow_fault_injection: a.allow_fault_injection,
            native: !a.no_native,
            host_gaps: !a.no_host_gaps,
            ..Default::default()
        },
        devices: devices(a.devices.as_deref())?,
    };
    let svc = Service::start(cfg).with_context(|| format!("cannot start service `{}`", a.name))?;
    {
        let svc = svc.clone();
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
        ])
        .context("cannot install signal handlers")?;
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                tracing::info!(sig, "signal: draining and stopping");
                svc.stop(false);
            }
        });
    }
    let st = svc.status();
    match &st.gpu {
        Some(g) => eprintln!(
            "bpftime-super: serving `{}` on the cuda backend ({}{}, persistent kernel generation {}); control socket {}",
            a.name,
            g.get("device").and_then(|d| d.as_str()).unwrap_or("GPU"),
            if st.queues.len() > 1 {
                format!(" and {} more GPUs, one queue each", st.queues.len() - 1)
            } else {
                String::new()
            },
            g.get("generation").and_then(|d| d.as_u64()).unwrap_or(0),
            host::service::socket_path(&a.name).display()
        ),
        None => eprintln!(
            "bpftime-super: serving `{}` on the cpu backend with {workers} worker(s); control socket {}",
            a.name,
            host::service::socket_path(&a.name).display()
        ),
    }
    svc.wait();
    eprintln!("bpftime-super: `{}` stopped", a.name);
    Ok(ExitCode::SUCCESS)
}

fn connect(name: &str) -> Result<Client> {
    Client::connect(name).with_context(|| {
        format!(
            "is the service running? start it with `bpftime-super run --persistent --name {name}`"
        )
    })
}

fn print_program(p: &ProgramInfo) {
    let tier = p
        .tier
        .as_deref()
        .map(|t| format!(", GPU tier {t}"))
        .unwrap_or_default();
    let engine = match (&p.engine, p.compile_us) {
        (Some(e), Some(us)) => format!(", CPU engine {e} (compiled in {us} µs)"),
        (Some(e), None) => format!(", CPU engine {e}"),
        _ => String::new(),
    };
    println!(
        "{}: {} version {} ({} insns, {}:{}{tier}{engine})",
        p.id, p.name, p.version, p.insns, p.file, p.section
    );
    for m in &p.maps {
        println!(
            "    map {}: {} key {} value {} entries {}{}",
            m.name,
            m.kind,
            m.key_size,
            m.value_size,
            m.max_entries,
            match m.placement.as_str() {
                "device" => ", in GPU memory".to_string(),
                "shm" | "" => String::new(),
                tier => format!(", behind an emulated tier ({tier})"),
            }
        );
    }
}

fn emit<T: serde::Serialize>(json: bool, v: &T, text: impl FnOnce(&T)) -> Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(v)?);
    } else {
        text(v);
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `load`.
#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// ELF object or raw bytecode.
    file: PathBuf,
    /// Program in the object (function or section name).
    #[arg(long)]
    prog: Option<String>,
    /// Install under this name (default: the function name).
    #[arg(long = "as")]
    install_as: Option<String>,
    /// Where a map lives on the CUDA backend: `MAP=device` (GPU memory) or `MAP=shm` (the
    /// shared region). Default: per-thread arrays in GPU memory, other maps shared.
    /// `MAP=cxl:LATENCY_NS[:GBPS]` puts the map behind an emulated slower tier (on one GPU,
    /// in GPU memory): every helper access waits the latency and, with a cap, its bytes
    /// through the link; on several GPUs only a latency (`bpftime-super cxl load` fills it
    /// from a preset).
    #[arg(long = "map-placement", value_name = "MAP=device|shm|cxl:NS[:GBPS]")]
    placement: Vec<String>,
}

/// Runs `load`.
pub fn load(a: LoadArgs) -> Result<ExitCode> {
    let mut c = connect(&a.common.name)?;
    let p = c
        .load_file_placed(
            &a.file,
            a.prog.as_deref(),
            a.install_as.as_deref(),
            &a.placement,
        )
        .with_context(|| format!("cannot load {}", a.file.display()))?;
    emit(a.common.json, &p, print_program)
}

/// Arguments of `unload`.
#[derive(clap::Args, Debug)]
pub struct UnloadArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Program id or name.
    prog: String,
}

/// Runs `unload`.
pub fn unload(a: UnloadArgs) -> Result<ExitCode> {
    let mut c = connect(&a.common.name)?;
    let p = c.unload(&a.prog)?;
    emit(a.common.json, &p, |p| {
        println!("unloaded {} ({})", p.name, p.id)
    })
}

/// Arguments of `replace`.
#[derive(clap::Args, Debug)]
pub struct ReplaceArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Installed program name.
    target: String,
    /// New ELF object or raw bytecode.
    file: PathBuf,
    /// Program in the object (function or section name).
    #[arg(long)]
    prog: Option<String>,
}

/// Runs `replace`.
pub fn replace(a: ReplaceArgs) -> Result<ExitCode> {
    let mut c = connect(&a.common.name)?;
    let p = c
        .replace_file(&a.target, &a.file, a.prog.as_deref())
        .with_context(|| format!("cannot replace `{}`", a.target))?;
    emit(a.common.json, &p, print_program)
}

/// Runs `list`.
pub fn list(a: CommonArgs) -> Result<ExitCode> {
    let mut c = connect(&a.name)?;
    let ps = c.list()?;
    emit(a.json, &ps, |ps| {
        if ps.is_empty() {
            println!("no programs loaded");
        }
        ps.iter().for_each(print_program)
    })
}

/// Arguments of `submit`.
#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Program id or name.
    #[arg(long)]
    prog: String,
    /// Input file: records of --record-size bytes.
    #[arg(long)]
    input: PathBuf,
    /// Input record size in bytes.
    #[arg(long)]
    record_size: u32,
    /// Write the output records to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Output record size in bytes (default: the input record size, when --out is given).
    #[arg(long)]
    out_record_size: Option<u32>,
    /// Collect every record's r0 (printed one per line, or in the JSON).
    #[arg(long)]
    results: bool,
    /// ctx->args, comma-separated.
    #[arg(long, value_delimiter = ',', num_args = 1..=4)]
    args: Vec<u64>,
    /// Give up waiting after this many seconds.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Put the input buffer in an emulated memory tier, `cxl:LATENCY_NS[:GBPS]`: each
    /// record is fetched through it before the program runs on it (on the GPU too; a cap
    /// there needs a one-GPU service).
    #[arg(long, value_name = "cxl:LATENCY_NS[:GBPS]")]
    input_placement: Option<String>,
    /// Put the output buffer in an emulated memory tier: each record's output bytes leave
    /// through its link (the cap; a posted write pays no latency).
    #[arg(long, value_name = "cxl:LATENCY_NS[:GBPS]")]
    output_placement: Option<String>,
}

#[derive(serde::Serialize)]
struct SubmitReport {
    #[serde(flatten)]
    result: host::client::JobResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    results: Option<Vec<u64>>,
}

/// Runs `submit`.
pub fn submit(a: SubmitArgs) -> Result<ExitCode> {
    let data =
        std::fs::read(&a.input).with_context(|| format!("cannot read {}", a.input.display()))?;
    if a.record_size == 0 {
        bail!("--record-size must be at least 1");
    }
    if data.len() % a.record_size as usize != 0 {
        bail!(
            "{} is {} bytes, not a multiple of --record-size {}",
            a.input.display(),
            data.len(),
            a.record_size
        );
    }
    let n = (data.len() / a.record_size as usize) as u64;
    if a.output_placement.is_some() && a.out_record_size.is_none() && a.out.is_none() {
        bail!("--output-placement needs an output: give --out or --out-record-size");
    }
    let mut c = connect(&a.common.name)?;
    let prog = c.resolve(&a.prog)?;
    let input = c
        .alloc_placed(data.len().max(1) as u64, a.input_placement.as_deref())
        .context("cannot allocate the input buffer")?;
    c.write(&input, 0, &data)?;
    let out_rec = a
        .out_record_size
        .or(a.out.as_ref().map(|_| a.record_size))
        .unwrap_or(0);
    let mut job = Job::new(prog.id, n).input(&input, a.record_size);
    let output = if out_rec > 0 {
        let b = c
            .alloc_placed((n * out_rec as u64).max(1), a.output_placement.as_deref())
            .context("cannot allocate the output buffer")?;
        job = job.output(&b, out_rec);
        Some(b)
    } else {
        None
    };
    let results = if a.results {
        let b = c.alloc((n * 8).max(1))?;
        job = job.results(&b);
        Some(b)
    } else {
        None
    };
    let mut args = [0u64; 4];
    args.iter_mut().zip(&a.args).for_each(|(s, v)| *s = *v);
    job = job.args(args);
    let timeout = Duration::from_secs_f64(a.timeout);
    let bar = indicatif::ProgressBar::new_spinner().with_message(format!("{n} records"));
    bar.enable_steady_tick(Duration::from_millis(200));
    let r = c.run(&job, timeout);
    bar.finish_and_clear();
    let r = r?;
    let res_vals = match results {
        Some(b) => Some(
            c.read(&b, 0, n * 8)?
                .chunks_exact(8)
                .map(|ch| u64::from_le_bytes(ch.try_into().expect("8 bytes")))
                .collect::<Vec<_>>(),
        ),
        None => None,
    };
    if let (Some(path), Some(b)) = (&a.out, &output) {
        let bytes = c.read(b, 0, n * out_rec as u64)?;
        std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    }
    for b in [Some(input), output, results].into_iter().flatten() {
        let _ = c.free(b);
    }
    let ok = r.ok();
    let report = SubmitReport {
        result: r,
        results: res_vals,
    };
    emit(a.common.json, &report, |rep| {
        let r = &rep.result;
        println!(
            "job {}: {} records, {} failed, program {} version {}, r0 {:#x}, {:.1} µs (queued {:.1} µs, ran {:.1} µs)",
            if r.ok() { "ok" } else { "FAILED" },
            r.records_done,
            r.records_failed,
            prog.name,
            r.prog_version,
            r.r0,
            r.latency_ns as f64 / 1e3,
            r.queued_ns as f64 / 1e3,
            r.run_ns as f64 / 1e3
        );
        if let Some(e) = &r.error {
            println!("error: {e}");
        }
        if let Some(v) = &rep.results {
            for x in v {
                println!("{x:#x}");
            }
        }
    })?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Arguments of `map`.
#[derive(clap::Args, Debug)]
pub struct MapArgs {
    #[command(subcommand)]
    cmd: MapCmd,
}

/// `map` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum MapCmd {
    /// Print every element.
    Dump {
        #[command(flatten)]
        common: CommonArgs,
        /// `prog:map`, or a map name only one program has.
        map: String,
    },
    /// Create or update one element (hex key and value).
    Update {
        #[command(flatten)]
        common: CommonArgs,
        /// `prog:map`, or a map name only one program has.
        map: String,
        /// Key bytes, hex.
        key: String,
        /// Value bytes, hex.
        value: String,
        /// `any`, `noexist` or `exist`.
        #[arg(long, default_value = "any")]
        flags: String,
    },
}

/// Runs `map`.
pub fn map(a: MapArgs) -> Result<ExitCode> {
    match a.cmd {
        MapCmd::Dump { common, map } => {
            let mut c = connect(&common.name)?;
            let d = c.map_dump(&map)?;
            emit(common.json, &d, |d| {
                println!("{} ({} entries)", d.map, d.entries.len());
                for (k, v) in &d.entries {
                    println!("  key {k}  value {v}");
                }
            })
        }
        MapCmd::Update {
            common,
            map,
            key,
            value,
            flags,
        } => {
            let flags = match flags.as_str() {
                "any" => 0,
                "noexist" => 1,
                "exist" => 2,
                f => bail!("bad --flags `{f}`: expected any, noexist or exist"),
            };
            let key = host::hex::decode(&key)
                .map_err(anyhow::Error::msg)
                .context("bad key")?;
            let value = host::hex::decode(&value)
                .map_err(anyhow::Error::msg)
                .context("bad value")?;
            let mut c = connect(&common.name)?;
            c.map_update(&map, &key, &value, flags)?;
            emit(
                common.json,
                &serde_json::json!({"updated": map, "key": hex(&key)}),
                |_| println!("updated {map}"),
            )
        }
    }
}

/// Runs `status`.
pub fn status(a: CommonArgs) -> Result<ExitCode> {
    let mut c = connect(&a.name)?;
    // A status costs the service microseconds: one that does not come is a stuck service.
    c.set_request_timeout(Some(std::time::Duration::from_secs(10)));
    let s = match c.status() {
        Err(e @ host::client::ClientError::Timeout(_)) => {
            return Err(anyhow::Error::new(e).context(format!(
                "service `{}` accepted `status` but did not answer: it is running and stuck",
                a.name
            )));
        }
        r => r?,
    };
    emit(a.json, &s, |s| {
        println!(
            "service {} ({} backend, {} workers), up {:.0} s",
            s.name, s.backend, s.workers, s.uptime_s
        );
        println!(
            "queue {}/{}, jobs done {}, failed {}, records {} ({} failed), clients {}",
            s.queue_depth,
            s.queue_capacity,
            s.jobs_done,
            s.jobs_failed,
            s.records,
            s.records_failed,
            s.clients
        );
        println!(
            "latency p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs over {} jobs; arena {} / {} MiB",
            s.latency.p50_ns as f64 / 1e3,
            s.latency.p90_ns as f64 / 1e3,
            s.latency.p99_ns as f64 / 1e3,
            s.latency.count,
            s.arena_used >> 20,
            s.arena_size >> 20
        );
        // One line per GPU (with its queue when there are several).
        let gpus: Vec<(Option<&host::protocol::QueueInfo>, &serde_json::Value)> =
            if s.queues.len() > 1 {
                s.queues
                    .iter()
                    .filter_map(|q| q.gpu.as_ref().map(|g| (Some(q), g)))
                    .collect()
            } else {
                s.gpu.iter().map(|g| (None, g)).collect()
            };
        for (q, g) in gpus {
            let n = |k: &str| g.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
            let which = q.map_or(String::new(), |q| {
                format!(
                    " [device {} = ordinal {}: {} waiting, load {}, {} of {} jobs done]",
                    q.queue,
                    q.device.unwrap_or(-1),
                    q.depth,
                    q.load,
                    q.done,
                    q.submitted
                )
            });
            println!(
                "gpu {} (driver {}){which}: generation {}, {} swaps (last pause {:.0} µs, {} jobs run by the host in the pauses), {} worker restarts, {} jobs failed by GPU faults",
                g.get("device").and_then(|v| v.as_str()).unwrap_or("?"),
                g.get("driver").and_then(|v| v.as_str()).unwrap_or("?"),
                n("generation"),
                n("swaps"),
                n("last_swap_pause_ns") as f64 / 1e3,
                n("gap_jobs"),
                n("recoveries"),
                n("fault_jobs")
            );
        }
        if let Some(r) = &s.recovered {
            println!(
                "recovered from pid {}: {} programs, {} maps, {} client buffers kept; {} queued jobs run ({} taken by a dead worker and queued again), {} running jobs ended as restarted",
                r.from_pid,
                r.programs,
                r.maps,
                r.buffers,
                r.queued_jobs,
                r.requeued_jobs,
                r.ended_jobs
            );
            for e in &r.errors {
                println!("  not recovered: {e}");
            }
        }
        for p in &s.programs {
            print_program(p);
        }
    })
}

/// Arguments of `stop`.
#[derive(clap::Args, Debug)]
pub struct StopArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Cancel queued jobs (they complete as cancelled) instead of draining them.
    #[arg(long)]
    now: bool,
}

/// Runs `stop`.
pub fn stop(a: StopArgs) -> Result<ExitCode> {
    let mut c = connect(&a.common.name)?;
    c.stop(a.now)?;
    emit(
        a.common.json,
        &serde_json::json!({"stopping": a.common.name}),
        |_| println!("stopping {}", a.common.name),
    )
}
