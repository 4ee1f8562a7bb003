//! The one code path from a GPU image to what the driver should load, shared by the shim
//! (`trace`) and the offline `bpftime-super instrument`.
//!
//! ```text
//! image ──[image::unpack]──┬─ PTX (text, or the best PTX entry of a fat binary for the device)
//!                          │     └─[ptx::parse]──[match kernels to probes]──[codegen]──[passes::probe::splice]──▶ instrumented PTX
//!                          └─ SASS only (cubin, or a fat binary without PTX)
//!                                └─▶ unchanged; one warning per probed kernel it holds
//! ```
//!
//! Results are cached by the image's content hash (FNV-1a 64 over the bytes plus the device's
//! SM): a program that loads the same module again pays nothing the second time.

use crate::codegen::{self, CompiledProbe, KernelSig, ParamSig};
use crate::probes::{KernelNames, ProbeSet, SiteKind};
use jit::MapBinding;
use jit::passes::probe::{ProbeBlocks, ProbeModule, Site};
use jit::ptx::parse::{self, PtxFunction};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// What happened to one image.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Attach points: one per (probe, kernel, site).
    pub attached: Vec<AttachPoint>,
    /// Kernels of the image (mangled), whether or not a probe matched them.
    pub kernels: Vec<String>,
    /// Warnings: SASS-only kernels a probe wanted, PTX that does not parse, version changes.
    pub warnings: Vec<String>,
    /// What the image was: `ptx`, `fatbin`, `cubin`, ….
    pub kind: String,
    /// Memory sites instrumented, by session-wide site id.
    pub sites: Vec<MemSiteInfo>,
    /// Kernels given the hidden launch parameters ([`HiddenParams`]): every launch of
    /// them must pass two more values.
    pub hidden: Vec<HiddenParams>,
    /// Kernels whose every memory-probe block frees the kernel's registers around the
    /// probe's cold part ([`MemConfig::cold_split`]): capping them at the original's
    /// occupancy (`crate::occupancy`) spills only on that part.
    pub freed: Vec<String>,
}

/// A kernel whose probes read the launch's correlation id or launch time: its instrumented
/// signature ends with two more `.u64` parameters, [`HIDDEN_CORR`] and [`HIDDEN_TIME`], which
/// the shim's launch wrappers append to every launch of it ([`crate::shim`]'s `launch`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HiddenParams {
    /// The kernel, mangled.
    pub kernel: String,
    /// Its own parameters (the hidden ones follow).
    pub params: u32,
    /// Byte offset of the first hidden parameter in the parameter buffer (its own
    /// parameters' layout, 8-aligned): where a launch through `extra`'s
    /// `CU_LAUNCH_PARAM_BUFFER_POINTER` puts them.
    pub offset: u32,
}

/// Name of the hidden correlation-id parameter.
pub const HIDDEN_CORR: &str = "__bpftime_corr";
/// Name of the hidden launch-time parameter.
pub const HIDDEN_TIME: &str = "__bpftime_launch";

impl HiddenParams {
    /// The layout of `k`'s parameters, if the hidden ones can follow them (every parameter
    /// has a size).
    pub fn of(k: &PtxFunction<'_>) -> Option<HiddenParams> {
        let mut end = 0u32;
        for p in &k.params {
            if p.size == 0 {
                return None;
            }
            let a = p.align.max(1);
            end = end.div_ceil(a) * a + p.size;
        }
        Some(HiddenParams {
            kernel: k.name.to_string(),
            params: k.params.len() as u32,
            offset: end.div_ceil(8) * 8,
        })
    }
}

