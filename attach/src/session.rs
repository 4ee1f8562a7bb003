//! The contract between `bpftime-super trace` (the session's owner) and the shim in the
//! traced application.
//!
//! | what | written by | read by |
//! |------|-----------|---------|
//! | `BPFTIME_ATTACH_SESSION` (JSON [`SessionConfig`]) | trace, into CMD's environment | the shim, at its first driver call |
//! | the region `/dev/shm/<region>`: every probe map, named `<object stem>:<map>` in its directory | trace ([`Session::create`]) | the shim ([`bindings`]) and trace (live printing) |
//! | the report file (JSON lines of [`ReportLine`]) | the shim, appending | trace: attach points, warnings, kernel names |
//!
//! The shim registers the region with the application's CUDA context
//! (`cuMemHostRegister`, device-mapped) and compiles every probe with its maps at the
//! region's device address, so GPU probes and the host read and write the same bytes.
//! Maps use `.sys`-scope atomics: the host sees updates while the kernels run.

use crate::AttachError;
use crate::instrument::{Bindings, Report};
use crate::probes::ProbeSet;
use ebpf::MapDef;
use ebpf::maps::MapOps;
use jit::{AtomicScope, MapBinding};
use shm_maps::arena::{Arena, Owner};
use shm_maps::{DirEntry, RegionConfig, ShmRegion};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

/// The environment variable that carries the session to the shim.
pub const ENV_SESSION: &str = "BPFTIME_ATTACH_SESSION";

/// Value sets of per-thread arrays when the session does not say (one per GPU thread of a
/// 264 × 1024 grid: every thread resident on an H100 at once).
pub const DEFAULT_THREADS: u32 = 264 * 1024;

/// What the shim needs to know.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionConfig {
    /// The region's name (under `/dev/shm`).
    pub region: String,
    /// The probe objects, in order.
    pub objects: Vec<String>,
    /// The report file the shim appends to.
    pub report: String,
    /// Value sets of per-thread arrays.
    pub threads: u32,
    /// Keep the maps (ring buffers excepted) in device memory, copied out to the region
    /// every `flush_ms` and at exit ([`crate::shim::devmaps`]); false: the probes update
    /// the region itself, through host-mapped memory.
    #[serde(default)]
    pub device_maps: bool,
    /// Milliseconds between copies of device-resident maps (0: only at exit).
    #[serde(default)]
    pub flush_ms: u64,
    /// Load instrumented PTX as a cubin from the driver's JIT linker (relocatable code: a
    /// much faster first load of big modules, slower kernels) instead of as PTX.
    #[serde(default)]
    pub jit_linker: bool,
    /// Memory probes see `.shared` accesses too.
    #[serde(default)]
    pub mem_shared: bool,
    /// Memory probes see `.local` accesses too.
    #[serde(default)]
    pub mem_local: bool,
    /// Memory probes run at every Nth execution of a site per thread (0 or 1: each).
    #[serde(default)]
    pub sample_every: u32,
    /// Memory probes run at most this many times per thread and site (0: no limit).
    #[serde(default)]
    pub sample_budget: u32,
    /// Memory probes update memory at every access instead of summing in registers until
    /// the kernel exits.
    #[serde(default)]
    pub mem_eager: bool,
    /// Memory probes with an early return are split, their rare path called
    /// ([`crate::instrument::MemConfig::cold_split`]; `trace --cold-split`).
    #[serde(default)]
    pub cold_split: bool,
    /// Stream every probed access to this file (`trace --mem-trace`).
    #[serde(default)]
    pub mem_trace: Option<String>,
    /// Records the device ring of `mem_trace` holds.
    #[serde(default)]
    pub mem_trace_records: u64,
    /// Log the application's copies, allocations, launches and syncs to this file
    /// (`trace --api-log`, [`crate::apilog`]).
    #[serde(default)]
    pub api_log: Option<String>,
    /// Hot attach: the file `trace` rewrites when `load`/`unload --name` change the probe
    /// objects (a [`HotObjects`]); the shim polls it ([`crate::shim::hot`]).
    #[serde(default)]
    pub hot_objects: Option<String>,
    /// Arena bytes kept free in the region for the maps of objects loaded later.
    #[serde(default)]
    pub hot_reserve: u64,
    /// `dlsym(…, "nvJitLinkVersion")` answers null in the application: Numba then takes
    /// nvJitLink as missing and compiles kernels to PTX (probes can attach) instead of
    /// LTO-IR (they cannot).
    #[serde(default)]
    pub hide_nvjitlink: bool,
    /// Some host probe names a function of a library other than libcuda: the shim patches
    /// the application's calls to it when it loads ([`crate::shim::symprobes`]).
    #[serde(default)]
    pub symbol_probes: bool,
}

