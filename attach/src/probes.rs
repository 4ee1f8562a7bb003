//! Probe programs: loading them from `clang -target bpf` objects, verifying them against the
//! probe ctx, and matching their section targets to kernel names.
//!
//! | section                  | site                                  |
//! |--------------------------|---------------------------------------|
//! | `kprobe/<pattern>`       | kernel entry, every thread            |
//! | `kretprobe/<pattern>`    | before every `ret`/`exit` of the kernel |
//! | `memprobe/<pattern>`     | at every global or generic load, store, atomic and `cp.async` ([`ebpf::MemCtx`]) |
//! | `memprobe.load/<pattern>` | loads and `cp.async` copies only |
//! | `memprobe.store/<pattern>` | stores only |
//! | `uprobe/libcuda.so:<function>` | on the host, when the application calls a driver function the shim wraps ([`crate::shim::uprobes`]); the ctx is x86-64 `struct pt_regs` |
//! | `uprobe/<library>:<function>` | on the host, when the application (or a library) calls that export of another shared library ([`crate::shim::symprobes`]); same ctx |
//! | `uretprobe/libcuda.so:<function>` | on the host, when it returns (`PT_REGS_RC` = its `CUresult`) |
//!
//! A pattern is a mangled name (`_Z9vectorAddPKfS0_Pfi`), a demangled name with or without
//! its parameter list (`vectorAdd`, `vectorAdd(float const*, float const*, float*, int)`),
//! or a glob (`*`, `?`) over any of the three.
//!
//! Programs of one object share its maps by name; every object's maps are named
//! `<object stem>:<map>` in the session's region.

use crate::AttachError;
use ebpf::verifier::{CtxKind, VerifyOptions, verify};
use ebpf::{MapDef, MemCtx, ProbeCtx, ProgKind, Program};
use std::collections::BTreeMap;
use std::path::Path;

/// Where in a kernel a probe runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteKind {
    /// At the kernel's entry.
    Entry,
    /// Before each `ret`/`exit`.
    Exit,
    /// At memory accesses ([`Probe::mem`] says which).
    Memory,
    /// On the host, at a driver function's entry ([`Probe::host_fn`]).
    HostEntry,
    /// On the host, at its return.
    HostExit,
}

impl SiteKind {
    /// The ctx's `site` value.
    pub fn code(self) -> u32 {
        match self {
            SiteKind::Entry => 0,
            SiteKind::Exit => 1,
            SiteKind::Memory => 2,
            SiteKind::HostEntry => 3,
            SiteKind::HostExit => 4,
        }
    }

    /// Whether probes of this kind run in GPU kernels.
    pub fn on_gpu(self) -> bool {
        matches!(self, SiteKind::Entry | SiteKind::Exit | SiteKind::Memory)
    }
}

/// One verified probe program.
#[derive(Clone, Debug)]
pub struct Probe {
    /// Index of its object in [`ProbeSet::objects`].
    pub object: usize,
    /// The linked program.
    pub program: Program,
    /// Entry or exit.
    pub site: SiteKind,
    /// The section's kernel pattern.
    pub pattern: String,
    /// Ctx words the program may read ([`ebpf::verifier::Verified::ctx_words_read`]).
    pub ctx_words: u64,
    /// Stack bytes of the deepest call chain.
    pub stack_size: u32,
    /// Maps (by index in `program.maps`) the program only adds to
    /// ([`ebpf::verifier::Verified::maps_add_only`]).
    pub maps_add_only: u64,
    /// Maps (by index in `program.maps`) the program may write
    /// ([`ebpf::verifier::Verified::maps_written`]).
    pub maps_written: u64,
    /// For [`SiteKind::Memory`]: which accesses (shared and local memory off; the session
    /// turns them on).
    pub mem: Option<jit::passes::mem::MemOptions>,
    /// What each load of the program reads through the ctx
    /// ([`ebpf::verifier::Verified::ctx_loads`]).
    pub ctx_loads: std::collections::BTreeMap<usize, Option<i64>>,
    /// Frame slots the JIT keeps in registers ([`jit::JitOptions::stack_regs`], from
    /// [`ebpf::verifier::Verified::stack_registers`]); empty with `BPFTIME_STACK_REGS=0`
    /// (for comparisons).
    pub stack_regs: std::collections::BTreeMap<usize, i64>,
    /// Its atomics that return a value order nothing else ([`jit::JitOptions::relaxed_atomics`]):
    /// when its object asks ([`RELAXED_ATOMICS_SECTION`]), unless
    /// `BPFTIME_RELAXED_ATOMICS=0`.
    pub relaxed_atomics: bool,
    /// For host probes: the driver functions (one, or every wrapped one for `*`).
    pub host_fns: Vec<crate::api::Api>,
    /// For host probes on another library: `(library, function)`.
    pub host_sym: Option<(String, String)>,
}