/// One instrumented memory access: what a `site_id` in [`ebpf::MemCtx`] names.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemSiteInfo {
    /// The session-wide site id.
    pub id: u32,
    /// The kernel, mangled.
    pub kernel: String,
    /// 1-based PTX line of the instruction.
    pub ptx_line: u32,
    /// Source file (from `.file`/`.loc`), when the PTX has line info.
    pub file: Option<String>,
    /// Source line, when the PTX has line info.
    pub line: Option<u32>,
    /// `load`, `store`, `atomic` or `copy`.
    pub op: jit::passes::mem::MemOp,
    /// The state space the instruction names.
    pub space: jit::passes::mem::MemSpace,
    /// Bytes per thread.
    pub size: u32,
    /// The opcode.
    pub opcode: String,
}

impl MemSiteInfo {
    /// `file:line` (the file's last path component), or `ptx:<line>` without line info.
    pub fn location(&self) -> String {
        match (&self.file, self.line) {
            (Some(f), Some(l)) => {
                let base = f.rsplit('/').next().unwrap_or(f);
                format!("{base}:{l}")
            }
            _ => format!("ptx:{}", self.ptx_line),
        }
    }
}

/// Session options of memory probes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemConfig {
    /// Probe `.shared` accesses too.
    pub shared: bool,
    /// Probe `.local` accesses too.
    pub local: bool,
    /// Per-thread sampling.
    pub sampling: codegen::Sampling,
    /// Do not keep counting adds in registers until the kernel exits
    /// ([`codegen::Deferred`]): every access updates memory at once, so a kernel that never
    /// exits (a persistent one) still shows its counts.
    pub eager: bool,
    /// Every probed access also appends a record to this device ring (`--mem-trace`).
    pub trace: Option<TraceRing>,
    /// Split memory probes that return on their configuration before they read the
    /// access (a ctx point): their code from that point on becomes one function of the
    /// module that the blocks call ([`jit::JitOptions::split_cold`]), and each block stores
    /// the kernel's live registers before the call and loads them after
    /// (`codegen::save_live`). ptxas then sizes the kernel's registers for the kernel and
    /// the probe's first test alone, and the shim caps it near the original's occupancy
    /// ([`Report::freed`]). It pays when the probe mostly returns at once: the call path is
    /// slower than the inlined one (and sums no counter in registers), so a probe that
    /// works at most accesses is better inlined, the default. `cxl run` splits when its
    /// configuration delays nothing (`bench/results/cxl_gpu.md`, run 22).
    pub cold_split: bool,
}

pub use crate::memtrace::TraceRing;

/// One probe attached to one kernel site.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AttachPoint {
    /// The probe program's name.
    pub probe: String,
    /// `kprobe` or `kretprobe`.
    pub section: String,
    /// The kernel, mangled.
    pub kernel: String,
    /// The kernel, demangled.
    pub demangled: String,
    /// Its `kernel_id` in the probe ctx.
    pub kernel_id: u64,
    /// Entry or exit.
    pub site: SiteKind,
    /// PTX line of the site (1-based; for exits, the `ret`/`exit`).
    pub line: u32,
}

/// The result of instrumenting one image.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Load the original image.
    Unchanged(Report),
    /// Load this PTX instead.
    Instrumented {
        /// The instrumented PTX (no NUL).
        ptx: String,
        /// What was attached.
        report: Report,
    },
}

impl Outcome {
    /// The report.
    pub fn report(&self) -> &Report {
        match self {
            Outcome::Unchanged(r) | Outcome::Instrumented { report: r, .. } => r,
        }
    }
}

/// Maps bound to device-visible addresses, per object: `bindings[object][map name]`.
pub type Bindings = Vec<BTreeMap<String, MapBinding>>;

/// Instruments images for one device.
pub struct Instrumenter {
    probes: Arc<ProbeSet>,
    bindings: Bindings,
    sm: u32,
    lock_pid: u32,
    compiled: Mutex<HashMap<usize, Arc<CompiledProbe>>>,
    cache: Mutex<HashMap<u64, Arc<Outcome>>>,
    mem: MemConfig,
    next_site: Mutex<u32>,
    launch_params: bool,
    inline_kernel: bool,
    /// Kernels of instrumented PTX handed to a JIT linker ([`Instrumenter::note_linked`]):
    /// the cubin it makes holds them again, as SASS, and is not warned about.
    linked: Mutex<std::collections::HashSet<String>>,
}

