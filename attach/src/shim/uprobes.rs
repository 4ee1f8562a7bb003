//! Host probes: `uprobe/libcuda.so:FUNCTION` and `uretprobe/libcuda.so:FUNCTION` programs
//! run when the application calls, and when it returns from, one of the driver functions
//! the shim wraps ([`super::api::Api`]: copies, allocations, frees, prefetches, launches,
//! synchronisations). They run in the calling thread, compiled once by the CPU JIT
//! ([`jit::cpu::HostProbe`]), on the session's maps in the shared region, so `trace`
//! prints them with the GPU probes' maps.
//!
//! The ctx is x86-64 `struct pt_regs` (168 bytes, UAPI layout): libbpf's `BPF_KPROBE`,
//! `BPF_KRETPROBE` and `PT_REGS_PARM1`..`PARM6`/`PT_REGS_RC` read the arguments from
//! `di, si, dx, cx, r8, r9`, the result from `ax`; `ip` holds the driver function's
//! address. Arguments past the sixth (`cuLaunchKernel` has eleven) are not in the ctx.
//!
//! In libcuda.so only the wrapped functions can be probed: a section naming another driver
//! function is refused when `trace` loads the probes, before the application starts.
//! Sections naming another library (`uprobe/libfoo.so:function`) go to
//! [`super::symprobes`], which patches the application's calls to that export.

use crate::api::Api;
use ebpf::interp::Env;
use jit::cpu::{Engine, HostProbe};
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

/// Bytes of the ctx: x86-64 `struct pt_regs`.
pub const PT_REGS_SIZE: usize = 168;
/// Offsets in `struct pt_regs` of the argument registers, in argument order.
pub const ARG_OFFSETS: [usize; 6] = [112, 104, 96, 88, 72, 64];
/// Offset of `ax` (the return value).
pub const AX: usize = 80;
/// Offset of `ip`.
pub const IP: usize = 128;
/// Offset of `sp`.
pub const SP: usize = 152;
/// Arguments past the sixth a wrapped function has at most (`cuLaunchKernel`: 11).
const STACK_ARGS: usize = 10;
/// Bytes of a host probe's ctx ([`crate::api::HOST_CTX_SIZE`]): the `pt_regs` above first;
/// `correlation_id` holds the calling thread's latest launch number
/// ([`super::launch::current`]: the launch itself, for a probe on a launch entry point), the
/// number the kernel's own probes read; the other fields are 0.
pub use crate::api::HOST_CTX_SIZE;

/// The probes of each wrapped function.
struct Loaded {
    entry: Vec<Vec<Arc<HostProbe>>>,
    exit: Vec<Vec<Arc<HostProbe>>>,
    /// Per function: some probe on it calls `get_stack`, so the stack is walked first.
    stacks: Vec<bool>,
    /// Keeps the maps' mapping alive.
    _region: Arc<shm_maps::ShmRegion>,
}

static LOADED: OnceLock<Option<Loaded>> = OnceLock::new();

/// Host probes are paused: wrapped calls skip them (the wrappers themselves stay).
static PAUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Pauses (`true`) or resumes every host probe, on driver functions and on library and
/// executable functions alike, and the API log's records (`trace --api-log`, which
/// `llm-cache observe` reads); returns whether they were paused. The application (or a
/// benchmark inside it) reaches it as the shim's C symbol `bpftime_host_probes_pause`, so
/// a run can compare steps with and without probes in one process.
pub fn set_paused(paused: bool) -> bool {
    PAUSED.swap(paused, std::sync::atomic::Ordering::Relaxed)
}

/// Whether host probes (and the API log's records) are paused.
pub(crate) fn paused() -> bool {
    PAUSED.load(std::sync::atomic::Ordering::Relaxed)
}

fn load() -> Option<Loaded> {
    let (probes, region_name) = super::hooks::host_probe_inputs()?;
    if probes.probes.iter().all(|p| p.site.on_gpu()) {
        return None;
    }
    let warn = |what: String| super::hooks::report(&[crate::session::ReportLine::Warning { what }]);
    let region = match shm_maps::ShmRegion::open(&region_name) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            warn(format!("host probes disabled: region `{region_name}`: {e}"));
            return None;
        }
    };
    let n = Api::ALL.len();
    let mut l = Loaded {
        entry: (0..n).map(|_| Vec::new()).collect(),
        exit: (0..n).map(|_| Vec::new()).collect(),
        stacks: vec![false; n],
        _region: region.clone(),
    };
    for p in &probes.probes {
        if p.host_fns.is_empty() {
            continue; // GPU probes, and symbol probes (`super::symprobes`)
        }
        match compile(&probes, p, &region) {
            Ok((hp, walks)) => {
                for &api in &p.host_fns {
                    l.stacks[api as usize] |= walks;
                    let list = if p.site == crate::probes::SiteKind::HostExit {
                        &mut l.exit
                    } else {
                        &mut l.entry
                    };
                    list[api as usize].push(hp.clone());
                }
            }
            Err(what) => warn(format!("host probe `{}` disabled: {what}", p.program.name)),
        }
    }
    Some(l)
}