/// One object file's maps.
#[derive(Clone, Debug)]
pub struct ProbeObject {
    /// The path it was read from.
    pub path: String,
    /// Its file stem, the prefix of its maps' names.
    pub stem: String,
    /// Every map its probes use, by name.
    pub maps: BTreeMap<String, MapDef>,
}

/// Every probe of a session.
#[derive(Clone, Debug, Default)]
pub struct ProbeSet {
    /// The objects, in the order given.
    pub objects: Vec<ProbeObject>,
    /// The probes, in object and section order.
    pub probes: Vec<Probe>,
}

/// The section by which an object asks that its GPU probes' fetching atomics be relaxed
/// (`BPFTIME_RELAXED_ATOMICS` in `include/bpftime_super.h`; [`jit::JitOptions::relaxed_atomics`]).
pub const RELAXED_ATOMICS_SECTION: &str = ".bpftime.relaxed_atomics";

/// Whether the object has [`RELAXED_ATOMICS_SECTION`].
fn asks_relaxed_atomics(obj: &ebpf::elf::Object) -> bool {
    obj.sections
        .iter()
        .any(|s| s.name == RELAXED_ATOMICS_SECTION)
}

impl ProbeSet {
    /// Loads and verifies every kprobe/kretprobe program of the objects at `paths`.
    pub fn load<P: AsRef<Path>>(paths: &[P]) -> Result<ProbeSet, AttachError> {
        let mut files = Vec::new();
        for p in paths {
            let p = p.as_ref();
            let bytes = std::fs::read(p).map_err(|source| AttachError::Read {
                path: p.display().to_string(),
                source,
            })?;
            files.push((p.display().to_string(), bytes));
        }
        ProbeSet::from_objects(&files)
    }

    /// [`ProbeSet::load`] over `(path, bytes)` pairs.
    pub fn from_objects(files: &[(String, Vec<u8>)]) -> Result<ProbeSet, AttachError> {
        let mut set = ProbeSet::default();
        for (path, bytes) in files {
            let obj = ebpf::elf::Object::parse(bytes, path).map_err(|source| AttachError::Elf {
                path: path.clone(),
                source: Box::new(source),
            })?;
            let relaxed = asks_relaxed_atomics(&obj)
                && std::env::var("BPFTIME_RELAXED_ATOMICS").as_deref() != Ok("0");
            let stem = stem_of(path, &set.objects);
            let index = set.objects.len();
            let mut maps = BTreeMap::new();
            let mut found = 0;
            for info in &obj.programs {
                let (site, pattern) = match &info.kind {
                    ProgKind::Kprobe(t) => (SiteKind::Entry, t.clone()),
                    ProgKind::Kretprobe(t) => (SiteKind::Exit, t.clone()),
                    ProgKind::Memprobe(t) => (SiteKind::Memory, t.clone()),
                    ProgKind::Uprobe(t) => (SiteKind::HostEntry, t.clone()),
                    ProgKind::Uretprobe(t) => (SiteKind::HostExit, t.clone()),
                    _ => continue,
                };
                let (host_fns, host_sym) = if site.on_gpu() {
                    (Vec::new(), None)
                } else {
                    use crate::api::Target;
                    match crate::api::target(&pattern).map_err(|what| AttachError::Section {
                        path: path.clone(),
                        section: info.section.clone(),
                        what,
                    })? {
                        Target::Driver(f) => (f, None),
                        Target::Symbol { lib, func } => (Vec::new(), Some((lib, func))),
                    }
                };
                found += 1;
                if pattern.is_empty() {
                    return Err(AttachError::Section {
                        path: path.clone(),
                        section: info.section.clone(),
                        what: "names no kernel (expected kprobe/<kernel or glob>, or memprobe/<kernel or glob>)".into(),
                    });
                }
                let program = obj
                    .program(Some(&info.name))
                    .map_err(|source| AttachError::Elf {
                        path: path.clone(),
                        source: Box::new(source),
                    })?;
                let ctx = match site {
                    SiteKind::Memory => CtxKind::Probe { size: MemCtx::SIZE },
                    SiteKind::Entry | SiteKind::Exit => CtxKind::Probe {
                        size: ProbeCtx::SIZE,
                    },
                    SiteKind::HostEntry | SiteKind::HostExit => CtxKind::Probe {
                        size: crate::api::HOST_CTX_SIZE,
                    },
                };
                let opts = VerifyOptions {
                    ctx,
                    ..VerifyOptions::default()
                };
                let v = verify(&program, &opts).map_err(|source| AttachError::Rejected {
                    program: program.name.clone(),
                    source: Box::new(source),
                })?;
                for m in &program.maps {
                    maps.entry(m.name.clone()).or_insert_with(|| m.clone());
                }
                set.probes.push(Probe {
                    object: index,
                    site,
                    pattern,
                    ctx_words: v.ctx_words_read,
                    stack_size: v.max_stack_depth as u32,
                    maps_add_only: v.maps_add_only,
                    maps_written: v.maps_written,
                    mem: (site == SiteKind::Memory).then(|| mem_options(&info.section)),
                    ctx_loads: v.ctx_loads.clone(),
                    stack_regs: match std::env::var("BPFTIME_STACK_REGS").as_deref() {
                        Ok("0") => Default::default(),
                        _ => v.stack_registers(),
                    },
                    relaxed_atomics: relaxed,
                    host_fns,
                    host_sym,
                    program,
                });
            }
            if found == 0 {
                return Err(AttachError::NoProbes { path: path.clone() });
            }
            set.objects.push(ProbeObject {
                path: path.clone(),
                stem,
                maps,
            });
        }
        Ok(set)
    }

