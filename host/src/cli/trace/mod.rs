//! `bpftime-super trace PROG.bpf.o … -- CMD ARGS…`: runs CMD with GPU kernel probes attached
//! and prints the probes' maps while it runs and once more at exit.
//!
//! ```text
//! verify probes ──▶ create region + maps ──▶ spawn CMD (LD_PRELOAD=libbpftime_attach.so,
//!        (errors before CMD starts)              BPFTIME_ATTACH_SESSION=…)
//!   every --interval: drain the shim's report (attach points, warnings) and print the maps
//!   CMD exits (or Ctrl-C: CMD gets the signal) ──▶ final maps, unmatched probes ──▶ CMD's exit code
//! ```

mod hot;
mod print;
mod prom;
mod report;
mod sched;
pub mod timeline;

use anyhow::{Context, Result, bail};
use attach::ProbeSet;
use attach::session::{ReportLine, Session, SessionConfig};
use print::{KernelNames, SiteNames};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Arguments of `trace`.
#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    /// Probe objects (`kprobe/<kernel>`, `kretprobe/<kernel>` programs); none: the shim
    /// only passes through (a baseline for its own cost).
    progs: Vec<PathBuf>,
    /// The command to run, after `--`.
    #[arg(last = true, required = true)]
    cmd: Vec<String>,
    /// Print the maps this often (`1s`, `500ms`; `0`: only at exit).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    interval: Duration,
    /// JSON lines on stdout: attach reports, warnings, and each map print.
    #[arg(long)]
    json: bool,
    /// The shim (default: libbpftime_attach.so next to this binary, or $BPFTIME_ATTACH_LIB).
    #[arg(long)]
    shim: Option<PathBuf>,
    /// Value sets of per-thread arrays (one per GPU thread that may own a slot).
    #[arg(long, default_value_t = attach::session::DEFAULT_THREADS)]
    threads: u32,
    /// Do not print attach points (warnings are still printed).
    #[arg(short, long)]
    quiet: bool,
    /// Where the probes update their maps: `device` (GPU memory, copied to the host every
    /// --interval and at exit; fast) or `host` (host-mapped memory, live, every update
    /// crosses PCIe; for programs that use several GPUs). Ring buffers are always host-mapped.
    #[arg(long, value_enum, default_value_t = MapPlacement::Device)]
    maps: MapPlacement,
    /// Load instrumented modules through the driver's JIT linker: the probe is compiled
    /// once per module instead of once per kernel (a 1 MB, 246-kernel module loads in 5 s
    /// instead of 33 s on an H100), but kernels compiled as relocatable code can run slower
    /// (1.25× on a 4096² SGEMM with an empty probe).
    #[arg(long)]
    jit_linker: bool,
    /// Memory-probe options.
    #[command(flatten)]
    mem: super::instrument::MemArgs,
    /// At exit, print per kernel and source line the bytes loaded and stored and the sectors
    /// per request of every global access (a built-in memory probe; about 2.5× on a
    /// memory-bound kernel).
    #[arg(long)]
    mem_report: bool,
    /// Stream a record of every global access of every kernel with PTX (address, size, op,
    /// site, block, thread) to FILE, through a ring in GPU memory drained every --interval;
    /// when the ring is full, records are dropped and counted, never waited for. Read it
    /// with `bpftime-super memtrace FILE` (the site table goes to FILE.sites.json).
    #[arg(long, value_name = "FILE")]
    mem_trace: Option<PathBuf>,
    /// Records the device ring of --mem-trace holds (48 bytes of GPU memory each; rounded
    /// up to a power of two, at least 2^20).
    #[arg(long, default_value_t = 1 << 22)]
    mem_trace_records: u64,
    /// With --mem-trace: at exit, write PNG plots of access density over the address range
    /// and over time into DIR.
    #[arg(long, value_name = "DIR", requires = "mem_trace")]
    plot: Option<PathBuf>,
    /// Log every copy, allocation, free, prefetch, launch and synchronisation CMD makes
    /// through the CUDA driver (when it returned, how long it took, addresses, bytes,
    /// stream, result) to FILE, in the `attach::apilog` format that `llm-cache observe`
    /// reads. A second CUDA process of CMD writes FILE.<pid>.
    #[arg(long, value_name = "FILE")]
    api_log: Option<PathBuf>,
    /// Serve the maps and trace's own counters as Prometheus metrics on
    /// `http://ADDR/metrics` while CMD runs (for example 127.0.0.1:9435).
    #[arg(long, value_name = "ADDR")]
    prometheus: Option<std::net::SocketAddr>,
    /// At exit, write a Chrome/Perfetto trace-event JSON file of CMD's CUDA calls (API
    /// spans, copies, launches), its kernels as the GPU ran them (first block entry to last
    /// block exit, from a built-in entry/exit probe) and a flow from each launch to its
    /// kernel, on one clock (the GPU's calibrated against CLOCK_MONOTONIC).
    #[arg(long, value_name = "FILE")]
    timeline: Option<PathBuf>,
    /// With --timeline: also each stretch of CMD's threads off the CPU (blocked or
    /// preempted), from a kernel eBPF program on sched/sched_switch loaded with aya. Needs
    /// root and tracefs; without them trace says why and goes on without.
    #[arg(long, requires = "timeline")]
    kernel_events: bool,
    /// Session name: `bpftime-super load/unload/list --name NAME` attach or detach probe
    /// objects while CMD runs (effective at each kernel's next launch). Default
    /// `bpftime-trace-<pid>`.
    #[arg(long)]
    name: Option<String>,
    /// Make Numba (numba-cuda) compile kernels to PTX, which probes can attach to: by
    /// default it emits LTO-IR when nvJitLink is installed, and such kernels run without
    /// probes. The application's lookups of `nvJitLinkVersion` answer "not found" (anything
    /// else that needs nvJitLink's version then sees none).
    #[arg(long)]
    numba_ptx: bool,
    /// MiB of the session's shared memory kept for the maps of objects loaded later.
    #[arg(long, default_value_t = 16)]
    hot_reserve_mib: u64,
}

