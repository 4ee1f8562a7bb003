//! The wrapped driver calls. Each one gives the instrumenter the image the application
//! passed and loads what comes back: the instrumented PTX, or the original.
//!
//! | call | image | loads instead |
//! |------|-------|---------------|
//! | `cuModuleLoadData`, `cuModuleLoadDataEx`, `cuModuleLoadFatBinary` | PTX, fat binary, wrapper, cubin | instrumented PTX through the same call (`cuModuleLoadData` for fat binaries) |
//! | `cuModuleLoad`, `cuLibraryLoadFromFile` | the file's bytes | `cuModuleLoadData` / `cuLibraryLoadData` of the PTX |
//! | `cuLibraryLoadData` | as `cuModuleLoadData` (cudart's registered fat binaries arrive here) | same call, same options |
//! | `cuLinkAddData`, `cuLinkAddFile` | PTX or fat-binary inputs of the JIT linker | a PTX input |
//! | `cuGetProcAddress`, `dlsym` | — | these wrappers in place of the real addresses |
//! | `cuCtxDestroy`, `cuDevicePrimaryCtxRelease`/`Reset` | — | device-resident maps copied out first ([`super::devmaps`]) |
//!
//! Nothing here may crash or fail the application: every hook catches panics, and when the
//! driver rejects an instrumented image the original is loaded and a warning reported. With
//! no session in the environment every hook is a plain forward.

use super::driver::{self, CUDA_SUCCESS, CuResult, Handle, Hook};
use super::launch;
use crate::instrument::{Instrumenter, Outcome};
use crate::probes::ProbeSet;
use crate::session::{self, ReportLine, SessionConfig};
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, OnceLock};

/// The shim's state for this process.
struct State {
    config: SessionConfig,
    probes: Arc<ProbeSet>,
    /// The instrumenter, once a CUDA context existed to register the region with.
    inst: OnceLock<Option<Arc<Instrumenter>>>,
    /// The instrumenter of the latest hot change of the objects ([`super::hot`]), which
    /// replaces `inst` for every module loaded or moved after it.
    current: std::sync::RwLock<Option<Arc<Instrumenter>>>,
    /// Where the region's first byte is mapped on the device (set up with `inst`).
    device_base: OnceLock<u64>,
    /// The application's context at setup: the hot-attach thread makes it current.
    ctx: OnceLock<usize>,
    region: Option<shm_maps::ShmRegion>,
    /// Instrumented images stay alive for the process (lazy loading may read them later).
    keep: Mutex<Vec<Arc<CString>>>,
}

static STATE: OnceLock<Option<State>> = OnceLock::new();

fn state() -> Option<&'static State> {
    STATE.get_or_init(init).as_ref()
}

/// The session's probes and its region's name, for the host probes.
pub(crate) fn host_probe_inputs() -> Option<(Arc<ProbeSet>, String)> {
    let st = state()?;
    Some((st.probes.clone(), st.config.region.clone()))
}

/// The API log this session writes, if any.
pub(crate) fn api_log_path() -> Option<String> {
    state()?.config.api_log.clone()
}

/// The instrumenter new modules get (the latest hot change's, else the first).
pub(crate) fn current_instrumenter() -> Option<Arc<Instrumenter>> {
    state()?.instrumenter()
}

/// Keeps an image the driver may read later alive for the process.
pub(crate) fn keep(image: Arc<CString>) {
    if let Some(st) = state()
        && let Ok(mut k) = st.keep.lock()
    {
        k.push(image);
    }
}

/// Polls the hot objects file every 50 ms (a thread of the shim).
fn hot_watch(path: String) {
    // A change may start the clock (its kernel runs in the application's context).
    if let Some(st) = state()
        && let Some(&ctx) = st.ctx.get()
        // SAFETY: the real cuCtxSetCurrent's slot holds that signature.
        && let Ok(set) = unsafe { fn_of::<driver::CtxSetCurrent>(Hook::CtxSetCurrent) }
    {
        // SAFETY: the application's live context, made current on this thread.
        unsafe { set(ctx as Handle) };
    }
    loop {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let Some(st) = state() else { return };
        let Some(Some(base)) = st.inst.get() else {
            continue;
        };
        let _ = catch_unwind(AssertUnwindSafe(|| st.hot_poll(&path, base)));
    }
}

/// Records a file the application loaded (for hot attach).
///
/// # Safety
/// `path` is NUL-terminated (the load succeeded with it), `handle` the driver wrote.
unsafe fn remember_file(handle: *mut Handle, path: *const c_char, library: bool) {
    if state().is_none_or(|st| st.config.hot_objects.is_none()) || path.is_null() {
        return;
    }
    // SAFETY: caller's contract.
    let p = unsafe { CStr::from_ptr(path) }
        .to_string_lossy()
        .to_string();
    if let Ok(bytes) = std::fs::read(p) {
        remember(handle, Some(&bytes), library);
    }
}

/// Records what the application loaded (for hot attach to move its functions later).
fn remember(handle: *mut Handle, image: Option<&[u8]>, library: bool) {
    let Some(st) = state() else { return };
    if st.config.hot_objects.is_none() || handle.is_null() {
        return;
    }
    if let Some(bytes) = image {
        // SAFETY: the driver wrote the handle (the load succeeded).
        super::hot::record(unsafe { *handle }, bytes, library);
    }
}

pub(crate) fn report(lines: &[ReportLine]) {
    if let Some(st) = STATE.get().and_then(|s| s.as_ref()) {
        let _ = session::append_report(&st.config.report, lines);
    }
}

fn init() -> Option<State> {
    let config = match SessionConfig::from_env() {
        Ok(Some(c)) => c,
        Ok(None) => return None,
        Err(e) => {
            eprintln!("bpftime-super shim: {e}; probes disabled");
            return None;
        }
    };
    let warn = |what: String| {
        let _ = session::append_report(&config.report, &[ReportLine::Warning { what }]);
    };
    let probes = match ProbeSet::load(&config.objects) {
        Ok(p) => Arc::new(p),
        Err(e) => {
            warn(format!("probes disabled: {}", error_chain(&e)));
            return None;
        }
    };
    let region = match shm_maps::ShmRegion::open(&config.region) {
        Ok(r) => Some(r),
        Err(e) => {
            warn(format!(
                "probes disabled: session region `{}`: {e}",
                config.region
            ));
            return None;
        }
    };
    if probes.reads_launch() {
        launch::enable();
    }
    let _ = session::append_report(
        &config.report,
        &[ReportLine::Started {
            pid: std::process::id(),
            probes: probes.probes.len(),
        }],
    );
    Some(State {
        config,
        probes,
        inst: OnceLock::new(),
        current: std::sync::RwLock::new(None),
        device_base: OnceLock::new(),
        ctx: OnceLock::new(),
        region,
        keep: Mutex::new(Vec::new()),
    })
}

/// `e` and its sources, joined with `: `.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

impl State {
    /// Whether modules get instrumented: there are probes, or a memory trace.
    fn active(&self) -> bool {
        !self.probes.is_empty() || self.config.mem_trace.is_some()
    }