impl Instrumenter {
    /// An instrumenter for a device of compute capability `sm` (90 for 9.0), with every
    /// probe's maps bound in `bindings`.
    pub fn new(probes: Arc<ProbeSet>, bindings: Bindings, sm: u32, lock_pid: u32) -> Self {
        Instrumenter {
            probes,
            bindings,
            sm,
            lock_pid,
            compiled: Mutex::new(HashMap::new()),
            cache: Mutex::new(HashMap::new()),
            mem: MemConfig::default(),
            next_site: Mutex::new(0),
            launch_params: true,
            inline_kernel: true,
            linked: Mutex::new(Default::default()),
        }
    }

    /// Whether kernel entry/exit probes are inlined at their sites (default yes: no call,
    /// no ctx in memory). `trace --jit-linker` says no: its point is to compile the probe
    /// once per module rather than once per kernel.
    pub fn with_inline_kernel_probes(mut self, inline: bool) -> Self {
        self.inline_kernel = inline;
        self
    }

    /// Whether kernels whose probes read `correlation_id` or `launch_time` get the hidden
    /// launch parameters ([`HiddenParams`]; default yes). Without them those fields read 0:
    /// the shim says no when the driver cannot name a launch's function.
    pub fn with_launch_params(mut self, allowed: bool) -> Self {
        self.launch_params = allowed;
        self
    }

    /// The same, with memory-probe options.
    pub fn with_mem(mut self, mem: MemConfig) -> Self {
        self.mem = mem;
        self
    }

    /// The probes.
    pub fn probes(&self) -> &ProbeSet {
        &self.probes
    }

    /// Records that `report`'s instrumented kernels went to a JIT linker (`cuLink*`,
    /// `nvJitLink*`): the cubin it produces is ours, not SASS-only code to warn about.
    pub fn note_linked(&self, report: &Report) {
        if let Ok(mut l) = self.linked.lock() {
            l.extend(report.attached.iter().map(|p| p.kernel.clone()));
        }
    }

    /// The device's SM (90 for 9.0).
    pub fn sm(&self) -> u32 {
        self.sm
    }

    /// The maps' bindings, per object.
    pub fn bindings(&self) -> &Bindings {
        &self.bindings
    }

    /// An instrumenter for another probe set with the same device and options (a hot
    /// change of the session's objects); its cache starts empty.
    pub fn sibling(&self, probes: Arc<ProbeSet>, bindings: Bindings) -> Instrumenter {
        let next = self.next_site.lock().map(|n| *n).unwrap_or(0);
        let mut i = Instrumenter::new(probes, bindings, self.sm, self.lock_pid)
            .with_mem(self.mem)
            .with_launch_params(self.launch_params)
            .with_inline_kernel_probes(self.inline_kernel);
        // Memory site ids stay unique over the session.
        i.next_site = Mutex::new(next);
        i
    }

    /// Instruments any image the driver accepts (PTX, fat binary, wrapper, cubin), cached by
    /// content.
    pub fn image(&self, bytes: &[u8]) -> Arc<Outcome> {
        self.image_fresh(bytes).0
    }

    /// [`Instrumenter::image`], and whether this call did the work (false: a cache hit).
    pub fn image_fresh(&self, bytes: &[u8]) -> (Arc<Outcome>, bool) {
        let key = fnv(bytes) ^ (self.sm as u64).rotate_left(48);
        if let Some(o) = self
            .cache
            .lock()
            .map(|c| c.get(&key).cloned())
            .ok()
            .flatten()
        {
            return (o, false);
        }
        let out = Arc::new(self.image_uncached(bytes));
        if let Ok(mut c) = self.cache.lock() {
            c.insert(key, out.clone());
        }
        (out, true)
    }