    /// Whether there is nothing to attach.
    pub fn is_empty(&self) -> bool {
        self.probes.is_empty()
    }

    /// The probes whose pattern matches `kernel` (mangled), with their indices.
    pub fn matching<'a>(&'a self, kernel: &'a str) -> impl Iterator<Item = (usize, &'a Probe)> {
        let names = KernelNames::new(kernel);
        self.probes
            .iter()
            .enumerate()
            .filter(move |(_, p)| p.site.on_gpu() && names.matches(&p.pattern))
    }

    /// The region name of map `map` of object `object`.
    pub fn map_name(&self, object: usize, map: &str) -> String {
        format!("{}:{map}", self.objects[object].stem)
    }

    /// Whether map `map` of object `object` is an array that every probe of the object
    /// using it only adds to (64-bit atomic adds, never read): its device copy may be
    /// striped per SM and summed by the host.
    pub fn add_only(&self, object: usize, map: &str) -> bool {
        let Some(def) = self.objects.get(object).and_then(|o| o.maps.get(map)) else {
            return false;
        };
        def.kind == ebpf::MapKind::Array
            && self.probes.iter().filter(|p| p.object == object).all(|p| {
                match p.program.maps.iter().position(|m| m.name == map) {
                    Some(i) => i < 64 && p.maps_add_only & (1 << i) != 0,
                    None => true,
                }
            })
    }
}

/// Ctx words of [`ebpf::ProbeCtx`]'s `correlation_id` and `launch_time`.
pub const LAUNCH_WORDS: u64 =
    (1 << (ebpf::ProbeCtx::CORRELATION_ID / 8)) | (1 << (ebpf::ProbeCtx::LAUNCH_TIME / 8));

impl ProbeSet {
    /// Whether some kernel entry or exit probe, or host probe, reads the launch's
    /// correlation id or launch time: launches are then numbered and timed
    /// ([`crate::shim::launch`]).
    pub fn reads_launch(&self) -> bool {
        self.probes
            .iter()
            .any(|p| p.site != SiteKind::Memory && p.ctx_words & LAUNCH_WORDS != 0)
    }

    /// Whether no GPU probe of object `object` writes map `map` while some GPU probe uses
    /// it: the host owns its contents (a configuration, ranges a host probe keeps), so its
    /// device copy follows the region ([`crate::shim::devmaps::sync_inbound`]) instead of
    /// being copied back. Ring buffers never are.
    pub fn gpu_reads_only(&self, object: usize, map: &str) -> bool {
        let Some(def) = self.objects.get(object).and_then(|o| o.maps.get(map)) else {
            return false;
        };
        let gpu = || {
            self.probes
                .iter()
                .filter(move |p| p.object == object && p.site.on_gpu())
                .filter_map(|p| {
                    let i = p.program.maps.iter().position(|m| m.name == map)?;
                    p.program.maps_referenced()[i].then_some((p, i))
                })
        };
        def.kind != ebpf::MapKind::RingBuf
            && gpu().next().is_some()
            && gpu().all(|(p, i)| i < 64 && p.maps_written & (1 << i) == 0)
    }