    /// The instrumenter for the current context's device, set up on first use: the region
    /// registered with CUDA, the maps bound at their device addresses; after a hot change,
    /// the change's.
    fn instrumenter(&self) -> Option<Arc<Instrumenter>> {
        let base = self
            .inst
            .get_or_init(|| match self.setup() {
                Ok(i) => {
                    let i = Arc::new(i);
                    if let Some(path) = self.config.hot_objects.clone() {
                        // A change made before this first module load applies to it.
                        self.hot_poll(&path, &i);
                        let _ = std::thread::Builder::new()
                            .name("bpftime-hot".into())
                            .spawn(move || hot_watch(path));
                    }
                    Some(i)
                }
                Err(what) => {
                    report(&[ReportLine::Warning {
                        what: format!("probes disabled: {what}"),
                    }]);
                    None
                }
            })
            .clone()?;
        match self.current.read().ok().and_then(|c| c.clone()) {
            Some(c) => Some(c),
            None => Some(base),
        }
    }

    /// Applies the hot objects file at `path` if its generation is new.
    fn hot_poll(&self, path: &str, base: &Arc<Instrumenter>) {
        let Some(h) = session::HotObjects::read(path) else {
            return;
        };
        if h.generation <= super::hot::generation() {
            return;
        }
        match self.hot_reload(&h.objects, base) {
            Ok(i) => {
                if let Ok(mut c) = self.current.write() {
                    *c = Some(Arc::new(i));
                }
                super::hot::set_generation(h.generation);
                report(&[ReportLine::Hot {
                    generation: h.generation,
                    objects: h.objects.len(),
                }]);
            }
            Err(what) => {
                // Not retried until the next change.
                super::hot::set_generation(h.generation);
                report(&[ReportLine::Warning {
                    what: format!(
                        "hot attach (generation {}): {what}; the probes stay as they were",
                        h.generation
                    ),
                }]);
            }
        }
    }

    /// The instrumenter for a new object set: the objects the session started with keep
    /// their maps' bindings (device copies included), the others are bound in the region.
    fn hot_reload(
        &self,
        objects: &[String],
        base: &Arc<Instrumenter>,
    ) -> Result<Instrumenter, String> {
        let probes = ProbeSet::load(objects).map_err(|e| error_chain(&e))?;
        if probes.probes.iter().any(|p| {
            !p.site.on_gpu()
                && !self
                    .probes
                    .objects
                    .iter()
                    .any(|o| o.path == probes.objects[p.object].path)
        }) {
            return Err(
                "host probes (uprobe/, uretprobe/) cannot be attached to a running program".into(),
            );
        }
        let region = self.region.as_ref().ok_or("no region")?;
        let d = *self
            .device_base
            .get()
            .ok_or("no device mapping of the region")?;
        let mut bindings = session::bindings(region, &probes, d).map_err(|e| e.to_string())?;
        for (i, o) in probes.objects.iter().enumerate() {
            if let Some(j) = self.probes.objects.iter().position(|b| b.path == o.path)
                && let Some(b) = base.bindings().get(j)
            {
                bindings[i] = b.clone();
            }
        }
        if probes.reads_launch() && !launch::on() {
            launch::enable();
            if launch::supported() {
                super::clock::start();
            }
        }
        Ok(base
            .sibling(Arc::new(probes), bindings)
            .with_launch_params(launch::on() && launch::supported()))
    }

    fn setup(&self) -> Result<Instrumenter, String> {
        // The first module load may come while the application captures a CUDA graph (lazy
        // loading at the first launch): calls a capture forbids would fail and invalidate
        // it. Relaxed mode on this thread allows them; the previous mode is restored.
        let _relaxed = RelaxedCapture::enter();
        let region = self.region.as_ref().ok_or("no region")?;
        // SAFETY: each pointer is the real driver entry of that name (or null, checked).
        unsafe {
            let get_dev: driver::CtxGetDevice = fn_of(Hook::CtxGetDevice)?;
            let attr: driver::DeviceGetAttribute = fn_of(Hook::DeviceGetAttribute)?;
            let register: driver::MemHostRegister = fn_of(Hook::MemHostRegister)?;
            let devptr: driver::MemHostGetDevicePointer = fn_of(Hook::MemHostGetDevicePointer)?;
            let mut dev: c_int = 0;
            check(get_dev(&mut dev), "cuCtxGetDevice (no current context)")?;
            let (mut major, mut minor) = (0, 0);
            check(
                attr(&mut major, driver::ATTR_CC_MAJOR, dev),
                "cuDeviceGetAttribute",
            )?;
            check(
                attr(&mut minor, driver::ATTR_CC_MINOR, dev),
                "cuDeviceGetAttribute",
            )?;
            let base = region.base().as_ptr() as *mut c_void;
            check(
                register(base, region.len(), driver::HOST_REGISTER_FLAGS),
                "cuMemHostRegister of the session region",
            )?;
            let mut d: u64 = 0;
            check(devptr(&mut d, base, 0), "cuMemHostGetDevicePointer")?;
            let _ = self.device_base.set(d);
            if let Ok(cur) = fn_of::<driver::CtxGetCurrent>(Hook::CtxGetCurrent) {
                let mut c: Handle = std::ptr::null_mut();
                if cur(&mut c) == CUDA_SUCCESS && !c.is_null() {
                    let _ = self.ctx.set(c as usize);
                }
            }
            let mut bindings =
                session::bindings(region, &self.probes, d).map_err(|e| e.to_string())?;
            let mut traced: Option<crate::instrument::TraceRing> = None;
            if self.config.mem_trace.is_some() && !self.config.device_maps {
                report(&[ReportLine::Warning {
                    what: "--mem-trace needs device maps (not --maps host): no trace".into(),
                }]);
            }
            if self.config.device_maps {
                let spans = session::map_spans(region, &self.probes);
                let host_base = region.base().as_ptr() as usize;
                let to_host = |dev_addr: u64| {
                    spans.iter().find_map(|&(off, len)| {
                        (d + off == dev_addr).then_some((host_base + off as usize, len as usize))
                    })
                };
                let period = std::time::Duration::from_millis(self.config.flush_ms);
                // Counter arrays (only ever added to) are striped per SM.
                let counters: Vec<u64> = self
                    .probes
                    .objects
                    .iter()
                    .enumerate()
                    .flat_map(|(i, o)| o.maps.keys().map(move |name| (i, name)))
                    .filter(|(i, name)| self.probes.add_only(*i, name))
                    .filter_map(|(i, name)| bindings.get(i)?.get(name).map(|b| b.base_addr))
                    .collect();
                let striped = |addr: u64| counters.contains(&addr);
                // Maps the GPU probes only read and the host may change follow the region (a
                // configuration, what host probes record); other maps of host probes stay
                // in the region, where the CPU updates them.
                let inbound_maps: Vec<u64> = self
                    .probes
                    .objects
                    .iter()
                    .enumerate()
                    .flat_map(|(i, o)| o.maps.keys().map(move |name| (i, name)))
                    .filter(|(i, name)| self.probes.host_owned(*i, name))
                    .filter_map(|(i, name)| bindings.get(i)?.get(name).map(|b| b.base_addr))
                    .collect();
                let host_maps: Vec<u64> = self
                    .probes
                    .probes
                    .iter()
                    .filter(|p| !p.site.on_gpu())
                    .flat_map(|p| {
                        let used = p.program.maps_referenced();
                        p.program
                            .maps
                            .iter()
                            .zip(used)
                            .filter(|(_, u)| *u)
                            .filter_map(|(m, _)| {
                                Some(bindings.get(p.object)?.get(&m.name)?.base_addr)
                            })
                    })
                    .filter(|a| !inbound_maps.contains(a))
                    .collect();
                let copy = |addr: u64| {
                    if inbound_maps.contains(&addr) {
                        super::devmaps::Copy::FromHost
                    } else if host_maps.contains(&addr) {
                        super::devmaps::Copy::None
                    } else {
                        super::devmaps::Copy::ToHost
                    }
                };
                let trace = self
                    .config
                    .mem_trace
                    .clone()
                    .map(|p| (p, self.config.mem_trace_records.max(1)));
                match super::devmaps::create(
                    &mut bindings,
                    to_host,
                    striped,
                    copy,
                    dev,
                    period,
                    trace,
                ) {
                    Ok((maps, striped, ring)) => {
                        report(&[ReportLine::DeviceMaps {
                            maps,
                            striped,
                            flush_ms: self.config.flush_ms,
                        }]);
                        traced = ring;
                    }
                    Err(e) => {
                        // Fall back to the host-mapped region the bindings already name.
                        bindings = session::bindings(region, &self.probes, d)
                            .map_err(|e| e.to_string())?;
                        report(&[ReportLine::Warning {
                            what: format!(
                                "device-resident maps unavailable ({e}); maps stay in host-mapped memory"
                            ),
                        }]);
                    }
                }
            }
            // Launch fields: named launches need cuFuncGetName; times need the clock.
            let launch_params = launch::on() && launch::supported();
            if launch::on() && !launch_params {
                report(&[ReportLine::Warning {
                    what: "this driver has no cuFuncGetName (CUDA 12.3): probes read correlation_id and launch_time as 0".into(),
                }]);
            }
            if launch_params {
                super::clock::start();
            }
            Ok(Instrumenter::new(
                self.probes.clone(),
                bindings,
                (major * 10 + minor) as u32,
                std::process::id(),
            )
            .with_mem(crate::instrument::MemConfig {
                trace: traced,
                // BPFTIME_COLD_SPLIT=0/1 overrides the session (for comparisons).
                cold_split: match std::env::var("BPFTIME_COLD_SPLIT").as_deref() {
                    Ok("1") => true,
                    Ok("0") => false,
                    _ => self.config.cold_split,
                },
                ..self.config.mem()
            })
            .with_launch_params(launch_params)
            .with_inline_kernel_probes(!self.config.jit_linker))
        }
    }