    fn image_uncached(&self, bytes: &[u8]) -> Outcome {
        use crate::image::{ImageKind, classify};
        let kind = classify(bytes);
        if kind == Some(ImageKind::Ptx) {
            let text = ptx_text(bytes);
            return self.ptx(&text);
        }
        let kind_name = match kind {
            Some(k) => format!("{k:?}").to_lowercase(),
            None => "unknown".to_string(),
        };
        let unpacked = match crate::image::unpack(bytes) {
            Ok(u) => u,
            Err(e) => {
                return Outcome::Unchanged(Report {
                    kind: kind_name,
                    warnings: vec![format!("image not instrumented: {e}")],
                    ..Report::default()
                });
            }
        };
        if let Some(ptx) = crate::image::best_ptx(&unpacked, self.sm) {
            let mut o = self.ptx(ptx);
            // Kernels that exist only as SASS in this image (none when the PTX covers all).
            let sass_only = self.sass_only(&unpacked, o.report());
            match &mut o {
                Outcome::Unchanged(r) | Outcome::Instrumented { report: r, .. } => {
                    r.kind = kind_name;
                    r.warnings.extend(sass_only);
                }
            }
            return o;
        }
        let mut report = Report {
            kind: kind_name,
            ..Report::default()
        };
        report.warnings = self.sass_only(&unpacked, &report);
        for (_, c) in &unpacked.cubins {
            report.kernels.extend(c.kernels.iter().cloned());
        }
        Outcome::Unchanged(report)
    }

    /// Warnings for kernels a probe wants that exist only as SASS.
    fn sass_only(&self, u: &crate::image::Unpacked, seen: &Report) -> Vec<String> {
        let mut out = Vec::new();
        let mut named: Vec<&str> = Vec::new();
        for (sm, c) in &u.cubins {
            // A cubin the linker made from instrumented PTX carries our functions.
            if c.device_functions
                .iter()
                .any(|f| f.starts_with("__bpftime"))
            {
                continue;
            }
            let ours = self.linked.lock().map(|a| a.clone()).unwrap_or_default();
            for k in &c.kernels {
                if seen.kernels.iter().any(|s| s == k)
                    || named.contains(&k.as_str())
                    || ours.contains(k)
                {
                    continue;
                }
                let wanted: Vec<&str> = self
                    .probes
                    .matching(k)
                    .map(|(_, p)| p.program.name.as_str())
                    .collect();
                if !wanted.is_empty() {
                    named.push(k);
                    out.push(format!(
                        "kernel `{}` is SASS-only (sm_{sm}, no PTX): it runs unmodified, without probes {}",
                        crate::probes::demangle(k),
                        wanted.join(", ")
                    ));
                }
            }
        }
        out
    }