/// `trace --maps`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapPlacement {
    /// GPU memory, copied out periodically.
    Device,
    /// Host-mapped memory, live.
    Host,
}

/// `1s`, `250ms`, `2` (seconds), `0`.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let bad = || format!("bad interval `{s}`: expected e.g. 1s, 500ms or 0");
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: f64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        "m" => n * 60.0,
        _ => return Err(bad()),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Where the shim is.
fn find_shim(explicit: Option<&Path>) -> Result<PathBuf> {
    const NAME: &str = "libbpftime_attach.so";
    if let Some(p) = explicit {
        if p.is_file() {
            return Ok(p.to_path_buf());
        }
        bail!("--shim {}: no such file", p.display());
    }
    if let Some(p) = std::env::var_os("BPFTIME_ATTACH_LIB") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("BPFTIME_ATTACH_LIB={}: no such file", p.display());
    }
    let exe = std::env::current_exe().context("cannot locate this executable")?;
    let dir = exe.parent().context("executable has no directory")?;
    for c in [
        dir.join(NAME),
        dir.join("../lib").join(NAME),
        dir.join("deps").join(NAME),
    ] {
        if c.is_file() {
            return Ok(c);
        }
    }
    bail!(
        "{NAME} not found next to {} (build it with `cargo build -p attach-shim`, or pass --shim)",
        exe.display()
    )
}

struct Trace {
    session: Session,
    kernels: KernelNames,
    sites: SiteNames,
    /// Names of the probe programs that attached somewhere.
    matched: std::collections::BTreeSet<String>,
    /// Hot attach: the session's objects now, the objects file the shim polls, its
    /// generation, where loaded objects are written, and every stem ever used.
    objects: Vec<String>,
    hot_file: PathBuf,
    generation: u64,
    hot_dir: PathBuf,
    stems: std::collections::BTreeSet<String>,
    report: PathBuf,
    offset: u64,
    json: bool,
    quiet: bool,
    start: Instant,
    probes: Arc<ProbeSet>,
    /// Object index of the `--mem-report` probe, if any.
    report_object: Option<usize>,
    /// Object index of the `--timeline` probe, if any.
    timeline_object: Option<usize>,
    /// The clock calibrations the shim reported.
    clocks: Vec<timeline::Calibration>,
    /// The app's process (the first shim to start).
    app_pid: Option<u32>,
    /// What `--prometheus` serves besides the maps.
    prom: Option<Arc<std::sync::Mutex<prom::Shared>>>,
}