    /// The image to load in place of `bytes`, if any (kept alive for the process).
    fn instrument(&self, call: &str, bytes: &[u8]) -> Option<Arc<CString>> {
        let inst = self.instrumenter()?;
        if let Some(Err(why)) = super::devmaps::usable_here() {
            report(&[ReportLine::Warning {
                what: format!("{call}: module loaded without probes: {why}"),
            }]);
            return None;
        }
        let t = std::time::Instant::now();
        let (outcome, fresh) = inst.image_fresh(bytes);
        launch::register(&outcome.report().hidden);
        if call.starts_with("cuLink") || call.starts_with("nvJitLink") {
            inst.note_linked(outcome.report());
        }
        if fresh {
            let micros = t.elapsed().as_micros() as u64;
            let instrumented = matches!(*outcome, Outcome::Instrumented { .. });
            report(&ReportLine::from_report(
                call,
                outcome.report(),
                instrumented,
                micros,
            ));
        }
        match &*outcome {
            Outcome::Instrumented { ptx, report } => {
                let ptx = capped(call, bytes, ptx, report);
                let c = Arc::new(CString::new(ptx.as_bytes()).ok()?);
                keep(c.clone());
                Some(c)
            }
            Outcome::Unchanged(_) => None,
        }
    }
}

/// `ptx` with instrumented kernels capped at the registers [`crate::occupancy::Cap`]
/// allows (`BPFTIME_REG_CAP`: `launch`, the default, `occupancy` or `0`), from the
/// original's register counts as the driver loads the original image (its SASS, else its
/// PTX compiled). `launch` caps only the kernels that the driver's build of `ptx` would
/// launch in smaller blocks than the original (`occupancy::launch_caps`). With a warning,
/// unchanged when an image cannot be read.
fn capped<'a>(
    call: &str,
    original: &[u8],
    ptx: &'a str,
    report: &crate::instrument::Report,
) -> std::borrow::Cow<'a, str> {
    use std::borrow::Cow;
    let var = std::env::var("BPFTIME_REG_CAP").ok();
    let Some(cap) = crate::occupancy::Cap::parse(var.as_deref()) else {
        report_warning(format!(
            "BPFTIME_REG_CAP={}: expected launch, occupancy or 0; kernels not capped",
            var.unwrap_or_default()
        ));
        return Cow::Borrowed(ptx);
    };
    // A piece given to a linker is not a module the driver can load on its own.
    if cap == crate::occupancy::Cap::Off
        || call.starts_with("cuLink")
        || call.starts_with("nvJitLink")
    {
        return Cow::Borrowed(ptx);
    }
    let mut kernels: Vec<&str> = report
        .attached
        .iter()
        .map(|a| a.kernel.as_str())
        .chain(report.sites.iter().map(|s| s.kernel.as_str()))
        .collect();
    kernels.sort_unstable();
    kernels.dedup();
    if kernels.is_empty() {
        return Cow::Borrowed(ptx);
    }
    // The caps of an image loaded before (a module loaded again, or in another context of
    // the same device) are known: its original is not loaded a second time.
    type Caps = Result<Vec<(String, u32)>, String>;
    /// Hash of the image and of its instrumented PTX, device, cap mode.
    type Key = (u64, c_int, crate::occupancy::Cap);
    static KNOWN: Mutex<Vec<(Key, Caps)>> = Mutex::new(Vec::new());
    let caps = current_device().map(|dev| {
        let key = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            original.hash(&mut h);
            ptx.hash(&mut h);
            (h.finish(), dev, cap)
        };
        let known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, c)) = known.iter().find(|(k, _)| *k == key) {
            return c.clone();
        }
        drop(known);
        let c: Caps = loaded_kernels(original, dev, &kernels).and_then(|(limits, orig)| {
            if cap == crate::occupancy::Cap::Launch {
                // Kernels whose probe blocks free their registers around the probes' cold
                // parts: at the original's occupancy, with room for the hot part.
                let (freed, orig): (Vec<_>, Vec<_>) = orig
                    .into_iter()
                    .partition(|(k, _)| report.freed.contains(k));
                let mut caps: Vec<(String, u32)> = freed
                    .into_iter()
                    .map(|(k, l)| (k, crate::occupancy::freed_cap(limits, l.regs)))
                    .collect();
                if orig.is_empty() {
                    return Ok(caps);
                }
                // The build the driver will load: with the JIT linker, the linked cubin
                // (cached, so loading it later does not link again); else the PTX, which
                // the driver compiles again at the load unless its compute cache (on by
                // default) kept this build.
                let linker = state().is_some_and(|st| st.config.jit_linker);
                let cubin = linker
                    .then(|| CString::new(ptx).ok().and_then(|c| linked(&c).ok()))
                    .flatten();
                let image = cubin.as_deref().map_or(ptx.as_bytes(), |b| b.as_slice());
                let (_, inst) = loaded_kernels(image, dev, &kernels)
                    .map_err(|e| format!("the instrumented image: {e}"))?;
                caps.extend(crate::occupancy::launch_caps(limits, &orig, &inst));
                return Ok(caps);
            }
            Ok(orig
                .into_iter()
                .filter_map(|(k, l)| Some((k, cap.registers(limits, l.regs)?)))
                .collect())
        });
        KNOWN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((key, c.clone()));
        c
    });
    match caps.unwrap_or_else(|| Err("no current device".into())) {
        Ok(caps) => {
            let (t, done) = crate::occupancy::cap_registers(ptx, &caps);
            tracing::debug!(
                call,
                kernels = done.len(),
                ?cap,
                "instrumented kernels' registers capped"
            );
            Cow::Owned(t)
        }
        Err(why) => {
            report_warning(format!(
                "{call}: instrumented kernels not capped from the original's registers ({why}); a block size the original launches may not fit"
            ));
            Cow::Borrowed(ptx)
        }
    }
}

