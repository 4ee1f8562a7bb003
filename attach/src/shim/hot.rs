//! Hot attach: probes loaded or unloaded while the application runs
//! (`bpftime-super load/unload --name SESSION` on a `trace --name SESSION`).
//!
//! ```text
//! trace: new object set ──▶ HotObjects file (generation N)
//! shim:  watcher (50 ms) ──▶ ProbeSet::load ──▶ a new Instrumenter (old objects keep their
//!        maps' bindings, new objects' maps are host-mapped in the region) ──▶ GENERATION = N
//! launch of f (any launch entry, graph nodes too):
//!        GENERATION > 0 ──▶ f's module (cuFuncGetModule, or cuKernelGetLibrary for a CUkernel)
//!        ──▶ its original image, instrumented with the current set, loaded once per
//!            generation ──▶ cuModuleGetFunction(new module, f's name) ──▶ launched instead
//! ```
//!
//! A change takes effect at the next launch of each kernel; a launch already running keeps
//! its probes. Modules loaded after the change are instrumented with the new set directly.
//! Nothing here fails a launch: when a function cannot be moved to a new module, the
//! original is launched and a warning names it, once. Two kinds of module are not moved:
//! - modules with device variables (`.global`/`.const` at module scope: `__device__`,
//!   `__constant__`): a new module would have its own, uninitialised copies, so the kernel
//!   would not behave as before. They take the new probes when the application loads them
//!   again.
//! - images without PTX (SASS-only, or cubins from the JIT linker): nothing to instrument.
//!
//! Maps of objects loaded later live in host-mapped memory (updates cross PCIe, as with
//! `trace --maps host`); the session's first objects keep their device copies.

use super::driver::{self, CuResult, Handle};
use super::hooks::{RelaxedCapture, fn_of, report};
use crate::instrument::Outcome;
use crate::session::ReportLine;
use std::collections::{HashMap, HashSet};
use std::ffi::{CString, c_char};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The generation launches are moved to (0: no hot change yet).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Sets the generation new launches use (after its instrumenter is in place).
pub fn set_generation(g: u64) {
    GENERATION.store(g, Ordering::Release);
}

/// The generation in effect.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// A module (or library) the application loaded, as it gave it.
struct Loaded {
    image: Arc<Vec<u8>>,
    /// The generation it was instrumented with when it was loaded.
    generation: u64,
}

#[derive(Default)]
struct Registry {
    /// By `CUmodule` or `CUlibrary` handle.
    loaded: HashMap<usize, Loaded>,
    /// `(module, generation)` → the module loaded in its place.
    moved: HashMap<(usize, u64), usize>,
    /// `function` → `(generation, function launched instead)`.
    functions: HashMap<usize, (u64, usize)>,
    /// Modules already warned about.
    warned: HashSet<usize>,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Default::default)
}

type GetHandle = unsafe extern "C" fn(*mut Handle, Handle) -> CuResult;
type GetFunction = unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CuResult;

/// Remembers the image of a module (or library) the application loaded, so that its
/// functions can be moved to a newly instrumented copy later.
pub(crate) fn record(handle: Handle, image: &[u8], library: bool) {
    if handle.is_null() {
        return;
    }
    let image = Arc::new(image.to_vec());
    let generation = generation();
    let mut keys = vec![handle as usize];
    if library && let Some(get) = driver::export_fn!(c"cuLibraryGetModule", GetHandle) {
        let mut m: Handle = std::ptr::null_mut();
        // SAFETY: a library the driver just loaded and a local out-pointer.
        if unsafe { get(&mut m, handle) } == driver::CUDA_SUCCESS && !m.is_null() {
            keys.push(m as usize);
        }
    }
    if let Ok(mut r) = registry().lock() {
        for k in keys {
            r.loaded.insert(
                k,
                Loaded {
                    image: image.clone(),
                    generation,
                },
            );
        }
    }
}

/// The function to launch in place of `f` under the current generation (`f` itself when
/// there was no hot change, or when `f` cannot be moved).
pub fn function(f: Handle) -> Handle {
    let g = generation();
    if g == 0 || f.is_null() {
        return f;
    }
    if let Ok(r) = registry().lock()
        && let Some(&(fg, to)) = r.functions.get(&(f as usize))
        && fg == g
    {
        return to as Handle;
    }
    let to = std::panic::catch_unwind(|| moved(f, g))
        .ok()
        .flatten()
        .unwrap_or(f);
    if let Ok(mut r) = registry().lock() {
        r.functions.insert(f as usize, (g, to as usize));
    }
    to
}

/// Where `f` came from: the recorded module or library, and its name.
fn origin(f: Handle) -> Option<(usize, String)> {
    let r = registry().lock().ok()?;
    let mut m: Handle = std::ptr::null_mut();
    if let Some(get) = driver::export_fn!(c"cuFuncGetModule", GetHandle)
        // SAFETY: a local out-pointer; the driver checks the handle.
        && unsafe { get(&mut m, f) } == driver::CUDA_SUCCESS
        && r.loaded.contains_key(&(m as usize))
        && let Some(n) = super::launch::function_name(f)
    {
        return Some((m as usize, n));
    }
    let mut lib: Handle = std::ptr::null_mut();
    if let Some(get) = driver::export_fn!(c"cuKernelGetLibrary", GetHandle)
        // SAFETY: as above.
        && unsafe { get(&mut lib, f) } == driver::CUDA_SUCCESS
        && r.loaded.contains_key(&(lib as usize))
        && let Some(n) = super::launch::function_name(f)
    {
        return Some((lib as usize, n));
    }
    None
}