    /// Instruments PTX text.
    pub fn ptx(&self, src: &str) -> Outcome {
        let mut report = Report {
            kind: "ptx".into(),
            ..Report::default()
        };
        let file = match parse::parse_lenient(src) {
            Ok(f) => f,
            Err(e) => {
                report.warnings.push(format!(
                    "PTX left unmodified: it does not parse at line {}: {}",
                    e.line, e.what
                ));
                return Outcome::Unchanged(report);
            }
        };
        // Which probes each kernel gets.
        let mut wanted: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for k in file.kernels() {
            report.kernels.push(k.name.to_string());
            let ids: Vec<usize> = self.probes.matching(k.name).map(|(i, _)| i).collect();
            // `--mem-trace` records every kernel's accesses, probes or not.
            if !ids.is_empty() || self.mem.trace.is_some() {
                wanted.insert(k.name.to_string(), ids);
            }
        }
        if wanted.is_empty() {
            return Outcome::Unchanged(report);
        }
        let mut needed: Vec<usize> = wanted.values().flatten().copied().collect();
        needed.sort_unstable();
        needed.dedup();
        let mut compiled: HashMap<usize, Arc<CompiledProbe>> = HashMap::new();
        for i in needed {
            match self.compile(i) {
                Ok(c) => {
                    compiled.insert(i, c);
                }
                Err(e) => report.warnings.push(format!(
                    "probe `{}` not attached: JIT: {e}",
                    self.probes.probes[i].program.name
                )),
            }
        }
        if compiled.is_empty() && self.mem.trace.is_none() {
            return Outcome::Unchanged(report);
        }
        let is_mem = |i: &usize| compiled.get(i).is_some_and(|c| c.site == SiteKind::Memory);
        let mem_text: String = compiled
            .iter()
            .filter(|(i, _)| is_mem(i))
            .map(|(_, c)| c.text.as_str())
            .collect();
        let kernel_text: String = compiled
            .iter()
            .filter(|(i, _)| !is_mem(i))
            .map(|(_, c)| c.text.as_str())
            .collect();
        // Memory sites first: the entry/exit splice then runs on the wrapped text (its
        // blocks hold no access, and the memory blocks no `ret`).
        let mut owned: Option<String> = None;
        if wanted.values().flatten().any(is_mem) || self.mem.trace.is_some() {
            match self.mem_pass(src, &file, &wanted, &compiled, mem_text, &mut report) {
                Some(t) => owned = Some(t),
                None if !wanted.values().flatten().any(|i| !is_mem(i)) => {
                    return Outcome::Unchanged(report);
                }
                None => {}
            }
        }
        let reparsed;
        let (src, file) = match &owned {
            Some(t) => match parse::parse_lenient(t) {
                Ok(f) => {
                    reparsed = f;
                    (t.as_str(), &reparsed)
                }
                Err(e) => {
                    report.warnings.push(format!(
                        "PTX left unmodified: the memory pass's output does not parse at line {}: {}",
                        e.line, e.what
                    ));
                    report.sites.clear();
                    return Outcome::Unchanged(report);
                }
            },
            None => (src, &file),
        };
        if !wanted.values().flatten().any(|i| !is_mem(i)) {
            return match owned {
                Some(ptx) if !report.attached.is_empty() || !report.sites.is_empty() => {
                    Outcome::Instrumented { ptx, report }
                }
                _ => Outcome::Unchanged(report),
            };
        }
        let module = ProbeModule {
            text: kernel_text,
            min_version: (8, 0),
            min_sm: codegen::MIN_SM,
        };
        let mut blocks = Blocks {
            wanted: &wanted,
            compiled: &compiled,
            hidden: Vec::new(),
            allowed: self.launch_params,
        };
        match jit::passes::probe::splice(src, file, &module, &mut blocks) {
            Ok(s) => {
                report.hidden = blocks.hidden;
                for a in &s.attached {
                    let site = match a.site {
                        Site::Entry => SiteKind::Entry,
                        Site::Exit { .. } => SiteKind::Exit,
                    };
                    let names = KernelNames::new(&a.kernel);
                    for i in wanted.get(&a.kernel).into_iter().flatten() {
                        let Some(c) = compiled.get(i) else { continue };
                        if c.site != site {
                            continue;
                        }
                        report.attached.push(AttachPoint {
                            probe: c.name.clone(),
                            section: self.probes.probes[*i].program.section.clone(),
                            kernel: a.kernel.clone(),
                            demangled: names.demangled.clone(),
                            kernel_id: ebpf::ProbeCtx::kernel_id(&a.kernel),
                            site,
                            line: a.line,
                        });
                    }
                }
                report
                    .warnings
                    .extend(s.warnings.iter().map(|w| match &w.kernel {
                        Some(k) => format!("{k}: line {}: {}", w.line, w.what),
                        None => format!("line {}: {}", w.line, w.what),
                    }));
                if report.attached.is_empty() && report.sites.is_empty() {
                    Outcome::Unchanged(report)
                } else {
                    Outcome::Instrumented {
                        ptx: s.text,
                        report,
                    }
                }
            }
            Err(e) => {
                report
                    .warnings
                    .push(format!("PTX left unmodified: the splice failed: {e}"));
                Outcome::Unchanged(report)
            }
        }
    }