    /// Whether map `map` of object `object` is [`ProbeSet::gpu_reads_only`] and something on
    /// the host may change it: a host probe writes it, or it is global data (a
    /// configuration another process may rewrite in the region). Only such maps are worth
    /// the shim's polling; a map nobody on the host writes keeps its first contents.
    pub fn host_owned(&self, object: usize, map: &str) -> bool {
        let Some(def) = self.objects.get(object).and_then(|o| o.maps.get(map)) else {
            return false;
        };
        let host_writes = self
            .probes
            .iter()
            .filter(|p| p.object == object && !p.site.on_gpu())
            .any(|p| {
                p.program
                    .maps
                    .iter()
                    .position(|m| m.name == map)
                    .is_some_and(|i| i >= 64 || p.maps_written & (1 << i) != 0)
            });
        self.gpu_reads_only(object, map)
            && (host_writes || matches!(def.origin, ebpf::MapOrigin::GlobalData { .. }))
    }
}

/// Which accesses a `memprobe` section wants: `memprobe.load/` loads and copies,
/// `memprobe.store/` stores, `memprobe/` every access (atomics included).
pub fn mem_options(section: &str) -> jit::passes::mem::MemOptions {
    let mut o = jit::passes::mem::MemOptions::default();
    if section.starts_with("memprobe.load/") {
        o.stores = false;
        o.atomics = false;
    } else if section.starts_with("memprobe.store/") {
        o.loads = false;
        o.atomics = false;
    }
    o
}

/// The stem a probe object's maps are named with, from its path (`x.bpf.o` → `x`), before
/// any suffix that keeps it apart from another object's.
pub fn stem_of_path(path: &str) -> String {
    let file = Path::new(path)
        .file_name()
        .map(|f| f.to_string_lossy().to_string())
        .unwrap_or_else(|| path.to_string());
    file.strip_suffix(".bpf.o")
        .or_else(|| file.strip_suffix(".o"))
        .unwrap_or(&file)
        .to_string()
}

fn stem_of(path: &str, taken: &[ProbeObject]) -> String {
    let base = stem_of_path(path);
    let mut stem = base.clone();
    let mut k = 2;
    while taken.iter().any(|o| o.stem == stem) {
        stem = format!("{base}{k}");
        k += 1;
    }
    stem
}

/// A kernel's names, for matching: mangled, demangled, and demangled without parameters.
#[derive(Clone, Debug)]
pub struct KernelNames {
    /// As in the PTX.
    pub mangled: String,
    /// Demangled (equal to `mangled` for `extern "C"` kernels).
    pub demangled: String,
    /// `demangled` up to its parameter list.
    pub base: String,
}

impl KernelNames {
    /// The names of `mangled`.
    pub fn new(mangled: &str) -> Self {
        let demangled = demangle(mangled);
        let base = demangled
            .split_once('(')
            .map(|(b, _)| b.to_string())
            .unwrap_or_else(|| demangled.clone());
        KernelNames {
            mangled: mangled.to_string(),
            demangled,
            base,
        }
    }

    /// Whether `pattern` selects this kernel.
    pub fn matches(&self, pattern: &str) -> bool {
        [&self.mangled, &self.demangled, &self.base]
            .iter()
            .any(|n| glob(pattern, n))
    }
}

/// Demangles an Itanium C++ name; other names come back unchanged.
pub fn demangle(name: &str) -> String {
    if !name.starts_with("_Z") {
        return name.to_string();
    }
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle(&cpp_demangle::DemangleOptions::default()).ok())
        .unwrap_or_else(|| name.to_string())
}

/// Shell-style glob: `*` any run, `?` one character, everything else literal.
pub fn glob(pattern: &str, s: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), s.chars().collect());
    let (mut i, mut j) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    while i < p.len() && p[i] == '*' {
        i += 1;
    }
    i == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_like_a_shell() {
        assert!(glob("*", "anything"));
        assert!(glob("vec*", "vectorAdd"));
        assert!(glob("*Add", "vectorAdd"));
        assert!(glob("v?ctorAdd", "vectorAdd"));
        assert!(!glob("vec", "vectorAdd"));
        assert!(!glob("*Sub", "vectorAdd"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
    }

    #[test]
    fn kernel_names_match_mangled_demangled_and_base() {
        let k = KernelNames::new("_Z9vectorAddPKfS0_Pfi");
        assert_eq!(k.base, "vectorAdd");
        assert_eq!(
            k.demangled,
            "vectorAdd(float const*, float const*, float*, int)"
        );
        for p in [
            "_Z9vectorAddPKfS0_Pfi",
            "vectorAdd",
            "vector*",
            "vectorAdd(float const*, float const*, float*, int)",
            "*",
        ] {
            assert!(k.matches(p), "{p}");
        }
        assert!(!k.matches("sgemm"));
        let c = KernelNames::new("scale_add");
        assert!(c.matches("scale_add") && c.matches("scale_*"));
    }
}