impl Trace {
    /// Reads what the shim appended since the last call.
    fn drain_report(&mut self) {
        let Ok(mut f) = std::fs::File::open(&self.report) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = String::new();
        if f.read_to_string(&mut buf).is_err() {
            return;
        }
        // Only whole lines: a line being written stays for the next call.
        let whole = buf.rfind('\n').map(|i| i + 1).unwrap_or(0);
        self.offset += whole as u64;
        for line in buf[..whole].lines() {
            let Ok(ev) = serde_json::from_str::<ReportLine>(line) else {
                continue;
            };
            if let ReportLine::Attach {
                probe,
                kernel_id,
                demangled,
                ..
            } = &ev
            {
                let base = demangled
                    .split_once('(')
                    .map(|(b, _)| b)
                    .unwrap_or(demangled);
                self.kernels.insert(*kernel_id, base.to_string());
                self.matched.insert(probe.clone());
            }
            if let ReportLine::HostFunction { name, ip } = &ev {
                self.kernels.insert(*ip, name.clone());
            }
            if let ReportLine::Clock {
                offset_ns,
                uncertainty_ns,
                at_ns,
                ..
            } = &ev
            {
                self.clocks.push(timeline::Calibration {
                    offset_ns: *offset_ns,
                    uncertainty_ns: *uncertainty_ns,
                    at_ns: *at_ns,
                });
            }
            if let ReportLine::Started { pid, .. } = &ev {
                self.app_pid.get_or_insert(*pid);
            }
            if let ReportLine::Sites { sites } = &ev {
                for s in sites {
                    self.sites.insert(s.id, s.clone());
                }
            }
            if let Some(Ok(mut p)) = self.prom.as_ref().map(|p| p.lock()) {
                match &ev {
                    ReportLine::Module { instrumented, .. } => {
                        if *instrumented {
                            p.modules_instrumented += 1;
                        } else {
                            p.modules_unchanged += 1;
                        }
                    }
                    ReportLine::Warning { .. } => p.warnings += 1,
                    ReportLine::MemTrace {
                        records, dropped, ..
                    } => {
                        p.trace_records += *records;
                        p.trace_dropped += *dropped;
                    }
                    _ => {}
                }
            }
            if self.json {
                println!("{line}");
                continue;
            }
            match ev {
                ReportLine::Attach {
                    probe,
                    demangled,
                    site,
                    line,
                    ..
                } if !self.quiet => {
                    if site == "memory" {
                        eprintln!("attached {probe} to the memory accesses of {demangled}")
                    } else {
                        eprintln!("attached {probe} to {demangled} at {site} (PTX line {line})")
                    }
                }
                ReportLine::Sites { sites } if !self.quiet => {
                    eprintln!("{} memory sites instrumented", sites.len())
                }
                ReportLine::MemTrace {
                    records,
                    dropped,
                    path,
                } => eprintln!(
                    "memory trace: {records} records written to {path}, {dropped} dropped{}",
                    if dropped > 0 {
                        " (the device ring was full: a larger --mem-trace-records, a shorter --interval or --sample keeps more)"
                    } else {
                        ""
                    }
                ),
                ReportLine::ApiLog { events, path } => {
                    eprintln!("api log: {events} calls written to {path}")
                }
                ReportLine::Warning { what } => eprintln!("warning: {what}"),
                ReportLine::Hot {
                    generation,
                    objects,
                } if !self.quiet => eprintln!(
                    "hot attach: generation {generation} ({objects} objects) in effect; kernels take it at their next launch"
                ),
                ReportLine::Clock {
                    when,
                    offset_ns,
                    uncertainty_ns,
                    ..
                } if !self.quiet => eprintln!(
                    "clock ({when}): %globaltimer = CLOCK_MONOTONIC + {offset_ns} ns ± {uncertainty_ns} ns"
                ),
                ReportLine::DeviceMaps {
                    maps,
                    striped,
                    flush_ms,
                } if !self.quiet => eprintln!(
                    "{maps} maps in GPU memory ({striped} counters striped per SM), copied to the host every {flush_ms} ms and at exit"
                ),
                _ => {}
            }
        }
        // The exporter's names, once per drain rather than once per line.
        if let Some(Ok(mut p)) = self.prom.as_ref().map(|p| p.lock()) {
            p.kernels.clone_from(&self.kernels);
            p.sites.clone_from(&self.sites);
        }
    }