    /// Runs the memory pass for the memory probes of `wanted`; the wrapped text, or `None`
    /// when no site was instrumented (warnings say why).
    fn mem_pass(
        &self,
        src: &str,
        file: &parse::PtxFile<'_>,
        wanted: &BTreeMap<String, Vec<usize>>,
        compiled: &HashMap<usize, Arc<CompiledProbe>>,
        text: String,
        report: &mut Report,
    ) -> Option<String> {
        let module = ProbeModule {
            text,
            min_version: (8, 0),
            min_sm: codegen::MIN_SM,
        };
        // Site ids are dense over the session: modules take the next ones in load order
        // (the lock keeps concurrent loads apart).
        let mut next = match self.next_site.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let base = *next;
        let mut blocks = MemBlocksFor {
            probes: &self.probes,
            wanted,
            compiled,
            mem: self.mem,
            base,
            local: 0,
            deferred: codegen::Deferred::default(),
            save: codegen::SaveArea::default(),
            freed: Vec::new(),
        };
        let out = match jit::passes::mem::splice(src, file, &module, &mut blocks) {
            Ok(o) => o,
            Err(e) => {
                report.warnings.push(format!(
                    "memory probes not attached: the splice failed: {e}"
                ));
                return None;
            }
        };
        report
            .warnings
            .extend(out.warnings.iter().map(|w| match &w.kernel {
                Some(k) => format!(
                    "{}: line {}: {}",
                    crate::probes::demangle(k),
                    w.line,
                    w.what
                ),
                None => format!("line {}: {}", w.line, w.what),
            }));
        report.freed.extend(blocks.freed.iter().cloned());
        if out.sites.is_empty() {
            return None;
        }
        *next += out.sites.len() as u32;
        drop(next);
        let mut seen: std::collections::BTreeSet<(usize, String)> = Default::default();
        for site in &out.sites {
            report.sites.push(MemSiteInfo {
                id: base + site.index,
                kernel: site.kernel.clone(),
                ptx_line: site.line,
                file: site
                    .loc
                    .as_ref()
                    .and_then(|l| file.files.get(&l.file).cloned()),
                line: site.loc.as_ref().map(|l| l.line),
                op: site.op,
                space: site.space,
                size: site.size,
                opcode: site.opcode.clone(),
            });
            for i in wanted.get(&site.kernel).into_iter().flatten() {
                let Some(c) = compiled.get(i).filter(|c| c.site == SiteKind::Memory) else {
                    continue;
                };
                if !seen.insert((*i, site.kernel.clone())) {
                    continue;
                }
                let names = KernelNames::new(&site.kernel);
                report.attached.push(AttachPoint {
                    probe: c.name.clone(),
                    section: self.probes.probes[*i].program.section.clone(),
                    kernel: site.kernel.clone(),
                    demangled: names.demangled.clone(),
                    kernel_id: ebpf::ProbeCtx::kernel_id(&site.kernel),
                    site: SiteKind::Memory,
                    line: site.line,
                });
            }
        }
        Some(out.text)
    }

    fn compile(&self, i: usize) -> Result<Arc<CompiledProbe>, jit::CompileError> {
        if let Some(c) = self.compiled.lock().ok().and_then(|c| c.get(&i).cloned()) {
            return Ok(c);
        }
        let p = &self.probes.probes[i];
        let by_name = &self.bindings[p.object];
        let mut maps = Vec::with_capacity(p.program.maps.len());
        for (k, d) in p.program.maps.iter().enumerate() {
            match by_name.get(&d.name) {
                Some(b) => maps.push(b.clone()),
                None => {
                    return Err(jit::CompileError::MapBinding {
                        index: k,
                        name: d.name.clone(),
                        what: "the session bound no storage to it".into(),
                    });
                }
            }
        }
        let c = Arc::new(codegen::compile_probe(
            p,
            i,
            maps,
            self.sm,
            self.lock_pid,
            self.inline_kernel,
            self.mem.cold_split,
        )?);
        if let Ok(mut m) = self.compiled.lock() {
            m.insert(i, c.clone());
        }
        Ok(c)
    }
}