/// Compiles host probe `p` (CPU JIT) on the session's maps in `region`; the flag says
/// whether it may walk the user stack (`get_stack`), which is then captured first.
pub(super) fn compile(
    probes: &crate::probes::ProbeSet,
    p: &crate::probes::Probe,
    region: &Arc<shm_maps::ShmRegion>,
) -> Result<(Arc<HostProbe>, bool), String> {
    let maps: Result<Vec<_>, String> = p
        .program
        .maps
        .iter()
        .map(|m| {
            let name = probes.map_name(p.object, &m.name);
            let e = region
                .find_map(&name)
                .ok_or_else(|| format!("map `{name}` is not in the region"))?;
            shm_maps::maps::open_in(region, e.data_off, m, e.threads.max(1))
                .map_err(|err| format!("map `{name}`: {err}"))
        })
        .collect();
    let hp = maps.and_then(|maps| {
        HostProbe::new(&p.program, maps, HOST_CTX_SIZE, Engine::Jit)
            .map_err(|e| super::hooks::error_chain(&e))
    })?;
    let walks = p.program.insns.iter().any(|i| {
        // `call imm` of a helper (src 0), or `callx`: walk to be safe.
        (i.code == 0x85 && i.src == 0 && i.imm == ebpf::helpers::GET_STACK) || i.code == 0x8d
    });
    Ok((Arc::new(hp), walks))
}

/// Runs `list` in the calling thread on `regs` (whose correlation id this fills in);
/// a probe whose helper re-enters an intercepted function runs no nested probes.
pub(super) fn run_on(list: &[Arc<HostProbe>], regs: &mut [u8; HOST_CTX_SIZE], stacks: bool) {
    if paused() {
        return;
    }
    if stacks {
        super::userstack::capture();
    }
    let corr = super::launch::current();
    let at = ebpf::ProbeCtx::CORRELATION_ID;
    regs[at..at + 8].copy_from_slice(&corr.to_le_bytes());
    let _ = ENV.try_with(|env| {
        let Ok(mut env) = env.try_borrow_mut() else {
            return;
        };
        for p in list {
            // The verifier proved the program safe on this ctx; a runtime error (the
            // instruction budget) only ends this run.
            let _ = p.call(regs, &mut env);
        }
    });
    // What the probes wrote into maps the GPU probes only read reaches the GPU before the
    // probed call returns (an allocation a probe recorded, before the kernel that uses it).
    super::devmaps::sync_inbound();
}

fn loaded() -> Option<&'static Loaded> {
    LOADED.get_or_init(load).as_ref()
}

/// Whether any host probe sits on `a`.
pub fn active(a: Api) -> bool {
    loaded().is_some_and(|l| !l.entry[a as usize].is_empty() || !l.exit[a as usize].is_empty())
}

/// Tells `trace` (once per function and address) which driver function sits at `ip`, so
/// that it prints map keys holding a probe's `PT_REGS_IP(ctx)` as the function's name.
fn name_address(a: Api, ip: u64) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEEN: OnceLock<Vec<AtomicU64>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| (0..Api::ALL.len()).map(|_| AtomicU64::new(0)).collect());
    // A load first: the common case (already named) writes nothing to the shared line.
    let slot = &seen[a as usize];
    if slot.load(Ordering::Relaxed) != ip && slot.swap(ip, Ordering::Relaxed) != ip {
        super::hooks::report(&[crate::session::ReportLine::HostFunction {
            name: a.name().to_string(),
            ip,
        }]);
    }
}

thread_local! {
    static ENV: RefCell<Env> = RefCell::new({
        let mut env = Env::default();
        env.host = Some(super::userstack::HOST);
        env
    });
}

/// Runs `a`'s entry probes (`rc` `None`) or exit probes (`rc` the result) on a `pt_regs`
/// holding `args` and the function's address `ip`.
pub fn run(a: Api, args: &[u64], ip: u64, rc: Option<i32>) {
    let Some(l) = loaded() else {
        return;
    };
    // (Paused: the wrapper skips this call, and `run_on` a call the switch catches midway.)
    let list = match rc {
        None => &l.entry[a as usize],
        Some(_) => &l.exit[a as usize],
    };
    if list.is_empty() {
        return;
    }
    name_address(a, ip);
    let mut regs = [0u8; HOST_CTX_SIZE];
    for (v, off) in args.iter().zip(ARG_OFFSETS) {
        regs[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }
    regs[IP..IP + 8].copy_from_slice(&ip.to_le_bytes());
    // Arguments past the sixth sit where the x86-64 ABI puts them at the function's entry:
    // `sp` points to a return address, argument 7 at `sp + 8`, 8 at `sp + 16`, …; a probe
    // reads them with `bpf_probe_read_user(&v, 8, (void *)(PT_REGS_SP(ctx) + 8 * (n - 6)))`.
    // The image lives on this frame, which outlives the probes' runs below.
    let mut stack = [0u64; STACK_ARGS + 1];
    stack[0] = ip;
    for (slot, v) in stack[1..].iter_mut().zip(args.iter().skip(6)) {
        *slot = *v;
    }
    let sp = stack.as_ptr() as u64;
    regs[SP..SP + 8].copy_from_slice(&sp.to_le_bytes());
    if let Some(r) = rc {
        regs[AX..AX + 8].copy_from_slice(&(r as i64 as u64).to_le_bytes());
    }
    run_on(list, &mut regs, l.stacks[a as usize]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ctx_is_pt_regs() {
        // The UAPI x86-64 layout: r15 r14 r13 r12 bp bx r11 r10 r9 r8 ax cx dx si di
        // orig_ax ip cs flags sp ss, 8 bytes each.
        let at = |i: usize| i * 8;
        assert_eq!(ARG_OFFSETS, [at(14), at(13), at(12), at(11), at(9), at(8)]);
        assert_eq!(SP, at(19));
        assert_eq!((AX, IP, PT_REGS_SIZE), (at(10), at(16), at(21)));
    }
}