fn report_warning(what: String) {
    report(&[ReportLine::Warning { what }]);
}

/// The current context's device, if the driver says.
fn current_device() -> Option<c_int> {
    // SAFETY: the real cuCtxGetDevice; the out-pointer is a local.
    unsafe {
        let device: driver::CtxGetDevice = fn_of(Hook::CtxGetDevice).ok()?;
        let mut dev: c_int = 0;
        (device(&mut dev) == CUDA_SUCCESS).then_some(dev)
    }
}

/// The SM's limits of device `dev`, and the registers and largest block of each of
/// `kernels` as the driver loads `image` (a fat binary, cubin or PTX) in the current
/// context.
fn loaded_kernels(
    image: &[u8],
    dev: c_int,
    kernels: &[&str],
) -> Result<
    (
        crate::occupancy::SmLimits,
        Vec<(String, crate::occupancy::Loaded)>,
    ),
    String,
> {
    type GetFunction = unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CuResult;
    type FuncGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, Handle) -> CuResult;
    type ModuleUnload = unsafe extern "C" fn(Handle) -> CuResult;
    const FUNC_MAX_THREADS_PER_BLOCK: c_int = 0;
    const FUNC_NUM_REGS: c_int = 4;
    const DEV_MAX_REGS_PER_SM: c_int = 82;
    const DEV_MAX_THREADS_PER_SM: c_int = 39;
    let missing = |n: &str| format!("{n} not found");
    let get = driver::export_fn!(c"cuModuleGetFunction", GetFunction)
        .ok_or_else(|| missing("cuModuleGetFunction"))?;
    let attr = driver::export_fn!(c"cuFuncGetAttribute", FuncGetAttribute)
        .ok_or_else(|| missing("cuFuncGetAttribute"))?;
    let unload = driver::export_fn!(c"cuModuleUnload", ModuleUnload)
        .ok_or_else(|| missing("cuModuleUnload"))?;
    // A PTX image needs its NUL; fat binaries and cubins are passed as they are.
    let binary = image.starts_with(&[0x50, 0xed, 0x55, 0xba]) || image.starts_with(b"\x7fELF");
    let text;
    let ptr = if binary {
        image.as_ptr().cast::<c_void>()
    } else {
        let end = image.iter().position(|&b| b == 0).unwrap_or(image.len());
        text = CString::new(&image[..end]).map_err(|e| e.to_string())?;
        text.as_ptr().cast::<c_void>()
    };
    let _relaxed = RelaxedCapture::enter();
    // SAFETY: real driver entries with their signatures; out-pointers are locals, `ptr`
    // lives to the end of this function and the module is unloaded before it returns.
    unsafe {
        let dev_attr: driver::DeviceGetAttribute = fn_of(Hook::DeviceGetAttribute)?;
        let load: driver::ModuleLoadData = fn_of(Hook::ModuleLoadData)?;
        let (mut regs, mut threads) = (0 as c_int, 0 as c_int);
        check(
            dev_attr(&mut regs, DEV_MAX_REGS_PER_SM, dev),
            "cuDeviceGetAttribute",
        )?;
        check(
            dev_attr(&mut threads, DEV_MAX_THREADS_PER_SM, dev),
            "cuDeviceGetAttribute",
        )?;
        let limits = crate::occupancy::SmLimits {
            regs: regs.max(1) as u32,
            warps: (threads.max(32) / 32) as u32,
        };
        let mut module: Handle = std::ptr::null_mut();
        check(load(&mut module, ptr), "cuModuleLoadData")?;
        let mut out = Vec::with_capacity(kernels.len());
        for k in kernels {
            let Ok(name) = CString::new(*k) else { continue };
            let mut f: Handle = std::ptr::null_mut();
            let (mut n, mut t): (c_int, c_int) = (0, 0);
            if get(&mut f, module, name.as_ptr()) == CUDA_SUCCESS
                && attr(&mut n, FUNC_NUM_REGS, f) == CUDA_SUCCESS
                && attr(&mut t, FUNC_MAX_THREADS_PER_BLOCK, f) == CUDA_SUCCESS
                && n > 0
                && t > 0
            {
                out.push((
                    k.to_string(),
                    crate::occupancy::Loaded {
                        regs: n as u32,
                        max_threads: t as u32,
                    },
                ));
            }
        }
        unload(module);
        Ok((limits, out))
    }
}

/// This thread in `CU_STREAM_CAPTURE_MODE_RELAXED` until dropped.
pub(crate) struct RelaxedCapture(Option<(driver::ThreadExchangeStreamCaptureMode, c_int)>);

impl RelaxedCapture {
    /// Enters relaxed mode (a no-op where the driver lacks the call).
    pub(crate) fn enter() -> RelaxedCapture {
        // SAFETY: the real cuThreadExchangeStreamCaptureMode, if the driver has it.
        let Ok(f) = (unsafe {
            fn_of::<driver::ThreadExchangeStreamCaptureMode>(Hook::ThreadExchangeStreamCaptureMode)
        }) else {
            return RelaxedCapture(None);
        };
        let mut mode = driver::CAPTURE_MODE_RELAXED;
        // SAFETY: `mode` is a valid in/out pointer.
        if unsafe { f(&mut mode) } == CUDA_SUCCESS {
            RelaxedCapture(Some((f, mode)))
        } else {
            RelaxedCapture(None)
        }
    }
}

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        if let Some((f, mut mode)) = self.0 {
            // SAFETY: restores the mode `enter` swapped out.
            unsafe { f(&mut mode) };
        }
    }
}