fn warn_once(key: usize, what: String) {
    if let Ok(mut r) = registry().lock()
        && r.warned.insert(key)
    {
        report(&[ReportLine::Warning { what }]);
    }
}

/// Loads (once per generation) the module `key` instrumented with the current probes and
/// returns `name`'s function in it.
fn moved(f: Handle, g: u64) -> Option<Handle> {
    let (key, name) = origin(f)?;
    // Loaded after the change: it has the change's probes already.
    if registry().lock().ok()?.loaded.get(&key)?.generation >= g {
        return None;
    }
    let inst = super::hooks::current_instrumenter()?;
    let existing = registry().lock().ok()?.moved.get(&(key, g)).copied();
    let module = match existing {
        Some(m) => m as Handle,
        None => {
            let image = registry().lock().ok()?.loaded.get(&key)?.image.clone();
            // Only a module with PTX can be instrumented again (SASS-only images were named
            // at their load).
            let ptx = ptx_of(&image, inst.sm())?;
            if let Some(vars) = device_variables(&ptx) {
                warn_once(
                    key,
                    format!(
                        "`{}`'s module has device variables ({vars}): it keeps its probes until it is loaded again",
                        crate::probes::demangle(&name)
                    ),
                );
                return None;
            }
            let (outcome, fresh) = inst.image_fresh(&image);
            if fresh {
                report(&ReportLine::from_report(
                    "hot attach",
                    outcome.report(),
                    matches!(*outcome, Outcome::Instrumented { .. }),
                    0,
                ));
            }
            let text = match &*outcome {
                Outcome::Instrumented { ptx, report } => {
                    super::launch::register(&report.hidden);
                    Some(CString::new(ptx.as_bytes()).ok()?)
                }
                // No probe wants it any more: the original, as a new module.
                Outcome::Unchanged(_) => None,
            };
            let _relaxed = RelaxedCapture::enter();
            // SAFETY: the real cuModuleLoadData's slot holds that signature.
            let load =
                unsafe { fn_of::<driver::ModuleLoadData>(driver::Hook::ModuleLoadData) }.ok()?;
            let mut m: Handle = std::ptr::null_mut();
            let ptr = match &text {
                Some(t) => t.as_ptr().cast(),
                None => image.as_ptr().cast(),
            };
            // SAFETY: an image the driver accepted before (or its instrumented PTX), alive
            // for the call; `m` is a local out-pointer.
            let r = unsafe { load(&mut m, ptr) };
            if r != driver::CUDA_SUCCESS {
                warn_once(
                    key,
                    format!(
                        "`{}`: the driver rejected the module with the new probes (CUresult {r}); it keeps its probes",
                        crate::probes::demangle(&name)
                    ),
                );
                return None;
            }
            if let Some(t) = text {
                super::hooks::keep(Arc::new(t));
            }
            if let Ok(mut reg) = registry().lock() {
                reg.moved.insert((key, g), m as usize);
            }
            m
        }
    };
    let get = driver::export_fn!(c"cuModuleGetFunction", GetFunction)?;
    let cname = CString::new(name).ok()?;
    let mut nf: Handle = std::ptr::null_mut();
    // SAFETY: a module we loaded, a NUL-terminated name, a local out-pointer.
    (unsafe { get(&mut nf, module, cname.as_ptr()) } == driver::CUDA_SUCCESS && !nf.is_null())
        .then_some(nf)
}

/// The PTX of an image, as the instrumenter would pick it for `sm` (`None`: SASS only).
pub fn ptx_of(image: &[u8], sm: u32) -> Option<String> {
    match crate::image::classify(image) {
        Some(crate::image::ImageKind::Ptx) => Some(crate::instrument::ptx_text(image)),
        _ => {
            let u = crate::image::unpack(image).ok()?;
            Some(crate::image::best_ptx(&u, sm)?.to_string())
        }
    }
}

/// The module-scope `.global`/`.const` variables of a module's PTX, named; `None` when it
/// has none.
pub fn device_variables(text: &str) -> Option<String> {
    let f = jit::ptx::parse::parse_lenient(text).ok()?;
    let vars: Vec<&str> = f
        .globals
        .iter()
        .filter(|v| v.space == ".global" || v.space == ".const")
        .map(|v| v.name.as_str())
        .collect();
    (!vars.is_empty()).then(|| vars.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_with_device_variables_are_named() {
        let plain =
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n";
        assert_eq!(device_variables(plain), None);
        let with = ".version 8.0\n.target sm_90\n.address_size 64\n.global .align 4 .u32 counter;\n.const .align 8 .b8 table[64];\n.shared .align 4 .b8 tile[128];\n.visible .entry k()\n{\n\tret;\n}\n";
        assert_eq!(device_variables(with).as_deref(), Some("counter, table"));
        // No hot change: launches are untouched.
        assert_eq!(function(0x42 as Handle), 0x42 as Handle);
    }
}