struct Blocks<'a> {
    wanted: &'a BTreeMap<String, Vec<usize>>,
    compiled: &'a HashMap<usize, Arc<CompiledProbe>>,
    /// Kernels given the hidden launch parameters, in splice order.
    hidden: Vec<HiddenParams>,
    /// Whether kernels may be given them ([`Instrumenter::with_launch_params`]).
    allowed: bool,
}

use crate::probes::LAUNCH_WORDS;

impl ProbeBlocks for Blocks<'_> {
    fn extra_params(&mut self, kernel: &PtxFunction<'_>) -> Vec<String> {
        let reads = self
            .wanted
            .get(kernel.name)
            .into_iter()
            .flatten()
            .filter_map(|i| self.compiled.get(i))
            .any(|c| c.site != SiteKind::Memory && c.ctx_words & LAUNCH_WORDS != 0);
        if !self.allowed {
            return Vec::new();
        }
        match HiddenParams::of(kernel) {
            Some(h) if reads => {
                self.hidden.push(h);
                vec![
                    format!(".param .u64 {HIDDEN_CORR}"),
                    format!(".param .u64 {HIDDEN_TIME}"),
                ]
            }
            _ => Vec::new(),
        }
    }

    fn block(&mut self, kernel: &PtxFunction<'_>, site: &Site, uid: u32) -> Option<String> {
        let ids = self.wanted.get(kernel.name)?;
        let kind = match site {
            Site::Entry => SiteKind::Entry,
            Site::Exit { .. } => SiteKind::Exit,
        };
        let probes: Vec<&CompiledProbe> = ids
            .iter()
            .filter_map(|i| self.compiled.get(i))
            .map(|c| c.as_ref())
            .filter(|c| c.site == kind)
            .collect();
        if probes.is_empty() {
            return None;
        }
        let hidden = self
            .hidden
            .iter()
            .any(|h| h.kernel == kernel.name)
            .then_some((HIDDEN_CORR, HIDDEN_TIME));
        Some(codegen::site_block(
            &signature(kernel),
            &probes,
            kind,
            uid,
            hidden,
        ))
    }
}

struct MemBlocksFor<'a> {
    probes: &'a ProbeSet,
    wanted: &'a BTreeMap<String, Vec<usize>>,
    compiled: &'a HashMap<usize, Arc<CompiledProbe>>,
    mem: MemConfig,
    base: u32,
    /// Index of the next site within the current kernel.
    local: usize,
    /// The current kernel's deferred adds.
    deferred: codegen::Deferred,
    /// The current kernel's registers stored around cold parts.
    save: codegen::SaveArea,
    /// Kernels each of whose blocks frees the kernel's registers around its probe's cold
    /// part ([`Report::freed`]).
    freed: Vec<String>,
}

impl MemBlocksFor<'_> {
    fn mem_probes(&self, kernel: &str) -> impl Iterator<Item = (usize, &CompiledProbe)> {
        self.wanted
            .get(kernel)
            .into_iter()
            .flatten()
            .filter_map(|i| self.compiled.get(i).map(|c| (*i, c.as_ref())))
            .filter(|(_, c)| c.site == SiteKind::Memory)
    }

    fn options_of(&self, i: usize) -> jit::passes::mem::MemOptions {
        let mut o = self.probes.probes[i].mem.unwrap_or_default();
        o.shared = self.mem.shared;
        o.local = self.mem.local;
        o
    }
}

