//! `bpftime-super instrument`: the attach pipeline offline. Reads probe objects and one GPU
//! image (PTX, a fat binary, a cubin, or an executable/shared library holding fat
//! binaries), writes the instrumented PTX and prints what it attached where.
//!
//! It runs the same code as `trace` (`attach::Instrumenter`), with the maps bound at
//! placeholder addresses (`--map-base`) instead of a live region's device address.

use anyhow::{Context, Result, bail};
use attach::instrument::Outcome;
use attach::{Instrumenter, ProbeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Arguments of `instrument`.
#[derive(clap::Args, Debug)]
pub struct InstrumentArgs {
    /// Probe objects (`kprobe/…`, `kretprobe/…`), then the image: PTX, fat binary, cubin,
    /// or an ELF executable/library with fat binaries.
    #[arg(required = true, num_args = 2..)]
    files: Vec<PathBuf>,
    /// Where to write the instrumented PTX (several modules: `OUT`, `OUT.1`, …).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Target, `sm_XX`: picks the PTX of a fat binary and the `.target` floor.
    #[arg(long, default_value = "sm_90")]
    arch: String,
    /// Device address the maps are assumed at.
    #[arg(long, default_value = "0x7f0000000000", value_parser = parse_u64)]
    map_base: u64,
    /// Per-thread array value sets.
    #[arg(long, default_value_t = attach::session::DEFAULT_THREADS)]
    threads: u32,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Memory-probe options.
    #[command(flatten)]
    mem: MemArgs,
}

/// Options of memory probes (`memprobe/…`), shared by `trace` and `instrument`.
#[derive(clap::Args, Debug, Clone)]
pub struct MemArgs {
    /// State spaces memory probes see besides global and generic: `shared`, `local`
    /// (comma-separated).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub mem_spaces: Vec<MemSpaceArg>,
    /// Memory probes run at every Nth execution of a site, per thread.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub sample: u32,
    /// Memory probes run at most this many times per thread and site (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub sample_budget: u32,
    /// Counting memory probes update their maps at every access, instead of summing in
    /// registers and adding when the thread exits (use it for kernels that never exit).
    #[arg(long)]
    pub mem_eager: bool,
    /// Split memory probes that can return before they read the access: the code after
    /// that point becomes one function the sites call, around which each site stores and
    /// reloads the kernel's live registers. The kernel then keeps about the registers, hence
    /// the occupancy, it had; the probe's path past its first test gets slower. For probes
    /// that mostly return at once (`cxl run` at zero delay uses it).
    #[arg(long)]
    pub cold_split: bool,
}

impl MemArgs {
    /// The instrumenter's options.
    pub fn config(&self) -> attach::instrument::MemConfig {
        attach::instrument::MemConfig {
            shared: self.mem_spaces.contains(&MemSpaceArg::Shared),
            local: self.mem_spaces.contains(&MemSpaceArg::Local),
            sampling: attach::codegen::Sampling {
                every: self.sample,
                budget: self.sample_budget,
            },
            eager: self.mem_eager,
            trace: None,
            cold_split: self.cold_split,
        }
    }
}

/// `trace --mem-spaces`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemSpaceArg {
    /// `.shared` accesses.
    Shared,
    /// `.local` accesses.
    Local,
}

fn parse_u64(s: &str) -> Result<u64, String> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("bad address `{s}`: {e}"))
}

/// `sm_90` → 90.
pub fn parse_arch(arch: &str) -> Result<u32> {
    let digits: String = arch
        .trim_start_matches("sm_")
        .trim_start_matches("compute_")
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits
        .parse()
        .ok()
        .filter(|&n| n >= 30)
        .with_context(|| format!("--arch `{arch}`: expected sm_XX (for example sm_90)"))
}

/// Runs `instrument`.
pub fn run(a: InstrumentArgs) -> Result<ExitCode> {
    let (image_path, objects) = a.files.split_last().expect("clap requires two files");
    let sm = parse_arch(&a.arch)?;
    let probes = ProbeSet::load(objects).map_err(|e| anyhow::anyhow!(chain(&e)))?;
    let bindings = attach::session::placeholder_bindings(&probes, a.map_base, a.threads);
    let inst = Instrumenter::new(Arc::new(probes), bindings, sm, std::process::id())
        .with_mem(a.mem.config());
    let bytes = std::fs::read(image_path)
        .with_context(|| format!("cannot read {}", image_path.display()))?;
    // An executable or library holds one container per translation unit: instrument the
    // best PTX of each.
    let images: Vec<Vec<u8>> =
        if attach::image::classify(&bytes) == Some(attach::image::ImageKind::HostElf) {
            let containers = attach::image::host_elf_fatbins(&bytes)
                .with_context(|| format!("{}: fat binaries", image_path.display()))?;
            if containers.is_empty() {
                bail!("{}: no fat binary in it (.nv_fatbin)", image_path.display());
            }
            containers
                .into_iter()
                .filter_map(|entries| {
                    entries
                        .into_iter()
                        .filter(|e| e.kind == attach::image::EntryKind::Ptx)
                        .filter(|e| e.sm <= sm || sm == 0)
                        .max_by_key(|e| e.sm)
                        .map(|e| e.payload)
                })
                .collect()
        } else {
            vec![bytes]
        };
    let mut written = Vec::new();
    let mut reports = Vec::new();
    for (k, img) in images.iter().enumerate() {
        let outcome = inst.image(img);
        if let Outcome::Instrumented { ptx, .. } = &*outcome {
            let path = match (&a.output, k) {
                (Some(p), 0) => Some(p.clone()),
                (Some(p), k) => Some(PathBuf::from(format!("{}.{k}", p.display()))),
                (None, _) => None,
            };
            match path {
                Some(p) => {
                    std::fs::write(&p, ptx)
                        .with_context(|| format!("cannot write {}", p.display()))?;
                    written.push(p.display().to_string());
                }
                None if !a.json => print!("{ptx}"),
                None => {}
            }
        }
        reports.push(outcome.report().clone());
    }
    if a.json {
        println!(
            "{}",
            serde_json::json!({ "reports": reports, "written": written })
        );
    } else {
        for r in &reports {
            for p in &r.attached {
                eprintln!(
                    "attached {} {} to {} ({}) at {:?}, PTX line {}",
                    p.section.split('/').next().unwrap_or(""),
                    p.probe,
                    p.demangled,
                    p.kernel,
                    p.site,
                    p.line
                );
            }
            for site in &r.sites {
                eprintln!(
                    "memory site {}: {} {} in {} (PTX line {}, {} bytes)",
                    site.id,
                    site.location(),
                    site.opcode,
                    attach::probes::demangle(&site.kernel),
                    site.ptx_line,
                    site.size
                );
            }
            for h in &r.hidden {
                eprintln!(
                    "{} takes 2 hidden parameters after its {} (correlation id, launch time; at byte {}): trace's launches pass them",
                    attach::probes::demangle(&h.kernel),
                    h.params,
                    h.offset
                );
            }
            for w in &r.warnings {
                eprintln!("warning: {w}");
            }
            if r.attached.is_empty() {
                eprintln!(
                    "nothing attached: {} kernel(s) in the {} image, none with PTX matching a probe",
                    r.kernels.len(),
                    r.kind
                );
            }
        }
        for w in &written {
            eprintln!("wrote {w}");
        }
    }
    let any = reports.iter().any(|r| !r.attached.is_empty());
    Ok(if any {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `e` and its sources, joined with `: `.
pub fn chain(e: &dyn std::error::Error) -> String {
    attach::shim::hooks::error_chain(e)
}