impl SessionConfig {
    /// The memory-probe options of this session.
    pub fn mem(&self) -> crate::instrument::MemConfig {
        crate::instrument::MemConfig {
            shared: self.mem_shared,
            local: self.mem_local,
            sampling: crate::codegen::Sampling {
                every: self.sample_every.max(1),
                budget: self.sample_budget,
            },
            eager: self.mem_eager,
            trace: None,
            cold_split: self.cold_split,
        }
    }
}

impl SessionConfig {
    /// The session in the environment, if any.
    pub fn from_env() -> Result<Option<SessionConfig>, AttachError> {
        match std::env::var(ENV_SESSION) {
            Ok(s) if !s.is_empty() => {
                serde_json::from_str(&s)
                    .map(Some)
                    .map_err(|e| AttachError::Env {
                        var: ENV_SESSION,
                        what: format!("not a session: {e}"),
                    })
            }
            _ => Ok(None),
        }
    }

    /// The value of [`ENV_SESSION`].
    pub fn to_env(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The probe objects of a session after hot changes: what the shim instruments new
/// launches with from `generation` on.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HotObjects {
    /// Bumped by every change (the first file has 1).
    pub generation: u64,
    /// Every object's path, in load order (the session's first objects first).
    pub objects: Vec<String>,
}

impl HotObjects {
    /// Reads the file at `path`.
    pub fn read(path: &str) -> Option<HotObjects> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// Writes it to `path` atomically (a temporary file renamed over it).
    pub fn write(&self, path: &str) -> std::io::Result<()> {
        let tmp = format!("{path}.tmp");
        std::fs::write(&tmp, serde_json::to_vec(self).unwrap_or_default())?;
        std::fs::rename(tmp, path)
    }
}

/// One line of the report file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ReportLine {
    /// The shim is active in process `pid`.
    Started {
        /// The process.
        pid: u32,
        /// Probes loaded.
        probes: usize,
    },
    /// A module was loaded through `call`.
    Module {
        /// The driver call.
        call: String,
        /// Image kind.
        kind: String,
        /// Kernels in it.
        kernels: usize,
        /// Whether the instrumented PTX was loaded instead.
        instrumented: bool,
        /// Time spent instrumenting (µs, 0 when cached).
        micros: u64,
    },
    /// A probe attached to a kernel site.
    Attach {
        /// Probe program.
        probe: String,
        /// Kernel, mangled.
        kernel: String,
        /// Kernel, demangled.
        demangled: String,
        /// `kernel_id` in the probe ctx.
        kernel_id: u64,
        /// `entry` or `exit`.
        site: String,
        /// PTX line.
        line: u32,
    },
    /// The maps were placed in device memory.
    DeviceMaps {
        /// How many.
        maps: usize,
        /// How many of them are counters striped per SM.
        #[serde(default)]
        striped: usize,
        /// Milliseconds between copies to the region.
        flush_ms: u64,
    },
    /// Memory sites a module load instrumented: what each `site_id` names.
    Sites {
        /// The sites, by id.
        sites: Vec<crate::instrument::MemSiteInfo>,
    },
    /// The memory trace is complete.
    MemTrace {
        /// Records written to the file.
        records: u64,
        /// Records dropped because the device ring was full.
        dropped: u64,
        /// The file (`FILE`, or `FILE.<pid>` for a second process of the app).
        #[serde(default)]
        path: String,
    },
    /// The API log is complete.
    ApiLog {
        /// Calls logged.
        events: u64,
        /// The file (`FILE`, or `FILE.<pid>` for a second process of the app).
        path: String,
    },
    /// A host probe ran on a driver function at this address (its ctx's `ip`), so map
    /// keys equal to it can be printed as the function's name.
    HostFunction {
        /// The function's export name.
        name: String,
        /// Its address in the application.
        ip: u64,
    },
    /// A calibration of the GPU's `%globaltimer` against `CLOCK_MONOTONIC`
    /// ([`crate::shim::clock`]).
    Clock {
        /// `start`, `periodic` or `exit`.
        when: String,
        /// `%globaltimer − CLOCK_MONOTONIC`, ns.
        offset_ns: i64,
        /// Half the best round trip, ns.
        uncertainty_ns: u64,
        /// `CLOCK_MONOTONIC` when it was measured.
        at_ns: u64,
    },
    /// A hot change of the probe objects is in effect: new launches use it.
    Hot {
        /// Its generation.
        generation: u64,
        /// Objects in the session now.
        objects: usize,
    },
    /// Something the user should know.
    Warning {
        /// The text.
        what: String,
    },
}