pub(crate) fn check(r: CuResult, what: &str) -> Result<(), String> {
    if r == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed with CUresult {r}"))
    }
}

/// The real entry of `h` as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the C signature of `h`'s function.
pub(crate) unsafe fn fn_of<F: Copy>(h: Hook) -> Result<F, String> {
    let p = driver::real(h);
    if p.is_null() {
        return Err(format!(
            "{} not found in libcuda.so.1",
            h.symbol().to_string_lossy()
        ));
    }
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: `p` is the address of a function with signature `F` (caller's contract).
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// Runs `f`, turning a panic into `None` (and a reported warning).
fn guarded<T>(what: &str, f: impl FnOnce() -> Option<T>) -> Option<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            report(&[ReportLine::Warning {
                what: format!("internal error in {what}: the original image was loaded"),
            }]);
            None
        }
    }
}

/// The bytes of an image passed by pointer (a fat-binary wrapper resolves to its container).
///
/// # Safety
/// `image` points to an image the driver would accept.
unsafe fn image_of<'a>(image: *const c_void) -> Option<&'a [u8]> {
    if image.is_null() {
        return None;
    }
    // SAFETY: forwarded contract.
    unsafe { crate::image::image_bytes(image as *const u8) }.map(|(_, b)| b)
}

/// The instrumented replacement of the image at `image`, if any.
///
/// # Safety
/// As [`image_of`].
unsafe fn replacement(call: &str, image: *const c_void) -> Option<Arc<CString>> {
    launch::forget_handles();
    let st = state()?;
    if !st.active() {
        return None;
    }
    guarded(call, || {
        // SAFETY: forwarded contract.
        let bytes = unsafe { image_of(image) }?;
        st.instrument(call, bytes)
    })
}

/// The instrumented replacement of the file at `path`, if any.
///
/// # Safety
/// `path` is NUL-terminated.
unsafe fn file_replacement(call: &str, path: *const c_char) -> Option<Arc<CString>> {
    launch::forget_handles();
    let st = state()?;
    if !st.active() || path.is_null() {
        return None;
    }
    guarded(call, || {
        // SAFETY: forwarded contract.
        let p = unsafe { CStr::from_ptr(path) }
            .to_string_lossy()
            .to_string();
        let bytes = std::fs::read(p).ok()?;
        st.instrument(call, &bytes)
    })
}

/// What the driver is given for an instrumented PTX: the PTX, or with
/// [`SessionConfig::jit_linker`] a cubin linked from it by the driver's JIT linker
/// (`cuLinkCreate`/`cuLinkAddData`/`cuLinkComplete`; the PTX if linking fails).
///
/// The module loaders compile PTX as a whole program, where ptxas redoes the probe's
/// `.func` in every kernel that calls it (about 50 ms per kernel for `kernel_count`; 33 s
/// for a 1 MB module of 246 kernels, against 2.9 s without probes, on an H100). The linker
/// compiles its inputs as relocatable code, the probe once per module (5 s for that
/// module), but relocatable code can be slower: the empty probe costs 1.25× on a 4096²
/// SGEMM that way against 1.00× as a whole program (`bench/results/attach_gpu.md`).
/// Linked images are cached by the PTX's hash (an image loaded again is not relinked);
/// the JIT options of `cuModuleLoadDataEx`/`cuLibraryLoadData` do not reach a cubin.
fn image_for_load(ptx: &Arc<CString>) -> *const c_void {
    if !state().is_some_and(|st| st.config.jit_linker) {
        return ptx.as_ptr() as *const c_void;
    }
    match linked(ptx) {
        Ok(bin) => bin.as_ptr() as *const c_void,
        Err(why) => {
            report(&[ReportLine::Warning {
                what: format!("JIT linker: {why}; the instrumented PTX is loaded directly"),
            }]);
            ptx.as_ptr() as *const c_void
        }
    }
}

/// `ptx` linked by the driver's JIT linker ([`link`]), cached by the PTX's hash: the cubin
/// lives as long as the process.
fn linked(ptx: &CString) -> Result<Arc<Vec<u8>>, String> {
    static CUBINS: Mutex<Vec<(u64, Arc<Vec<u8>>)>> = Mutex::new(Vec::new());
    let key = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        ptx.as_bytes().hash(&mut h);
        h.finish()
    };
    if let Ok(c) = CUBINS.lock()
        && let Some((_, bin)) = c.iter().find(|(k, _)| *k == key)
    {
        return Ok(bin.clone());
    }
    let _relaxed = RelaxedCapture::enter();
    let bin = Arc::new(link(ptx)?);
    if let Ok(mut c) = CUBINS.lock() {
        c.push((key, bin.clone()));
    }
    Ok(bin)
}