impl jit::passes::mem::MemBlocks for MemBlocksFor<'_> {
    fn options(&mut self, kernel: &PtxFunction<'_>) -> Option<jit::passes::mem::MemOptions> {
        self.local = 0;
        self.deferred = codegen::Deferred {
            slots: Vec::new(),
            enabled: !self.mem.eager,
        };
        self.save = codegen::SaveArea::default();
        let mut any: Option<jit::passes::mem::MemOptions> =
            self.mem.trace.map(|_| jit::passes::mem::MemOptions {
                shared: self.mem.shared,
                local: self.mem.local,
                ..Default::default()
            });
        for (i, _) in self.mem_probes(kernel.name) {
            let o = self.options_of(i);
            any = Some(match any {
                None => o,
                Some(a) => jit::passes::mem::MemOptions {
                    loads: a.loads || o.loads,
                    stores: a.stores || o.stores,
                    atomics: a.atomics || o.atomics,
                    ..a
                },
            });
        }
        any
    }

    fn block(
        &mut self,
        kernel: &PtxFunction<'_>,
        site: &jit::passes::mem::MemSite,
        uid: u32,
    ) -> Option<jit::passes::mem::MemBlock> {
        let compiled = self.compiled;
        let wanted = self.wanted;
        let this = &*self;
        let probes: Vec<&CompiledProbe> = wanted
            .get(kernel.name)
            .into_iter()
            .flatten()
            .filter_map(|i| compiled.get(i).map(|c| (*i, c.as_ref())))
            .filter(|(_, c)| c.site == SiteKind::Memory)
            .filter(|(i, _)| {
                let o = this.options_of(*i);
                match site.op {
                    jit::passes::mem::MemOp::Load | jit::passes::mem::MemOp::Copy => o.loads,
                    jit::passes::mem::MemOp::Store => o.stores,
                    jit::passes::mem::MemOp::Atomic => o.atomics,
                }
            })
            .map(|(_, c)| c)
            .collect();
        if probes.is_empty() && self.mem.trace.is_none() {
            return None;
        }
        let local = self.local;
        self.local += 1;
        let split = self.mem.cold_split;
        Some(codegen::mem_block(
            &signature(kernel),
            &probes,
            site,
            self.base + site.index,
            local,
            uid,
            self.mem.sampling,
            &mut self.deferred,
            self.mem.trace,
            split.then_some(&mut self.save),
        ))
    }

    fn wants_live(&self) -> bool {
        self.mem.cold_split
    }

    fn prologue(&mut self, k: &PtxFunction<'_>, sites: &[jit::passes::mem::MemSite]) -> String {
        let trace = self.mem.trace.map(|_| codegen::trace_prologue());
        // `local` counts the kernel's blocks.
        if self.local > 0 && self.save.blocks == self.local {
            self.freed.push(k.name.to_string());
        }
        codegen::mem_prologue(sites.len().max(self.local), self.mem.sampling)
            + &self.deferred.prologue()
            + &self.save.prologue()
            + trace.as_deref().unwrap_or("")
    }

    fn epilogue(&mut self, _: &PtxFunction<'_>) -> String {
        let trace = self.mem.trace.map(codegen::trace_epilogue);
        self.deferred.epilogue() + trace.as_deref().unwrap_or("")
    }
}

/// The parameters a site block reads, from the parsed kernel.
pub fn signature(k: &PtxFunction<'_>) -> KernelSig {
    KernelSig {
        name: k.name.to_string(),
        params: k
            .params
            .iter()
            .map(|p| ParamSig {
                name: p.name.clone(),
                size: p.size,
                array: p.size != type_size(&p.ty),
            })
            .collect(),
    }
}

fn type_size(ty: &str) -> u32 {
    let t = ty.trim_start_matches('.');
    let digits: String = t.chars().skip_while(|c| !c.is_ascii_digit()).collect();
    digits.parse::<u32>().map(|b| b / 8).unwrap_or(0)
}

/// PTX bytes as text: up to the first NUL, invalid UTF-8 replaced.
pub fn ptx_text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// FNV-1a 64.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