impl ReportLine {
    /// The report lines of one module load.
    pub fn from_report(call: &str, r: &Report, instrumented: bool, micros: u64) -> Vec<ReportLine> {
        let mut v = vec![ReportLine::Module {
            call: call.to_string(),
            kind: r.kind.clone(),
            kernels: r.kernels.len(),
            instrumented,
            micros,
        }];
        v.extend(r.attached.iter().map(|a| ReportLine::Attach {
            probe: a.probe.clone(),
            kernel: a.kernel.clone(),
            demangled: a.demangled.clone(),
            kernel_id: a.kernel_id,
            site: match a.site {
                crate::SiteKind::Entry => "entry".into(),
                crate::SiteKind::Exit => "exit".into(),
                crate::SiteKind::Memory => "memory".into(),
                crate::SiteKind::HostEntry => "uprobe".into(),
                crate::SiteKind::HostExit => "uretprobe".into(),
            },
            line: a.line,
        }));
        if !r.sites.is_empty() {
            v.push(ReportLine::Sites {
                sites: r.sites.clone(),
            });
        }
        v.extend(
            r.warnings
                .iter()
                .map(|w| ReportLine::Warning { what: w.clone() }),
        );
        v
    }
}

/// Appends `lines` to the report file at `path` (one `write` per line, `O_APPEND`), so
/// several processes of one application can share it.
pub fn append_report(path: &str, lines: &[ReportLine]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    for l in lines {
        let mut s = serde_json::to_string(l).map_err(std::io::Error::other)?;
        s.push('\n');
        f.write_all(s.as_bytes())?;
    }
    Ok(())
}

/// One map of the session.
pub struct SessionMap {
    /// Its region name, `<object stem>:<map>`.
    pub name: String,
    /// Its object's index.
    pub object: usize,
    /// Its definition.
    pub def: MapDef,
    /// The live map.
    pub ops: Arc<dyn MapOps>,
}

/// The session's owner side: the region and its maps.
pub struct Session {
    /// What the shim gets.
    pub config: SessionConfig,
    /// The region.
    pub region: Arc<ShmRegion>,
    /// Every map, in object and name order.
    pub maps: Vec<SessionMap>,
    /// The region's arena: what the maps took, and what is left for objects loaded later.
    arena: Arena,
}

impl Session {
    /// Creates region `config.region` holding every map of `probes`.
    pub fn create(config: SessionConfig, probes: &ProbeSet) -> Result<Session, AttachError> {
        let err = |what: String| AttachError::Region {
            region: config.region.clone(),
            what,
        };
        let mut sizes = Vec::new();
        for (i, o) in probes.objects.iter().enumerate() {
            for d in o.maps.values() {
                let len = shm_maps::maps::layout_size(d, config.threads)
                    .map_err(|e| err(format!("map `{}`: {e}", d.name)))?;
                sizes.push((i, d.clone(), len));
            }
        }
        let arena_size = sizes
            .iter()
            .map(|(_, _, l)| l.div_ceil(64) * 64)
            .sum::<u64>()
            + 4096
            + config.hot_reserve;
        let cfg = RegionConfig {
            queue_capacity: 16,
            max_clients: 1,
            completions_per_client: 1,
            message_slots: 16,
            max_maps: (sizes.len() as u32).max(16) + if config.hot_reserve > 0 { 64 } else { 0 },
            max_records: 1,
            arena_size,
            // Trace sessions are not recovered.
            checkpoint_size: 0,
            queues: 1,
        };
        let region = Arc::new(
            ShmRegion::create(
                &config.region,
                &cfg,
                0o600,
                shm_maps::region::OnStale::Replace,
            )
            .map_err(|e| err(e.to_string()))?,
        );
        let mut session = Session {
            config,
            region,
            maps: Vec::new(),
            arena: Arena::new(0, 64),
        };
        session.arena = Arena::new(session.region.header().arena_size, 64);
        for (object, def, len) in sizes {
            session.add_map(probes, object, def, len)?;
        }
        session.region.set_ready();
        Ok(session)
    }

    /// Creates the maps of object `object` of `probes` (an object loaded after the start:
    /// `probes` is the session's new set) in the region's free arena.
    pub fn add_object(&mut self, probes: &ProbeSet, object: usize) -> Result<(), AttachError> {
        let o = probes
            .objects
            .get(object)
            .ok_or_else(|| AttachError::Region {
                region: self.config.region.clone(),
                what: format!("no object {object}"),
            })?;
        for d in o.maps.values() {
            let len = shm_maps::maps::layout_size(d, self.config.threads).map_err(|e| {
                AttachError::Region {
                    region: self.config.region.clone(),
                    what: format!("map `{}`: {e}", d.name),
                }
            })?;
            self.add_map(probes, object, d.clone(), len)?;
        }
        Ok(())
    }