    fn print_maps(&self, last: bool) {
        let mut out = String::new();
        for m in &self.session.maps {
            if Some(m.object) == self.report_object || Some(m.object) == self.timeline_object {
                continue;
            }
            let short = m.name.split_once(':').map(|(_, n)| n).unwrap_or(&m.name);
            // A program's scratch maps (`_name`) are state, not results: not printed.
            if short.starts_with('_') {
                continue;
            }
            let style = print::style_of(short, m.def.kind, m.def.max_entries);
            // Two objects' maps of one name print under their full names (`obj:map`).
            let shared = self
                .session
                .maps
                .iter()
                .filter(|o| o.name.split_once(':').map(|(_, n)| n) == Some(short))
                .count()
                > 1;
            let shown = if shared { m.name.as_str() } else { short };
            let entries: Vec<(Vec<u8>, Vec<u8>)> = if style == print::Style::Records {
                m.ops
                    .drain_ringbuf()
                    .into_iter()
                    .map(|r| (Vec::new(), r))
                    .collect()
            } else if m.def.kind == ebpf::MapKind::PerThreadArray {
                // One value set per GPU thread: print the sum, as bpftrace sums per-CPU maps.
                print::sum_value_sets(m.ops.entries(), m.def.value_size as usize)
            } else {
                m.ops.entries()
            };
            if self.json {
                let raw: Vec<(String, String)> = entries
                    .iter()
                    .map(|(k, v)| (super::hex(k), super::hex(v)))
                    .collect();
                let printed: Vec<serde_json::Value> = entries
                    .iter()
                    .filter(|(_, v)| v.iter().any(|&b| b != 0))
                    .map(|(k, v)| {
                        let key = if style == print::Style::Sites && k.len() == 4 {
                            print::site_text(
                                u32::from_le_bytes([k[0], k[1], k[2], k[3]]),
                                &self.sites,
                            )
                        } else {
                            print::key_for(short, k, &self.kernels)
                        };
                        serde_json::json!({
                            "key": key,
                            "value": print::words(v),
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({
                        "event": "map",
                        "final": last,
                        "elapsed_ms": self.start.elapsed().as_millis() as u64,
                        "map": m.name,
                        "entries": raw,
                        "printed": printed,
                    })
                );
            } else if style == print::Style::Sites {
                out.push_str(&print::sites(shown, &entries, &self.sites));
            } else {
                out.push_str(&print::map(shown, style, &entries, &self.kernels));
            }
        }
        if !self.json && !out.is_empty() {
            let stamp = if last {
                "final".to_string()
            } else {
                format!("{:.1}s", self.start.elapsed().as_secs_f64())
            };
            let mut o = std::io::stdout().lock();
            let _ = writeln!(o, "--- {stamp} ---\n{out}");
            let _ = o.flush();
        }
    }
}

impl Trace {
    /// Answers one control request of `load`/`unload`/`list --name` (hot attach).
    fn control(&mut self, req: host::protocol::Request) -> host::protocol::Reply {
        use host::protocol::Request;
        match req {
            Request::Load {
                file, object_hex, ..
            } => match self.hot_load(&file, &object_hex) {
                Ok(v) => hot::ok(v),
                Err(e) => hot::error(format!("{e:#}")),
            },
            Request::Unload { prog } => match self.hot_unload(&prog) {
                Ok(v) => hot::ok(v),
                Err(e) => hot::error(format!("{e:#}")),
            },
            Request::List => hot::ok(serde_json::json!(
                (0..self.probes.objects.len())
                    .map(|i| hot::info(&self.probes, i, self.generation as u32))
                    .collect::<Vec<_>>()
            )),
            other => hot::error(format!(
                "a trace session serves load, unload and list; not `{}`",
                serde_json::to_value(&other)
                    .ok()
                    .and_then(|v| v["cmd"].as_str().map(str::to_string))
                    .unwrap_or_default()
            )),
        }
    }

    /// Verifies an object with the session's, creates its maps, and publishes the new set.
    fn hot_load(&mut self, file: &str, object_hex: &str) -> Result<serde_json::Value> {
        let bytes = host::hex::decode(object_hex).map_err(|e| anyhow::anyhow!(e))?;
        let path = hot::object_path(&self.hot_dir, self.generation + 1, file);
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
        }
        std::fs::write(&path, &bytes).with_context(|| format!("write {}", path.display()))?;
        let mut objects = self.objects.clone();
        objects.push(path.display().to_string());
        let probes =
            ProbeSet::load(&objects).map_err(|e| anyhow::anyhow!(super::instrument::chain(&e)))?;
        let new = probes.objects.len() - 1;
        let stem = probes.objects[new].stem.clone();
        if self.stems.contains(&stem) || stem != attach::probes::stem_of_path(&file_name(file)) {
            anyhow::bail!(
                "an object named `{}` was already loaded in this session: rename the file",
                attach::probes::stem_of_path(&file_name(file))
            );
        }
        if probes
            .probes
            .iter()
            .any(|p| p.object == new && !p.site.on_gpu())
        {
            anyhow::bail!(
                "{file}: host probes (uprobe/, uretprobe/) cannot be attached to a running program; pass the object to trace"
            );
        }
        self.session
            .add_object(&probes, new)
            .map_err(|e| anyhow::anyhow!(super::instrument::chain(&e)))?;
        // `--prometheus` serves the new object's maps from now on.
        if let Some(Ok(mut p)) = self.prom.as_ref().map(|p| p.lock()) {
            for m in self.session.maps.iter().filter(|m| m.object == new) {
                p.maps.push(prom::Map {
                    name: m.name.clone(),
                    def: m.def.clone(),
                    ops: m.ops.clone(),
                });
            }
        }
        self.publish(objects, probes)?;
        self.stems.insert(stem);
        Ok(serde_json::to_value(hot::info(
            &self.probes,
            new,
            self.generation as u32,
        ))?)
    }

    /// Publishes the set without the object named `prog` (its stem, or one of its
    /// programs).
    fn hot_unload(&mut self, prog: &str) -> Result<serde_json::Value> {
        let i = self
            .probes
            .objects
            .iter()
            .enumerate()
            .find(|(i, o)| {
                o.stem == prog
                    || self
                        .probes
                        .probes
                        .iter()
                        .any(|p| p.object == *i && p.program.name == prog)
            })
            .map(|(i, _)| i)
            .with_context(|| {
                format!(
                    "no object or program `{prog}` in this session (loaded: {})",
                    self.probes
                        .objects
                        .iter()
                        .map(|o| o.stem.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
        let info = hot::info(&self.probes, i, self.generation as u32 + 1);
        let mut objects = self.objects.clone();
        objects.remove(i);
        let probes =
            ProbeSet::load(&objects).map_err(|e| anyhow::anyhow!(super::instrument::chain(&e)))?;
        self.publish(objects, probes)?;
        Ok(serde_json::to_value(info)?)
    }

    /// Makes `objects` (verified as `probes`) the session's next generation: written to
    /// the file the shim polls.
    fn publish(&mut self, objects: Vec<String>, probes: ProbeSet) -> Result<()> {
        attach::session::HotObjects {
            generation: self.generation + 1,
            objects: objects.clone(),
        }
        .write(&self.hot_file.display().to_string())
        .with_context(|| format!("write {}", self.hot_file.display()))?;
        self.generation += 1;
        self.objects = objects;
        self.probes = Arc::new(probes);
        Ok(())
    }

    /// Writes the `--timeline` file from the API log, the probe's spans and the clocks.
    fn write_timeline(
        &mut self,
        file: &Path,
        log: &Path,
        switches: &[sched::Switch],
    ) -> Result<timeline::Counts> {
        let events = attach::apilog::read(log)
            .with_context(|| format!("read the API log {}", log.display()))?;
        let mut spans = Vec::new();
        if let Some(obj) = self.timeline_object {
            for m in self.session.maps.iter().filter(|m| m.object == obj) {
                spans.extend(
                    m.ops
                        .entries()
                        .iter()
                        .filter_map(|(_, v)| timeline::Span::from_value(v)),
                );
            }
        }
        spans.sort_by_key(|s| s.corr);
        let launched = events
            .iter()
            .filter(|e| e.dst != 0 && e.kind == attach::apilog::Kind::Launch)
            .count();
        if launched > timeline::TIMELINE_SLOTS as usize {
            eprintln!(
                "warning: {launched} launches: the timeline keeps the GPU spans of the latest {} per map copy (--interval)",
                timeline::TIMELINE_SLOTS
            );
        }
        self.clocks.sort_by_key(|c| c.at_ns);
        if self.clocks.is_empty() && !spans.is_empty() {
            eprintln!("warning: no clock calibration: kernel spans left out of the timeline");
        }
        let names: std::collections::BTreeMap<u64, String> =
            self.kernels.iter().map(|(k, v)| (*k, v.clone())).collect();
        let pid = self.app_pid.unwrap_or(0);
        let kernel = sched::events(&sched::off_cpu(switches), pid);
        let (doc, counts) = timeline::build(&events, &spans, &self.clocks, &names, pid, kernel);
        std::fs::write(file, serde_json::to_vec(&doc)?)
            .with_context(|| format!("write {}", file.display()))?;
        Ok(counts)
    }

    /// The `--mem-report` table, from the report probe's maps and the site table.
    fn mem_report(&self) {
        let Some(obj) = self.report_object else {
            return;
        };
        let mut counts = report::Counts::new();
        for m in self.session.maps.iter().filter(|m| m.object == obj) {
            let col = match m.name.split_once(':').map(|(_, n)| n) {
                Some("accesses_site") => 0,
                Some("bytes_site") => 1,
                Some("requests_site") => 2,
                Some("sectors_site") => 3,
                _ => continue,
            };
            for (k, v) in m.ops.entries() {
                if k.len() == 4 {
                    let id = u32::from_le_bytes([k[0], k[1], k[2], k[3]]);
                    let n = print::words(&v).first().copied().unwrap_or(0);
                    if n != 0 {
                        counts.entry(id).or_default()[col] += n;
                    }
                }
            }
        }
        let r = report::build(&counts, &self.sites);
        if self.json {
            println!(
                "{}",
                serde_json::json!({"event": "mem_report", "kernels": r})
            );
        } else {
            print!("{}", report::text(&r));
        }
    }
}

/// Runs `trace`.
pub fn run(a: TraceArgs) -> Result<ExitCode> {
    let pid = std::process::id();
    let mut progs = a.progs.clone();
    let report_dir = std::env::temp_dir().join(format!("bpftime-trace-{pid}.d"));
    if a.mem_report {
        progs
            .push(report::write_object(&report_dir).with_context(|| {
                format!("write the report probe into {}", report_dir.display())
            })?);
    }
    let report_object = a.mem_report.then(|| progs.len() - 1);
    if a.timeline.is_some() {
        progs.push(
            timeline::write_object(&report_dir).with_context(|| {
                format!("write the timeline probe into {}", report_dir.display())
            })?,
        );
    }
    let timeline_object = a.timeline.is_some().then(|| progs.len() - 1);
    // The timeline writes FILE at exit: a bad path fails before CMD starts.
    if let Some(p) = &a.timeline {
        std::fs::File::create(p).with_context(|| format!("--timeline {}", p.display()))?;
    }
    let probes =
        ProbeSet::load(&progs).map_err(|e| anyhow::anyhow!(super::instrument::chain(&e)))?;
    let shim = find_shim(a.shim.as_deref())?;
    let report = std::env::temp_dir().join(format!("bpftime-trace-{pid}.jsonl"));
    let _ = std::fs::remove_file(&report);
    // The shim writes the trace: an absolute path, created (empty) here so a bad path
    // fails before the app starts.
    let mem_trace = match &a.mem_trace {
        Some(p) => {
            std::fs::File::create(p).with_context(|| format!("--mem-trace {}", p.display()))?;
            Some(std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        }
        None => None,
    };
    // The shim creates the API log (the first process takes FILE): a bad path fails here.
    let internal_log = report_dir.join("api.log");
    let api_log = match a
        .api_log
        .as_ref()
        .or(a.timeline.as_ref().map(|_| &internal_log))
    {
        Some(p) => {
            std::fs::File::create(p).with_context(|| format!("--api-log {}", p.display()))?;
            let abs = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
            std::fs::remove_file(&abs).with_context(|| format!("--api-log {}", p.display()))?;
            Some(abs)
        }
        None => None,
    };
    let objects: Vec<String> = progs
        .iter()
        .map(|p| {
            std::fs::canonicalize(p)
                .unwrap_or_else(|_| p.clone())
                .display()
                .to_string()
        })
        .collect();
    let session_name = a
        .name
        .clone()
        .unwrap_or_else(|| format!("bpftime-trace-{pid}"));
    std::fs::create_dir_all(&report_dir)
        .with_context(|| format!("create {}", report_dir.display()))?;
    let hot_file = report_dir.join("objects.json");
    attach::session::HotObjects {
        generation: 0,
        objects: objects.clone(),
    }
    .write(&hot_file.display().to_string())
    .with_context(|| format!("write {}", hot_file.display()))?;
    let (control, _socket) = hot::serve(&session_name)?;
    let config = SessionConfig {
        region: session_name.clone(),
        objects: objects.clone(),
        report: report.display().to_string(),
        threads: a.threads,
        device_maps: a.maps == MapPlacement::Device,
        jit_linker: a.jit_linker,
        mem_shared: a.mem.config().shared,
        mem_local: a.mem.config().local,
        sample_every: a.mem.sample,
        sample_budget: a.mem.sample_budget,
        mem_eager: a.mem.mem_eager,
        cold_split: a.mem.cold_split,
        mem_trace: mem_trace.as_ref().map(|p| p.display().to_string()),
        mem_trace_records: a.mem_trace_records,
        api_log: api_log.as_ref().map(|p| p.display().to_string()),
        hot_objects: Some(hot_file.display().to_string()),
        hot_reserve: a.hot_reserve_mib << 20,
        hide_nvjitlink: a.numba_ptx,
        symbol_probes: probes.probes.iter().any(|p| p.host_sym.is_some()),
        // Copies at least as often as the prints; with prints only at exit, every second
        // (a run killed by a signal keeps what the last copy saw).
        flush_ms: match a.interval.as_millis() as u64 {
            0 => 1000,
            ms => ms,
        },
    };
    let session = Session::create(config.clone(), &probes)
        .map_err(|e| anyhow::anyhow!(super::instrument::chain(&e)))?;
    let probes = Arc::new(probes);
    let mut preload = std::env::var("LD_PRELOAD").unwrap_or_default();
    if !preload.is_empty() {
        preload.push(':');
    }
    preload.push_str(&shim.display().to_string());
    let mut cmd = Command::new(&a.cmd[0]);
    cmd.args(&a.cmd[1..])
        .env("LD_PRELOAD", preload)
        .env(attach::session::ENV_SESSION, config.to_env());
    // Probes need PTX: CuPy loads cubins unless asked for PTX.
    for (var, value) in [("CUPY_COMPILE_WITH_PTX", "1")] {
        if std::env::var_os(var).is_none() {
            cmd.env(var, value);
        }
    }
    // Ctrl-C reaches CMD through the terminal's process group; trace stays to print.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("install signal handler")?;
    }
    // The exporter binds before CMD starts: a bad address fails here, not with CMD running.
    let start = Instant::now();
    let prom = match a.prometheus {
        Some(addr) => {
            let maps = session
                .maps
                .iter()
                .filter(|m| Some(m.object) != report_object && Some(m.object) != timeline_object)
                .map(|m| prom::Map {
                    name: m.name.clone(),
                    def: m.def.clone(),
                    ops: m.ops.clone(),
                })
                .collect();
            let shared = Arc::new(std::sync::Mutex::new(prom::Shared {
                maps,
                ..Default::default()
            }));
            let bound = prom::serve(addr, shared.clone(), start)
                .with_context(|| format!("--prometheus {addr}"))?;
            if !a.quiet {
                eprintln!("serving Prometheus metrics on http://{bound}/metrics");
            }
            Some(shared)
        }
        None => None,
    };
    // The kernel side is loaded before CMD starts and follows it from just after its start.
    let mut bridge = if a.kernel_events {
        match sched::Bridge::start() {
            Ok(b) => Some(b),
            Err(why) => {
                eprintln!("warning: --kernel-events: {why}; the timeline has no kernel events");
                None
            }
        }
    } else {
        None
    };
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start `{}`", a.cmd[0]))?;
    let mut followed = child.id();
    if let Some(b) = bridge.as_mut()
        && let Err(why) = b.follow(followed)
    {
        eprintln!("warning: --kernel-events: {why}");
    }
    let mut t = Trace {
        session,
        kernels: KernelNames::new(),
        sites: SiteNames::new(),
        matched: Default::default(),
        objects: objects.clone(),
        hot_file: hot_file.clone(),
        generation: 0,
        hot_dir: report_dir.join("hot"),
        stems: probes.objects.iter().map(|o| o.stem.clone()).collect(),
        report: report.clone(),
        offset: 0,
        json: a.json,
        quiet: a.quiet,
        start,
        probes: probes.clone(),
        report_object,
        timeline_object,
        clocks: Vec::new(),
        app_pid: None,
        prom,
    };
    // A thread blocks in wait(2): CMD's exit is seen at once, not at the next poll.
    let child_pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut child = child;
        let _ = tx.send(child.wait());
    });
    let mut next = Instant::now() + a.interval;
    let mut forwarded = false;
    let status = loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(s) => break s.context("wait for the command")?,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(e) => bail!("wait for the command: {e}"),
        }
        if stop.load(Ordering::Relaxed) && !forwarded {
            // A SIGTERM to trace alone, or Ctrl-C: make sure CMD gets it too.
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child_pid, libc::SIGINT) };
            forwarded = true;
        }
        t.drain_report();
        // CMD may be a wrapper: follow the process that loaded the shim and uses CUDA.
        if let (Some(b), Some(app)) = (bridge.as_mut(), t.app_pid)
            && app != followed
        {
            followed = app;
            if let Err(why) = b.follow(app) {
                eprintln!("warning: --kernel-events: {why}");
            }
        }
        while let Ok((req, reply)) = control.try_recv() {
            let _ = reply.send(t.control(req));
        }
        if !a.interval.is_zero() && Instant::now() >= next {
            t.print_maps(false);
            next += a.interval;
        }
    };
    t.drain_report();
    t.print_maps(true);
    t.mem_report();
    let switches = bridge.map(sched::Bridge::finish).unwrap_or_default();
    if let (Some(file), Some(log)) = (&a.timeline, &api_log) {
        match t.write_timeline(file, log, &switches) {
            Ok(c) => {
                let what = format!(
                    "timeline: {} host calls, {} kernel spans, {} launch flows, {} off-CPU spans written to {}",
                    c.calls,
                    c.kernels,
                    c.flows,
                    c.off_cpu,
                    file.display()
                );
                if a.json {
                    println!(
                        "{}",
                        serde_json::json!({"event": "timeline", "calls": c.calls,
                            "kernels": c.kernels, "flows": c.flows, "off_cpu": c.off_cpu,
                            "path": file})
                    );
                } else {
                    eprintln!("{what}");
                }
            }
            Err(e) => eprintln!("warning: --timeline {}: {e:#}", file.display()),
        }
    }
    if let Some(p) = &mem_trace {
        let table: Vec<&attach::instrument::MemSiteInfo> = t.sites.values().collect();
        let path = PathBuf::from(format!("{}.sites.json", p.display()));
        if let Err(e) = std::fs::write(&path, serde_json::to_vec(&table).unwrap_or_default()) {
            eprintln!("warning: cannot write {}: {e}", path.display());
        }
        // With --mem-report, the trace adds distinct lines per site and reuse distances;
        // --plot draws it.
        if a.mem_report || a.plot.is_some() {
            match super::memtrace::report(p, 0, a.json, a.plot.as_deref()) {
                Ok(text) if a.mem_report => print!("{text}"),
                Ok(_) => {}
                Err(e) => eprintln!("warning: memory trace {}: {e:#}", p.display()),
            }
        }
    }
    for p in t.probes.clone().probes.iter() {
        if p.site.on_gpu() && !t.matched.contains(&p.program.name) {
            let what = format!(
                "probe `{}` ({}) matched no kernel with PTX",
                p.program.name, p.program.section
            );
            if a.json {
                println!("{}", serde_json::json!({"event": "warning", "what": what}));
            } else {
                eprintln!("warning: {what}");
            }
        }
    }
    let _ = t.session.region.unlink();
    let _ = std::fs::remove_file(&report);
    let _ = std::fs::remove_dir_all(&report_dir);
    Ok(exit_code(status))
}

/// The last component of a path.
fn file_name(file: &str) -> String {
    Path::new(file)
        .file_name()
        .map(|f| f.to_string_lossy().to_string())
        .unwrap_or_else(|| file.to_string())
}

/// The exit status to pass on: CMD's code, or 128 + its signal.
fn exit_code(s: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    }
}