/// `ptx` compiled and linked by the driver, as a cubin.
fn link(ptx: &CString) -> Result<Vec<u8>, String> {
    // SAFETY: real driver entries with their signatures; the state is destroyed on every
    // path after use, and the cubin is copied out before.
    unsafe {
        let create: driver::LinkCreate = fn_of(Hook::LinkCreate)?;
        let add: driver::LinkAddData = fn_of(Hook::LinkAddData)?;
        let complete: driver::LinkComplete = fn_of(Hook::LinkComplete)?;
        let destroy: driver::LinkDestroy = fn_of(Hook::LinkDestroy)?;
        let mut state: Handle = std::ptr::null_mut();
        check(
            create(0, std::ptr::null_mut(), std::ptr::null_mut(), &mut state),
            "cuLinkCreate",
        )?;
        let b = ptx.as_bytes_with_nul();
        let r = add(
            state,
            driver::CU_JIT_INPUT_PTX,
            b.as_ptr() as *mut c_void,
            b.len(),
            c"bpftime-instrumented.ptx".as_ptr(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        let out = if r != CUDA_SUCCESS {
            Err(format!("cuLinkAddData failed with CUresult {r}"))
        } else {
            let mut cubin: *mut c_void = std::ptr::null_mut();
            let mut size = 0usize;
            let r = complete(state, &mut cubin, &mut size);
            if r != CUDA_SUCCESS || cubin.is_null() {
                Err(format!("cuLinkComplete failed with CUresult {r}"))
            } else {
                Ok(std::slice::from_raw_parts(cubin as *const u8, size).to_vec())
            }
        };
        destroy(state);
        out
    }
}

fn fallback_warning(call: &str, r: c_int) {
    report(&[ReportLine::Warning {
        what: format!(
            "{call}: the driver rejected the instrumented image (CUresult {r}); the original was loaded without probes"
        ),
    }]);
}

macro_rules! real_or_fail {
    ($h:expr, $ty:ty) => {
        // SAFETY: the slot of `$h` holds a function of type `$ty`.
        match unsafe { fn_of::<$ty>($h) } {
            Ok(f) => f,
            Err(_) => return driver::CUDA_ERROR_NOT_FOUND,
        }
    };
}

/// `cuModuleLoadData`.
///
/// # Safety
/// The driver's contract for `cuModuleLoadData`.
pub unsafe extern "C" fn module_load_data(module: *mut Handle, image: *const c_void) -> CuResult {
    let real = real_or_fail!(Hook::ModuleLoadData, driver::ModuleLoadData);
    // SAFETY: the application's arguments, forwarded.
    unsafe {
        let r = 'load: {
            if let Some(ptx) = replacement("cuModuleLoadData", image) {
                let r = real(module, image_for_load(&ptx));
                if r == CUDA_SUCCESS {
                    break 'load r;
                }
                fallback_warning("cuModuleLoadData", r);
            }
            real(module, image)
        };
        if r == CUDA_SUCCESS {
            remember(module, image_of(image), false);
        }
        r
    }
}

/// `cuModuleLoadDataEx`.
///
/// # Safety
/// The driver's contract for `cuModuleLoadDataEx`.
pub unsafe extern "C" fn module_load_data_ex(
    module: *mut Handle,
    image: *const c_void,
    n: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> CuResult {
    let real = real_or_fail!(Hook::ModuleLoadDataEx, driver::ModuleLoadDataEx);
    // SAFETY: the application's arguments, forwarded.
    unsafe {
        let r = 'load: {
            if let Some(ptx) = replacement("cuModuleLoadDataEx", image) {
                let r = real(module, image_for_load(&ptx), n, options, values);
                if r == CUDA_SUCCESS {
                    break 'load r;
                }
                fallback_warning("cuModuleLoadDataEx", r);
            }
            real(module, image, n, options, values)
        };
        if r == CUDA_SUCCESS {
            remember(module, image_of(image), false);
        }
        r
    }
}

/// `cuModuleLoadFatBinary`.
///
/// # Safety
/// The driver's contract for `cuModuleLoadFatBinary`.
pub unsafe extern "C" fn module_load_fat_binary(
    module: *mut Handle,
    image: *const c_void,
) -> CuResult {
    let real = real_or_fail!(Hook::ModuleLoadFatBinary, driver::ModuleLoadData);
    // SAFETY: the application's arguments, forwarded.
    unsafe {
        let r = 'load: {
            if let Some(ptx) = replacement("cuModuleLoadFatBinary", image)
                && let Ok(load) = fn_of::<driver::ModuleLoadData>(Hook::ModuleLoadData)
            {
                let r = load(module, image_for_load(&ptx));
                if r == CUDA_SUCCESS {
                    break 'load r;
                }
                fallback_warning("cuModuleLoadFatBinary", r);
            }
            real(module, image)
        };
        if r == CUDA_SUCCESS {
            remember(module, image_of(image), false);
        }
        r
    }
}

/// `cuModuleLoad`.
///
/// # Safety
/// The driver's contract for `cuModuleLoad`.
pub unsafe extern "C" fn module_load(module: *mut Handle, path: *const c_char) -> CuResult {
    let real = real_or_fail!(Hook::ModuleLoad, driver::ModuleLoad);
    // SAFETY: the application's arguments, forwarded.
    unsafe {
        let r = 'load: {
            if let Some(ptx) = file_replacement("cuModuleLoad", path)
                && let Ok(load) = fn_of::<driver::ModuleLoadData>(Hook::ModuleLoadData)
            {
                let r = load(module, image_for_load(&ptx));
                if r == CUDA_SUCCESS {
                    break 'load r;
                }
                fallback_warning("cuModuleLoad", r);
            }
            real(module, path)
        };
        if r == CUDA_SUCCESS {
            remember_file(module, path, false);
        }
        r
    }
}

/// `cuLibraryLoadData`.
///
/// # Safety
/// The driver's contract for `cuLibraryLoadData`.
pub unsafe extern "C" fn library_load_data(
    library: *mut Handle,
    code: *const c_void,
    jit_options: *mut c_int,
    jit_values: *mut *mut c_void,
    n_jit: c_uint,
    lib_options: *mut c_int,
    lib_values: *mut *mut c_void,
    n_lib: c_uint,
) -> CuResult {
    let real = real_or_fail!(Hook::LibraryLoadData, driver::LibraryLoadData);
    // SAFETY: the application's arguments, forwarded.
    unsafe {
        let r = 'load: {
            if let Some(ptx) = replacement("cuLibraryLoadData", code) {
                let r = real(
                    library,
                    image_for_load(&ptx),
                    jit_options,
                    jit_values,
                    n_jit,
                    lib_options,
                    lib_values,
                    n_lib,
                );
                if r == CUDA_SUCCESS {
                    break 'load r;
                }
                fallback_warning("cuLibraryLoadData", r);
            }
            real(
                library,
                code,
                jit_options,
                jit_values,
                n_jit,
                lib_options,
                lib_values,
                n_lib,
            )
        };
        if r == CUDA_SUCCESS {
            remember(library, image_of(code), true);
        }
        r
    }
}

/// `cuLibraryLoadFromFile`.
///
/// # Safety
/// The driver's contract for `cuLibraryLoadFromFile`.
pub unsafe extern "C" fn library_load_from_file(
    library: *mut Handle,
    path: *const c_char,
    jit_options: *mut c_int,
    jit_values: *mut *mut c_void,
    n_jit: c_uint,
    lib_options: *mut c_int,
    lib_values: *mut *mut c_void,
    n_lib: c_uint,
) -> CuResult {
    let real = real_or_fail!(Hook::LibraryLoadFromFile, driver::LibraryLoadFromFile);
    // SAFETY: the application's arguments, forwarded.
    unsafe {
        let r = 'load: {
            if let Some(ptx) = file_replacement("cuLibraryLoadFromFile", path)
                && let Ok(load) = fn_of::<driver::LibraryLoadData>(Hook::LibraryLoadData)
            {
                let r = load(
                    library,
                    image_for_load(&ptx),
                    jit_options,
                    jit_values,
                    n_jit,
                    lib_options,
                    lib_values,
                    n_lib,
                );
                if r == CUDA_SUCCESS {
                    break 'load r;
                }
                fallback_warning("cuLibraryLoadFromFile", r);
            }
            real(
                library,
                path,
                jit_options,
                jit_values,
                n_jit,
                lib_options,
                lib_values,
                n_lib,
            )
        };
        if r == CUDA_SUCCESS {
            remember_file(library, path, true);
        }
        r
    }
}