    fn add_map(
        &mut self,
        probes: &ProbeSet,
        object: usize,
        def: ebpf::MapDef,
        len: u64,
    ) -> Result<(), AttachError> {
        let name = probes.map_name(object, &def.name);
        let err = |what: String| AttachError::Region {
            region: self.config.region.clone(),
            what: format!("map `{name}`: {what}"),
        };
        let region = &self.region;
        let off = self.arena.alloc(len, Owner::Service).map_err(|e| {
            err(format!(
                "{e} (trace --hot-reserve-mib makes room for maps loaded later)"
            ))
        })?;
        let threads = if def.kind == ebpf::MapKind::PerThreadArray {
            self.config.threads
        } else {
            1
        };
        let ops = shm_maps::maps::create_in(region, off, &def, threads)
            .map_err(|e| err(e.to_string()))?;
        region
            .register_map(&DirEntry {
                name: name.clone(),
                kind: def.kind.id(),
                key_size: def.key_size,
                value_size: def.value_size,
                max_entries: def.max_entries,
                flags: def.flags,
                data_off: off,
                data_len: len,
                threads,
            })
            .ok_or_else(|| err("no directory slot (names are at most 64 bytes)".into()))?;
        self.maps.push(SessionMap {
            name,
            object,
            def,
            ops,
        });
        Ok(())
    }
}

/// Shim side: every probe map of `probes`, found by name in `region`, at its device
/// address (`device_base` is where the region's first byte is mapped on the device).
pub fn bindings(
    region: &ShmRegion,
    probes: &ProbeSet,
    device_base: u64,
) -> Result<Bindings, AttachError> {
    let host_base = region.base().as_ptr() as u64;
    let mut out: Bindings = Vec::with_capacity(probes.objects.len());
    for (i, o) in probes.objects.iter().enumerate() {
        let mut by_name = BTreeMap::new();
        for d in o.maps.values() {
            let name = probes.map_name(i, &d.name);
            let err = |what: String| AttachError::Region {
                region: region.name().to_string(),
                what: format!("map `{name}`: {what}"),
            };
            let e = region
                .find_map(&name)
                .ok_or_else(|| err("not in the region's directory".into()))?;
            if e.kind != d.kind.id()
                || e.key_size != d.key_size
                || e.value_size != d.value_size
                || e.max_entries != d.max_entries
            {
                return Err(err(format!(
                    "the region holds kind {} key {} value {} entries {}, the program declares {:?} {} {} {}",
                    e.kind,
                    e.key_size,
                    e.value_size,
                    e.max_entries,
                    d.kind,
                    d.key_size,
                    d.value_size,
                    d.max_entries
                )));
            }
            let host = region
                .arena_ptr(e.data_off, e.data_len)
                .ok_or_else(|| err("outside the arena".into()))?;
            by_name.insert(
                d.name.clone(),
                MapBinding {
                    kind: d.kind,
                    base_addr: device_base + (host.as_ptr() as u64 - host_base),
                    key_size: d.key_size,
                    value_size: d.value_size,
                    max_entries: d.max_entries,
                    threads: e.threads.max(1),
                    scope: AtomicScope::Sys,
                    stripes: 1,
                    stripe_stride: 0,
                    tier: None,
                },
            );
        }
        out.push(by_name);
    }
    Ok(out)
}

/// Where each probe map lies in `region`'s mapping: `(offset from the region's first
/// byte, length)`. Maps missing from the directory are left out.
pub fn map_spans(region: &ShmRegion, probes: &ProbeSet) -> Vec<(u64, u64)> {
    let host_base = region.base().as_ptr() as u64;
    let mut out = Vec::new();
    for (i, o) in probes.objects.iter().enumerate() {
        for d in o.maps.values() {
            if let Some(e) = region.find_map(&probes.map_name(i, &d.name))
                && let Some(host) = region.arena_ptr(e.data_off, e.data_len)
            {
                out.push((host.as_ptr() as u64 - host_base, e.data_len));
            }
        }
    }
    out
}

/// Offline bindings (for `bpftime-super instrument` and tests): every map at a distinct,
/// 64-byte aligned placeholder address, as if the region were mapped at `base`.
pub fn placeholder_bindings(probes: &ProbeSet, base: u64, threads: u32) -> Bindings {
    let mut next = base;
    probes
        .objects
        .iter()
        .map(|o| {
            o.maps
                .values()
                .map(|d| {
                    let t = if d.kind == ebpf::MapKind::PerThreadArray {
                        threads
                    } else {
                        1
                    };
                    let len = shm_maps::maps::layout_size(d, t).unwrap_or(64);
                    let b = MapBinding {
                        kind: d.kind,
                        base_addr: next,
                        key_size: d.key_size,
                        value_size: d.value_size,
                        max_entries: d.max_entries,
                        threads: t,
                        scope: AtomicScope::Sys,
                        stripes: 1,
                        stripe_stride: 0,
                        tier: None,
                    };
                    next += len.div_ceil(64) * 64;
                    (d.name.clone(), b)
                })
                .collect()
        })
        .collect()
}