/// `cuLinkAddData_v2`.
///
/// # Safety
/// The driver's contract for `cuLinkAddData_v2`.
pub unsafe extern "C" fn link_add_data(
    state: Handle,
    kind: c_uint,
    data: *mut c_void,
    size: usize,
    name: *const c_char,
    n: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> CuResult {
    let real = real_or_fail!(Hook::LinkAddData, driver::LinkAddData);
    // SAFETY: the application's arguments, forwarded; `data..data+size` is its input.
    unsafe {
        if (kind == driver::CU_JIT_INPUT_PTX || kind == driver::CU_JIT_INPUT_FATBINARY)
            && !data.is_null()
            && let Some(st) = self::state()
            && st.active()
        {
            let bytes = std::slice::from_raw_parts(data as *const u8, size);
            if let Some(ptx) = guarded("cuLinkAddData", || st.instrument("cuLinkAddData", bytes)) {
                let b = ptx.as_bytes_with_nul();
                let r = real(
                    state,
                    driver::CU_JIT_INPUT_PTX,
                    b.as_ptr() as *mut c_void,
                    b.len(),
                    name,
                    n,
                    options,
                    values,
                );
                if r == CUDA_SUCCESS {
                    return r;
                }
                fallback_warning("cuLinkAddData", r);
            }
        }
        real(state, kind, data, size, name, n, options, values)
    }
}

/// `cuLinkAddFile_v2`.
///
/// # Safety
/// The driver's contract for `cuLinkAddFile_v2`.
pub unsafe extern "C" fn link_add_file(
    state: Handle,
    kind: c_uint,
    path: *const c_char,
    n: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> CuResult {
    let real = real_or_fail!(Hook::LinkAddFile, driver::LinkAddFile);
    // SAFETY: the application's arguments, forwarded.
    unsafe {
        if (kind == driver::CU_JIT_INPUT_PTX || kind == driver::CU_JIT_INPUT_FATBINARY)
            && let Some(ptx) = file_replacement("cuLinkAddFile", path)
            && let Ok(add) = fn_of::<driver::LinkAddData>(Hook::LinkAddData)
        {
            let b = ptx.as_bytes_with_nul();
            let r = add(
                state,
                driver::CU_JIT_INPUT_PTX,
                b.as_ptr() as *mut c_void,
                b.len(),
                path,
                n,
                options,
                values,
            );
            if r == CUDA_SUCCESS {
                return r;
            }
            fallback_warning("cuLinkAddFile", r);
        }
        real(state, kind, path, n, options, values)
    }
}

/// `nvJitLinkAddData`: PTX inputs (by content, whatever type they are given as) and fat
/// binaries with PTX go in instrumented, as PTX.
///
/// # Safety
/// The contract of `nvJitLinkAddData`.
pub unsafe extern "C" fn nvjitlink_add_data(
    handle: Handle,
    kind: c_uint,
    data: *const c_void,
    size: usize,
    name: *const c_char,
) -> c_int {
    // SAFETY: the slot holds nvJitLinkAddData, whose signature this is.
    let real = match unsafe { fn_of::<driver::NvJitLinkAddData>(Hook::NvJitLinkAddData) } {
        Ok(f) => f,
        Err(_) => return 6, // NVJITLINK_ERROR_INTERNAL
    };
    // SAFETY: the application's arguments, forwarded; `data..data+size` is its input.
    unsafe {
        let bytes = if data.is_null() {
            &[][..]
        } else {
            std::slice::from_raw_parts(data as *const u8, size)
        };
        // PTX by content too, whatever type it is declared as.
        let is_ptx = crate::image::classify(bytes) == Some(crate::image::ImageKind::Ptx);
        if (kind == driver::NVJITLINK_INPUT_PTX || kind == driver::NVJITLINK_INPUT_FATBIN || is_ptx)
            && !data.is_null()
            && let Some(st) = self::state()
            && st.active()
            && let Some(ptx) = guarded("nvJitLinkAddData", || {
                st.instrument("nvJitLinkAddData", bytes)
            })
        {
            let b = ptx.as_bytes_with_nul();
            let r = real(
                handle,
                driver::NVJITLINK_INPUT_PTX,
                b.as_ptr() as *const c_void,
                b.len(),
                name,
            );
            if r == 0 {
                return r;
            }
            fallback_warning("nvJitLinkAddData", r);
        }
        if kind != driver::NVJITLINK_INPUT_PTX
            && kind != driver::NVJITLINK_INPUT_FATBIN
            && !is_ptx
            && let Some(st) = self::state()
            && st.active()
        {
            report(&[ReportLine::Warning {
                what: format!(
                    "nvJitLinkAddData input of type {kind} (cubin, LTO-IR, object or library) cannot be instrumented; its kernels run without probes"
                ),
            }]);
        }
        real(handle, kind, data, size, name)
    }
}

/// `nvJitLinkAddFile`.
///
/// # Safety
/// The contract of `nvJitLinkAddFile`.
pub unsafe extern "C" fn nvjitlink_add_file(
    handle: Handle,
    kind: c_uint,
    path: *const c_char,
) -> c_int {
    // SAFETY: the slot holds nvJitLinkAddFile, whose signature this is.
    let real = match unsafe { fn_of::<driver::NvJitLinkAddFile>(Hook::NvJitLinkAddFile) } {
        Ok(f) => f,
        Err(_) => return 6,
    };
    // SAFETY: the application's arguments, forwarded.
    unsafe {
        if (kind == driver::NVJITLINK_INPUT_PTX || kind == driver::NVJITLINK_INPUT_FATBIN)
            && let Some(ptx) = file_replacement("nvJitLinkAddFile", path)
            && let Ok(add) = fn_of::<driver::NvJitLinkAddData>(Hook::NvJitLinkAddData)
        {
            let b = ptx.as_bytes_with_nul();
            let r = add(
                handle,
                driver::NVJITLINK_INPUT_PTX,
                b.as_ptr() as *const c_void,
                b.len(),
                path,
            );
            if r == 0 {
                return r;
            }
            fallback_warning("nvJitLinkAddFile", r);
        }
        real(handle, kind, path)
    }
}

/// `cuCtxDestroy_v2`: device-resident maps of `ctx` are copied out first.
///
/// # Safety
/// The driver's contract for `cuCtxDestroy_v2`.
pub unsafe extern "C" fn ctx_destroy(ctx: Handle) -> CuResult {
    let real = real_or_fail!(Hook::CtxDestroy, driver::CtxDestroy);
    let _ = catch_unwind(|| super::devmaps::before_teardown(Some(ctx), None));
    // SAFETY: the application's argument, forwarded.
    unsafe { real(ctx) }
}

/// `cuDevicePrimaryCtxRelease_v2`: device-resident maps are copied out first, and stay in
/// use if the primary context outlives the release.
///
/// # Safety
/// The driver's contract for `cuDevicePrimaryCtxRelease_v2`.
pub unsafe extern "C" fn primary_ctx_release(dev: c_int) -> CuResult {
    let real = real_or_fail!(Hook::PrimaryCtxRelease, driver::PrimaryCtxRelease);
    let ours = catch_unwind(|| super::devmaps::before_teardown(None, Some(dev))).unwrap_or(false);
    // SAFETY: the application's argument, forwarded.
    let r = unsafe { real(dev) };
    if ours {
        let _ = catch_unwind(|| super::devmaps::after_release(dev));
    }
    r
}

/// `cuDevicePrimaryCtxReset_v2`: device-resident maps are copied out first.
///
/// # Safety
/// The driver's contract for `cuDevicePrimaryCtxReset_v2`.
pub unsafe extern "C" fn primary_ctx_reset(dev: c_int) -> CuResult {
    let real = real_or_fail!(Hook::PrimaryCtxReset, driver::PrimaryCtxRelease);
    let _ = catch_unwind(|| super::devmaps::before_teardown(None, Some(dev)));
    // SAFETY: the application's argument, forwarded.
    unsafe { real(dev) }
}

/// Our wrapper for hook `h`, as an untyped pointer.
pub fn wrapper(h: Hook) -> Option<*mut c_void> {
    Some(match h {
        Hook::ModuleLoadData => module_load_data as *mut c_void,
        Hook::ModuleLoadDataEx => module_load_data_ex as *mut c_void,
        Hook::ModuleLoadFatBinary => module_load_fat_binary as *mut c_void,
        Hook::ModuleLoad => module_load as *mut c_void,
        Hook::LibraryLoadData => library_load_data as *mut c_void,
        Hook::LibraryLoadFromFile => library_load_from_file as *mut c_void,
        Hook::LinkAddData => link_add_data as *mut c_void,
        Hook::LinkAddFile => link_add_file as *mut c_void,
        Hook::GetProcAddress => get_proc_address_v2 as *mut c_void,
        Hook::GetProcAddressV1 => get_proc_address_v1 as *mut c_void,
        Hook::NvJitLinkAddData => nvjitlink_add_data as *mut c_void,
        Hook::NvJitLinkAddFile => nvjitlink_add_file as *mut c_void,
        Hook::CtxDestroy => ctx_destroy as *mut c_void,
        Hook::PrimaryCtxRelease => primary_ctx_release as *mut c_void,
        Hook::PrimaryCtxReset => primary_ctx_reset as *mut c_void,
        Hook::GraphAddKernelNode => launch::graph_add_kernel_node as *mut c_void,
        Hook::GraphAddKernelNodeV2 => launch::graph_add_kernel_node_v2 as *mut c_void,
        Hook::GraphKernelNodeSetParams => launch::graph_kernel_node_set_params as *mut c_void,
        Hook::GraphKernelNodeSetParamsV2 => launch::graph_kernel_node_set_params_v2 as *mut c_void,
        Hook::GraphExecKernelNodeSetParams => {
            launch::graph_exec_kernel_node_set_params as *mut c_void
        }
        Hook::GraphExecKernelNodeSetParamsV2 => {
            launch::graph_exec_kernel_node_set_params_v2 as *mut c_void
        }
        Hook::GraphAddNode => launch::graph_add_node as *mut c_void,
        Hook::GraphAddNodeV2 => launch::graph_add_node_v2 as *mut c_void,
        Hook::GraphNodeSetParams => launch::graph_node_set_params as *mut c_void,
        Hook::GraphExecNodeSetParams => launch::graph_exec_node_set_params as *mut c_void,
        _ => return None,
    })
}

/// Whether this session numbers launches ([`launch`]) or may move them to hot-attached
/// modules ([`super::hot`]): the shim's state decides at its start.
fn tracking() -> bool {
    state().is_some_and(|st| launch::on() || st.config.hot_objects.is_some())
}

/// Whether `a` is a launch entry and launches are tracked.
fn launches_tracked(a: super::api::Api) -> bool {
    a.is_launch() && tracking()
}

/// Swaps a resolved driver entry for our wrapper: remembers `*pfn` as the real one.
///
/// # Safety
/// `symbol` NUL-terminated, `pfn` valid.
unsafe fn swap(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) {
    // SAFETY: caller's contract.
    let (name, f) = unsafe { (CStr::from_ptr(symbol).to_bytes(), *pfn) };
    if f.is_null() {
        return;
    }
    if let Some(a) = super::api::Api::lookup(name, version, flags)
        && (super::api::logging() || super::uprobes::active(a) || launches_tracked(a))
    {
        super::api::set_real(a, f);
        // SAFETY: caller's contract.
        unsafe { *pfn = a.wrapper() };
        return;
    }
    if name == b"cuGetProcAddress" {
        // What cudart does first: it asks for cuGetProcAddress itself and resolves
        // everything else through the answer. Versions from 12.0 get the _v2 ABI.
        let (h, w) = if version >= 12000 {
            (Hook::GetProcAddress, get_proc_address_v2 as *mut c_void)
        } else {
            (Hook::GetProcAddressV1, get_proc_address_v1 as *mut c_void)
        };
        if !driver::same_object(f, w) {
            driver::set_real(h, f);
        }
        // SAFETY: caller's contract.
        unsafe { *pfn = w };
        return;
    }
    let graph = Hook::graph(name, version).filter(|_| tracking());
    if let Some(h) = Hook::wrapped(name).or(graph)
        && let Some(w) = wrapper(h)
    {
        if !driver::same_object(f, w) {
            driver::set_real(h, f);
        }
        // SAFETY: caller's contract.
        unsafe { *pfn = w };
    }
}

/// `cuGetProcAddress_v2`.
///
/// # Safety
/// The driver's contract for `cuGetProcAddress_v2`.
pub unsafe extern "C" fn get_proc_address_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    let real = real_or_fail!(Hook::GetProcAddress, driver::GetProcAddressV2);
    // SAFETY: the application's arguments, forwarded.
    unsafe {
        let r = real(symbol, pfn, version, flags, status);
        if r == CUDA_SUCCESS && !symbol.is_null() && !pfn.is_null() {
            swap(symbol, pfn, version, flags);
        }
        r
    }
}

/// `cuGetProcAddress` (the ABI before CUDA 12).
///
/// # Safety
/// The driver's contract for `cuGetProcAddress`.
pub unsafe extern "C" fn get_proc_address_v1(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CuResult {
    let real = real_or_fail!(Hook::GetProcAddressV1, driver::GetProcAddressV1);
    // SAFETY: the application's arguments, forwarded.
    unsafe {
        let r = real(symbol, pfn, version, flags);
        if r == CUDA_SUCCESS && !symbol.is_null() && !pfn.is_null() {
            swap(symbol, pfn, version, flags);
        }
        r
    }
}

/// The shim's `dlsym`: the real lookup, with driver entries the shim wraps swapped for
/// the wrappers.
///
/// # Safety
/// As `dlsym(3)`.
pub unsafe fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // `trace --numba-ptx`: nvJitLink's version is not found, so Numba emits PTX.
    if !symbol.is_null()
        // SAFETY: forwarded contract: `symbol` is NUL-terminated.
        && unsafe { CStr::from_ptr(symbol) }.to_bytes() == b"nvJitLinkVersion"
        && state().is_some_and(|st| st.config.hide_nvjitlink)
    {
        return std::ptr::null_mut();
    }
    // SAFETY: forwarded contract.
    let mut f = unsafe { driver::real_dlsym(handle, symbol) };
    if !f.is_null() && !symbol.is_null() {
        // SAFETY: forwarded contract; `f` is a local copy.
        let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
        if name.starts_with(b"cu") || name.starts_with(b"nvJitLink") {
            let p: *mut *mut c_void = &mut f;
            // dlsym names are exact exports: `cuGetProcAddress` is the pre-12 ABI.
            // SAFETY: `symbol` is NUL-terminated, `p` points to a local.
            unsafe { swap(symbol, p, 0, 0) };
        }
    }
    // A library function with host probes: the caller gets its stub
    // (`super::symprobes`; a library loaded since the last look is looked at first).
    super::symprobes::poll_now();
    if !f.is_null()
        && let Some(stub) = super::symprobes::stub_for(f)
    {
        return stub;
    }
    f
}
