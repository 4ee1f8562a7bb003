//! The PTX that goes into an application's module: each probe program JIT-compiled once as
//! a module-private `.func`, and at each site a block that builds the probe ctx and calls it
//! (below); or, for a probe whose ctx loads all have constant offsets, its body inlined in
//! the block, reading the ctx words from registers `%bt_cw<k>` ([`CompiledProbe::inline`]).
//!
//! ```text
//! .func (.param .b64 ret0) __bpftime3_prog_on_entry(.param .b64 ctx) { … }   // module scope, once
//!
//! .entry kernel(…) {
//!   { // bpftime: kprobe on_entry (site 0)                                       // the entry block
//!     .reg .b64 %bt_d<…>; .reg .b32 %bt_r<…>;
//!     .local .align 8 .b8 __bpftime_ctx7[408];
//!     <only the ctx words the program reads: params, %tid, %globaltimer, …>
//!     call.uni (ret), __bpftime3_prog_on_entry, (ctx);
//!   }
//!   … the kernel, unchanged …
//! ```
//!
//! Every name the JIT defines (`bpf_prog_*`, `bpf_sub_*`, helper `.func`s `bpf_h*`, the
//! `bpf_prandom_state` global) is renamed `__bpftime<k>_*` for probe `k` and made
//! module-private, so several probes, and the application's own symbols, never collide.
//! The block declares its own registers in a nested scope: the kernel's registers are
//! untouched. Only the ctx words the verifier saw the program read are written
//! ([`crate::probes::Probe::ctx_words`]): an empty probe costs a call, or nothing inlined.

use crate::probes::{Probe, SiteKind};
use ebpf::{ProbeCtx, PtRegs};
use jit::{JitOptions, MapBinding};
use std::fmt::Write;

/// One kernel parameter, as the site block reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSig {
    /// The `.param` name.
    pub name: String,
    /// Size in bytes (arrays included).
    pub size: u32,
    /// Declared as a `.b8 name[N]` array (a struct passed by value).
    pub array: bool,
}

/// What a site block needs to know about its kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSig {
    /// The mangled name.
    pub name: String,
    /// The parameters, in order.
    pub params: Vec<ParamSig>,
}

/// A probe compiled for one module.
#[derive(Clone, Debug)]
pub struct CompiledProbe {
    /// Name of its `.func` (`__bpftime<k>_prog_<name>`).
    pub func: String,
    /// Module-scope text: prototypes, helper bodies, globals, the `.func`s.
    pub text: String,
    /// The probe's index.
    pub index: usize,
    /// Ctx words it reads.
    pub ctx_words: u64,
    /// Entry or exit.
    pub site: SiteKind,
    /// Its program's name.
    pub name: String,
    /// For memory probes compiled with the ctx in registers: the program's body, to be
    /// inlined at each site inside a `{ }` block where `%bt_cw<k>` hold the ctx words read
    /// (its `ret`s branch to its end, its ctx pointer is 0, its result is dropped). `None`:
    /// sites call [`CompiledProbe::func`] with a ctx in local memory.
    pub inline: Option<String>,
}

/// Lowest PTX ISA and SM the JIT's output needs.
pub const MIN_VERSION: (u32, u32) = (7, 0);
/// Lowest SM the JIT's output needs (`ld.acquire`, `atom.sys`, `%globaltimer`).
pub const MIN_SM: u32 = 70;

/// JIT-compiles probe `index` for a module of `sm`, its maps bound at `maps`. A probe whose
/// ctx reads are all at constant offsets in its entry function is compiled for inlining
/// ([`CompiledProbe::inline`]): no call and no ctx in memory at each site. Kernel entry and
/// exit probes are inlined only with `inline_kernel`: inlined, ptxas compiles the body in
/// every kernel, which costs load time where one `.func` per module would be compiled once
/// (the JIT linker's relocatable code). With `outline`, an inlined memory probe's code from
/// its ctx point on is one `.func` of the module that its sites call
/// ([`jit::JitOptions::split_cold`]), in [`CompiledProbe::text`].
pub fn compile_probe(
    probe: &Probe,
    index: usize,
    maps: Vec<MapBinding>,
    sm: u32,
    lock_pid: u32,
    inline_kernel: bool,
    outline: bool,
) -> Result<CompiledProbe, jit::CompileError> {
    let opts = JitOptions {
        ptx_version: (7, 8),
        sm: sm.max(MIN_SM),
        maps,
        lock_pid,
        entry: false,
        stack_regs: Some(probe.stack_regs.clone()).filter(|s| !s.is_empty()),
        relaxed_atomics: probe.relaxed_atomics,
        ..JitOptions::default()
    };
    let inlinable = match probe.site {
        SiteKind::Memory => true,
        SiteKind::Entry | SiteKind::Exit => inline_kernel,
        SiteKind::HostEntry | SiteKind::HostExit => false,
    };
    if inlinable && probe.ctx_words != u64::MAX && probe.ctx_loads.values().all(|v| v.is_some()) {
        let loads = probe
            .ctx_loads
            .iter()
            .filter_map(|(pc, at)| at.map(|a| (*pc, a)))
            .collect();
        let inline_opts = JitOptions {
            ctx_regs: Some(loads),
            // Adds summed in registers until the thread exits: only at memory sites,
            // which repeat in loops; an entry or exit site runs once per thread.
            defer_adds: probe.site == SiteKind::Memory,
            split_cold: outline && probe.site == SiteKind::Memory,
            ..opts.clone()
        };
        match jit::compile(&probe.program, &inline_opts)
            .map_err(|e| e.to_string())
            .and_then(|m| inline_parts(&m, probe, index))
        {
            Ok(c) => return Ok(c),
            Err(e) => {
                tracing::info!(probe = %probe.program.name, error = %e, "probe not inlined; sites call it")
            }
        }
    }
    let m = jit::compile(&probe.program, &opts)?;
    let full = m.text();
    let body = match full.find(".address_size 64") {
        Some(at) => &full[at + ".address_size 64".len()..],
        None => full.as_str(),
    };
    let prefix = format!("__bpftime{index}_");
    let text = rename(body, &prefix).replace(".visible .func", ".func");
    let func = format!(
        "{prefix}{}",
        m.prog_func().strip_prefix("bpf_").unwrap_or(m.prog_func())
    );
    Ok(CompiledProbe {
        func,
        text: format!(
            "\n// bpftime-super: probe {index} `{}` ({})\n{text}\n",
            probe.program.name, probe.program.section
        ),
        index,
        ctx_words: probe.ctx_words,
        site: probe.site,
        name: probe.program.name.clone(),
        inline: None,
    })
}

/// Splits a module compiled with the ctx in registers into module text (helpers, globals:
/// everything but the program's `.func`) and the inline template of the program's body.
fn inline_parts(m: &jit::PtxModule, probe: &Probe, index: usize) -> Result<CompiledProbe, String> {
    let full = m.text();
    let body = match full.find(".address_size 64") {
        Some(at) => &full[at + ".address_size 64".len()..],
        None => full.as_str(),
    };
    let prefix = format!("__bpftime{index}_");
    let mut text = rename(body, &prefix).replace(".visible .func", ".func");
    let func = format!(
        "{prefix}{}",
        m.prog_func().strip_prefix("bpf_").unwrap_or(m.prog_func())
    );
    let head = format!(".func (.param .b64 ret0) {func}(");
    let mut template = None;
    while let Some(at) = text.find(&head) {
        let close = text[at..]
            .find(')')
            .map(|k| at + k + 1)
            .ok_or("no `)` after the program's parameters")?;
        let rest = text[close..].trim_start();
        if rest.starts_with(';') {
            let end = close + text[close..].find(';').unwrap_or(0) + 1;
            text.replace_range(at..end, "");
            continue;
        }
        let open = close + text[close..].find('{').ok_or("no body")?;
        let mut depth = 0usize;
        let mut end = None;
        for (k, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(open + k + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
        let end = end.ok_or("unbalanced body")?;
        template = Some(text[open + 1..end - 1].to_string());
        text.replace_range(at..end, "");
    }
    let template = template.ok_or("the program's `.func` is not in the module")?;
    let mut t = String::with_capacity(template.len() + 64);
    for line in template.lines() {
        let l = line.trim();
        if l.starts_with("ld.param.b64") && l.contains("[ctx]") {
            let reg = l
                .trim_start_matches("ld.param.b64")
                .split(',')
                .next()
                .unwrap_or("")
                .trim();
            let _ = writeln!(t, "\tmov.b64 {reg}, 0;");
        } else if l.starts_with("st.param.b64") && l.contains("[ret0]") {
            continue;
        } else if l == "ret;" {
            t.push_str("\tbra.uni $__bt_ret;\n");
        } else if l.starts_with('@') && l.ends_with(" ret;") {
            let guard = l.trim_end_matches(" ret;");
            let _ = writeln!(t, "\t{guard} bra $__bt_ret;");
        } else if l.contains("%bt_") && !l.contains("%bt_cw") {
            return Err(format!(
                "the program's body uses a reserved register name: {l}"
            ));
        } else {
            t.push_str(line);
            t.push('\n');
        }
    }
    t.push_str("$__bt_ret:\n");
    Ok(CompiledProbe {
        func,
        text: format!(
            "\n// bpftime-super: probe {index} `{}` ({}), inlined at each site\n{text}\n",
            probe.program.name, probe.program.section
        ),
        index,
        ctx_words: probe.ctx_words,
        site: probe.site,
        name: probe.program.name.clone(),
        inline: Some(t),
    })
}

/// Renames every identifier the JIT defines (`bpf_…` not after `%` or `$`) to `prefix…`.
fn rename(text: &str, prefix: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 256);
    let mut i = 0;
    let mut last = 0;
    while i < b.len() {
        let c = b[i];
        let starts_ident = (c.is_ascii_alphabetic() || c == b'_' || c == b'%' || c == b'$')
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'));
        if !starts_ident {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$') {
            i += 1;
        }
        let ident = &text[start..i];
        if let Some(rest) = ident.strip_prefix("bpf_") {
            out.push_str(&text[last..start]);
            out.push_str(prefix);
            out.push_str(rest);
            last = i;
        }
    }
    out.push_str(&text[last..]);
    out
}

/// Registers a block uses for one ctx word's value.
struct Block {
    text: String,
    d: u32,
    r: u32,
}

impl Block {
    fn d(&mut self) -> String {
        self.d += 1;
        format!("%bt_d{}", self.d - 1)
    }
    fn r(&mut self) -> String {
        self.r += 1;
        format!("%bt_r{}", self.r - 1)
    }
    fn line(&mut self, s: &str) {
        self.text.push_str("\t\t");
        self.text.push_str(s);
        self.text.push('\n');
    }
    /// `dst = lo | hi << 32` from two 32-bit registers.
    fn pack(&mut self, lo: &str, hi: &str) -> String {
        let d = self.d();
        self.line(&format!("mov.b64 {d}, {{{lo}, {hi}}};"));
        d
    }
    fn special(&mut self, sreg: &str) -> String {
        let r = self.r();
        self.line(&format!("mov.u32 {r}, {sreg};"));
        r
    }
}

/// The block run at `site` of `kernel`: fills the ctx words the probes read, then calls
/// each probe. `uid` makes its local array's name unique in the module. `hidden` names the
/// `.param`s carrying the correlation id and launch time, when the kernel has them.
pub fn site_block(
    kernel: &KernelSig,
    probes: &[&CompiledProbe],
    site: SiteKind,
    uid: u32,
    hidden: Option<(&str, &str)>,
) -> String {
    let words = probes.iter().fold(0u64, |w, p| w | p.ctx_words);
    let mut b = Block {
        text: String::new(),
        d: 0,
        r: 0,
    };
    let ctx = format!("__bpftime_ctx{uid}");
    let mut fill: Vec<(usize, String)> = Vec::new();
    let wants = |off: usize| words & (1u64 << (off / 8)) != 0;
    let param = |b: &mut Block, k: usize| -> String {
        let Some(p) = kernel.params.get(k) else {
            let d = b.d();
            b.line(&format!("mov.u64 {d}, 0;"));
            return d;
        };
        let d = b.d();
        let ty = match (p.size, p.array) {
            (8, _) => Some("u64"),
            (4, _) => Some("u32"),
            (2, false) => Some("u16"),
            (1, false) => Some("u8"),
            _ => None,
        };
        match ty {
            Some("u64") => b.line(&format!("ld.param.u64 {d}, [{}];", p.name)),
            Some(t) => {
                let r = b.r();
                b.line(&format!("ld.param.{t} {r}, [{}];", p.name));
                b.line(&format!("cvt.u64.u32 {d}, {r};"));
            }
            None => b.line(&format!("mov.u64 {d}, 0;")),
        }
        d
    };
    // pt_regs argument registers and params[].
    for (k, &off) in PtRegs::PARAM_OFFSETS.iter().enumerate() {
        if wants(off) {
            let d = param(&mut b, k);
            fill.push((off, d));
        }
    }
    for k in 0..16 {
        let off = ProbeCtx::PARAMS + 8 * k;
        if wants(off) {
            let d = param(&mut b, k);
            fill.push((off, d));
        }
    }
    if wants(ProbeCtx::NPARAMS) {
        let d = b.d();
        b.line(&format!("mov.u64 {d}, {};", kernel.params.len()));
        fill.push((ProbeCtx::NPARAMS, d));
    }
    // thread_idx, block_idx, block_dim, grid_dim: 12 u32s from 304 to 352, two per word.
    let sregs = [
        "%tid.x",
        "%tid.y",
        "%tid.z",
        "%ctaid.x",
        "%ctaid.y",
        "%ctaid.z",
        "%ntid.x",
        "%ntid.y",
        "%ntid.z",
        "%nctaid.x",
        "%nctaid.y",
        "%nctaid.z",
    ];
    for w in 0..6 {
        let off = ProbeCtx::THREAD_IDX + 8 * w;
        if wants(off) {
            let lo = b.special(sregs[2 * w]);
            let hi = b.special(sregs[2 * w + 1]);
            let d = b.pack(&lo, &hi);
            fill.push((off, d));
        }
    }
    if wants(ProbeCtx::GLOBAL_THREAD_ID) {
        let s: Vec<String> = sregs.iter().map(|r| b.special(r)).collect();
        // block linear id = ctaid.x + nctaid.x * (ctaid.y + nctaid.y * ctaid.z)
        let (bl, t) = (b.d(), b.d());
        b.line(&format!("mul.wide.u32 {bl}, {}, {};", s[10], s[5]));
        b.line(&format!("cvt.u64.u32 {t}, {};", s[4]));
        b.line(&format!("add.s64 {bl}, {bl}, {t};"));
        b.line(&format!("cvt.u64.u32 {t}, {};", s[9]));
        b.line(&format!("mul.lo.s64 {bl}, {bl}, {t};"));
        b.line(&format!("cvt.u64.u32 {t}, {};", s[3]));
        b.line(&format!("add.s64 {bl}, {bl}, {t};"));
        // threads per block and linear thread id
        let (nb, tl) = (b.d(), b.d());
        b.line(&format!("mul.wide.u32 {nb}, {}, {};", s[6], s[7]));
        b.line(&format!("cvt.u64.u32 {t}, {};", s[8]));
        b.line(&format!("mul.lo.s64 {nb}, {nb}, {t};"));
        b.line(&format!("mul.wide.u32 {tl}, {}, {};", s[7], s[2]));
        b.line(&format!("cvt.u64.u32 {t}, {};", s[1]));
        b.line(&format!("add.s64 {tl}, {tl}, {t};"));
        b.line(&format!("cvt.u64.u32 {t}, {};", s[6]));
        b.line(&format!("mul.lo.s64 {tl}, {tl}, {t};"));
        b.line(&format!("cvt.u64.u32 {t}, {};", s[0]));
        b.line(&format!("add.s64 {tl}, {tl}, {t};"));
        let g = b.d();
        b.line(&format!("mad.lo.s64 {g}, {bl}, {nb}, {tl};"));
        fill.push((ProbeCtx::GLOBAL_THREAD_ID, g));
    }
    if wants(ProbeCtx::TIMER) {
        let d = b.d();
        b.line(&format!("mov.u64 {d}, %globaltimer;"));
        fill.push((ProbeCtx::TIMER, d));
    }
    if wants(ProbeCtx::SM_ID) {
        let (lo, hi) = (b.special("%smid"), b.special("%warpid"));
        let d = b.pack(&lo, &hi);
        fill.push((ProbeCtx::SM_ID, d));
    }
    if wants(ProbeCtx::LANE_ID) {
        let lo = b.special("%laneid");
        let hi = b.r();
        b.line(&format!("mov.u32 {hi}, {};", site.code()));
        let d = b.pack(&lo, &hi);
        fill.push((ProbeCtx::LANE_ID, d));
    }
    if wants(ProbeCtx::KERNEL_ID) {
        let d = b.d();
        b.line(&format!(
            "mov.u64 {d}, {};",
            ProbeCtx::kernel_id(&kernel.name) as i64
        ));
        fill.push((ProbeCtx::KERNEL_ID, d));
    }
    for (off, which) in [
        (ProbeCtx::CORRELATION_ID, hidden.map(|h| h.0)),
        (ProbeCtx::LAUNCH_TIME, hidden.map(|h| h.1)),
    ] {
        if wants(off) {
            let d = b.d();
            match which {
                Some(p) => b.line(&format!("ld.param.u64 {d}, [{p}];")),
                None => b.line(&format!("mov.u64 {d}, 0;")),
            }
            fill.push((off, d));
        }
    }
    // Words read but not set above (pt_regs' other registers) are zero.
    let mut zero: Option<String> = None;
    for w in 0..ProbeCtx::SIZE / 8 {
        let off = 8 * w;
        if wants(off) && !fill.iter().any(|(o, _)| *o == off) {
            let z = match &zero {
                Some(z) => z.clone(),
                None => {
                    let z = b.d();
                    b.line(&format!("mov.u64 {z}, 0;"));
                    zero = Some(z.clone());
                    z
                }
            };
            fill.push((off, z));
        }
    }
    fill.sort_by_key(|(o, _)| *o);
    // The local array spans only the words read: the ctx pointer handed to the probe is
    // the array's address minus the first word's offset, so every read lands inside it.
    let lo = fill.first().map_or(0, |(o, _)| *o);
    let hi = fill.last().map_or(8, |(o, _)| *o + 8);
    // Probes compiled for inlining read their ctx words from `%bt_cw<k>`: no ctx in
    // memory and no call (the body's `ret`s branch to its end).
    let all_inline = probes.iter().all(|p| p.inline.is_some());
    let mut calls = String::new();
    let mut cw = 0;
    if all_inline {
        cw = fill.last().map_or(0, |(o, _)| o / 8 + 1);
        for (off, d) in &fill {
            b.line(&format!("mov.b64 %bt_cw{}, {d};", off / 8));
        }
        for p in probes {
            let _ = writeln!(
                calls,
                "\t\t{{ // {}\n{}\t\t}}",
                p.name,
                p.inline.as_deref().unwrap_or_default()
            );
        }
    } else {
        for (off, d) in &fill {
            b.line(&format!("st.local.u64 [{ctx}+{}], {d};", off - lo));
        }
        let c = b.d();
        b.line(&format!("mov.u64 {c}, {ctx};"));
        b.line(&format!("cvta.local.u64 {c}, {c};"));
        if lo != 0 {
            b.line(&format!("sub.s64 {c}, {c}, {lo};"));
        }
        for p in probes {
            let _ = writeln!(
                calls,
                "\t\t{{ .param .b64 bt_ret; .param .b64 bt_ctx; st.param.b64 [bt_ctx], {c}; call.uni (bt_ret), {}, (bt_ctx); }}",
                p.func
            );
        }
    }
    let names: Vec<&str> = probes.iter().map(|p| p.name.as_str()).collect();
    let kind = match site {
        SiteKind::Entry => "kprobe",
        // Host probes never reach the kernel code generator.
        SiteKind::Exit | SiteKind::Memory | SiteKind::HostEntry | SiteKind::HostExit => "kretprobe",
    };
    let mut out = String::new();
    let _ = writeln!(out, "\t{{ // bpftime-super: {kind} {}", names.join(", "));
    if b.d > 0 {
        let _ = writeln!(out, "\t\t.reg .b64 %bt_d<{}>;", b.d);
    }
    if b.r > 0 {
        let _ = writeln!(out, "\t\t.reg .b32 %bt_r<{}>;", b.r);
    }
    if all_inline {
        if cw > 0 {
            let _ = writeln!(out, "\t\t.reg .b64 %bt_cw<{cw}>;");
        }
    } else {
        let _ = writeln!(out, "\t\t.local .align 8 .b8 {ctx}[{}];", (hi - lo).max(8));
    }
    out.push_str(&b.text);
    out.push_str(&calls);
    out.push_str("\t}\n");
    out
}

/// Per-thread sampling of memory sites: a thread calls the probes at its `every`-th
/// execution of a site (1: each), and at most `budget` times per site (0: no limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sampling {
    /// Call at every `every`-th execution.
    pub every: u32,
    /// Calls per thread and site at most (0: unlimited).
    pub budget: u32,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            every: 1,
            budget: 0,
        }
    }
}

impl Sampling {
    /// Whether every execution calls the probes.
    pub fn is_all(&self) -> bool {
        self.every <= 1 && self.budget == 0
    }
}

/// The `--mem-trace` record of one access ([`crate::memtrace::Record`]): the lanes
/// that make it (the guard's, thinned by sampling: `pred`) reserve their slots with one
/// atomic add on their SM's head from the lowest of them, and only when the head, as that
/// lane reads it, leaves room behind the host's tail: a full ring costs two loads and the
/// drop count, and never moves the head. Lanes whose reservation raced past the room
/// mark their index as a hole instead ([`crate::memtrace`] says why that is safe) and are
/// counted in the drops. Never waits on the host.
pub fn trace_block(
    site: &jit::passes::mem::MemSite,
    site_id: u32,
    addr: &str,
    pred: Option<&(String, bool)>,
    t: crate::memtrace::TraceRing,
) -> String {
    let space = site.space.code().unwrap_or(0);
    let info = site.size.min(63) | site.op.code() << 6 | space << 8;
    // %tp1: the lane makes a record (its guard); %tp3: it is backing off instead.
    let guard = match pred {
        Some((g, true)) => format!("\tnot.pred %tp1, {g};"),
        Some((g, false)) => format!("\tmov.pred %tp1, {g};"),
        None => "\tsetp.eq.u32 %tp1, %tt0, %tt0;".to_string(),
    };
    let (ctl, ring, marks) = (t.ctl as i64, t.ring as i64, t.marks_of(0) as i64);
    let sub = t.sub() as i64;
    format!(
        "\t\t{{ // bpftime-super: --mem-trace record
\t.reg .pred %tp<4>;
\t.reg .b32 %tt<16>;
\t.reg .b64 %td<10>;
\tactivemask.b32 %tt0;
{guard}
\tsetp.ne.u32 %tp3, %bt_tskip, 0;
\tand.pred %tp3, %tp3, %tp1;
\t@%tp3 sub.u32 %bt_tskip, %bt_tskip, 1;
\t@%tp3 add.u64 %bt_tdrop, %bt_tdrop, 1;
\txor.pred %tp1, %tp1, %tp3;
\tvote.sync.ballot.b32 %tt1, %tp1, %tt0;
\tsetp.eq.u32 %tp3, %tt1, 0;
\t@%tp3 bra $__bt_tdone;
\tmov.u32 %tt2, %lanemask_lt;
\tand.b32 %tt2, %tt2, %tt1;
\tpopc.b32 %tt3, %tt2;
\tpopc.b32 %tt4, %tt1;
\tneg.s32 %tt5, %tt1;
\tand.b32 %tt5, %tt5, %tt1;
\tbfind.u32 %tt5, %tt5;
\tmov.u32 %tt6, %laneid;
\tsetp.eq.u32 %tp0, %tt6, %tt5;
\tmov.u32 %tt7, %lanemask_eq;
\tand.b32 %tt7, %tt7, %tt1;
\tsetp.ne.u32 %tp2, %tt7, 0;
\tmov.u32 %tt11, %smid;
\tand.b32 %tt11, %tt11, {smask};
\tmul.wide.u32 %td6, %tt11, {ctl_stride};
\tmul.wide.u32 %td7, %tt11, {ring_stride};
\tmul.wide.u32 %td8, %tt11, {marks_stride};
\tadd.s64 %td6, %td6, {ctl};
\tadd.s64 %td7, %td7, {ring};
\tadd.s64 %td8, %td8, {marks};
\tmov.b64 %td1, -1;
\tmov.b64 %td3, 0;
\t@!%tp0 bra $__bt_tres;
\tcvt.u64.u32 %td0, %tt4;
\tld.relaxed.gpu.global.u64 %td2, [%td6];
\tld.relaxed.gpu.global.u64 %td3, [%td6+{tail}];
\tadd.s64 %td4, %td2, %td0;
\tsub.s64 %td5, %td4, %td3;
\tsetp.le.u64 %tp1, %td5, {cap};
\t@%tp1 atom.relaxed.gpu.global.add.u64 %td1, [%td6], %td0;
$__bt_tres:
\tmov.b64 {{%tt8, %tt9}}, %td1;
\tshfl.sync.idx.b32 %tt8, %tt8, %tt5, 31, %tt0;
\tshfl.sync.idx.b32 %tt9, %tt9, %tt5, 31, %tt0;
\tmov.b64 %td1, {{%tt8, %tt9}};
\tmov.b64 {{%tt8, %tt9}}, %td3;
\tshfl.sync.idx.b32 %tt8, %tt8, %tt5, 31, %tt0;
\tshfl.sync.idx.b32 %tt9, %tt9, %tt5, 31, %tt0;
\tmov.b64 %td3, {{%tt8, %tt9}};
\t@!%tp2 bra $__bt_tdone;
\tsetp.eq.s64 %tp3, %td1, -1;
\t@%tp3 mov.u32 %bt_tskip, {backoff};
\t@%tp3 add.u64 %bt_tdrop, %bt_tdrop, 1;
\t@%tp3 bra $__bt_tdone;
\tcvt.u64.u32 %td4, %tt3;
\tadd.s64 %td4, %td1, %td4;
\tand.b64 %td5, %td4, {mask};
\tsub.s64 %td9, %td4, %td3;
\tsetp.lt.u64 %tp1, %td9, {cap};
\t@%tp1 bra $__bt_twrite;
\tand.b64 %td5, %td4, {mmask};
\tshl.b64 %td5, %td5, 3;
\tadd.s64 %td5, %td5, %td8;
\tst.relaxed.gpu.global.u64 [%td5], %td4;
\tadd.u64 %bt_tdrop, %bt_tdrop, 1;
\tbra $__bt_tdone;
$__bt_twrite:
\tshl.b64 %td5, %td5, 5;
\tadd.s64 %td5, %td5, %td7;
\tst.global.v2.u64 [%td5], {{{addr}, %td4}};
\tmov.u32 %tt11, %tid.x;
\tand.b32 %tt11, %tt11, 1023;
\tshl.b32 %tt11, %tt11, 10;
\tmov.u32 %tt12, %tid.y;
\tand.b32 %tt12, %tt12, 1023;
\tshl.b32 %tt12, %tt12, 20;
\tor.b32 %tt11, %tt11, %tt12;
\tor.b32 %tt11, %tt11, {info};
\tmov.u32 %tt13, %ctaid.x;
\tcvt.u32.u64 %tt14, %td4;
\tmov.u32 %tt15, {site_id};
\tst.global.v4.u32 [%td5+16], {{%tt15, %tt11, %tt13, %tt14}};
$__bt_tdone:
\t\t}}
",
        tail = crate::memtrace::CTL_TAIL,
        backoff = TRACE_BACKOFF,
        mask = sub - 1,
        cap = sub,
        smask = crate::memtrace::STRIPES - 1,
        ctl_stride = crate::memtrace::CTL_BYTES,
        ring_stride = sub * crate::memtrace::RECORD as i64,
        marks_stride = t.mark_slots() * 8,
        mmask = t.mark_slots() - 1,
    )
}

/// Records a lane drops without looking at the ring after it found it full: the full
/// ring's cost is then a compare and two adds per access, and a drain (every
/// `--interval`, milliseconds) loses at most this many records per thread.
pub const TRACE_BACKOFF: u32 = 64;

/// Kernel-scope registers of `--mem-trace`: the lane's back-off countdown and its
/// uncounted drops, zeroed at entry.
pub fn trace_prologue() -> String {
    "\n\t.reg .b32 %bt_tskip;\n\t.reg .b64 %bt_tdrop;\n\tmov.u32 %bt_tskip, 0;\n\tmov.u64 %bt_tdrop, 0;\n"
        .to_string()
}

/// Before each exit: the lane's drops, added to its SM's sub-ring's drop count
/// (warp-aggregated).
pub fn trace_epilogue(t: crate::memtrace::TraceRing) -> String {
    format!(
        "\t{{ // bpftime-super: --mem-trace drops
\t.reg .pred %bt_tq;
\t.reg .b32 %bt_tsm;
\t.reg .b64 %bt_ta;
\tsetp.ne.u64 %bt_tq, %bt_tdrop, 0;
\t@!%bt_tq bra $__bt_tflushed;
\tmov.u32 %bt_tsm, %smid;
\tand.b32 %bt_tsm, %bt_tsm, {smask};
\tmul.wide.u32 %bt_ta, %bt_tsm, {stride};
\tadd.s64 %bt_ta, %bt_ta, {at};
{add}
\tmov.u64 %bt_tdrop, 0;
$__bt_tflushed:
\t}}
",
        smask = crate::memtrace::STRIPES - 1,
        stride = crate::memtrace::CTL_BYTES,
        at = t.ctl as i64 + crate::memtrace::CTL_DROPS as i64,
        // Lanes that dropped as many (a warp of a grid-stride loop, or threads that each
        // made their few accesses) add once per warp.
        add = jit::lower::aggregated_add_text(
            "red.relaxed.gpu.global.add.u64",
            "%bt_ta",
            "%bt_tdrop",
            false,
            false
        ),
    )
}

/// Most deferred-add slots (two `.b64` registers each, live through the kernel) one
/// kernel gets; sites past them add at once.
pub const MAX_DEFER_SLOTS: usize = 16;

/// Adds kept in registers: slot `s` sums what the thread adds to `[%bt_da<s>]` in
/// `%bt_dv<s>`, and the sum goes to memory (warp-aggregated) when the address changes and
/// before the thread exits. A counting probe then costs a compare and an add per access.
#[derive(Clone, Debug, Default)]
pub struct Deferred {
    /// Per slot: the add's width (32 or 64 bits), its `red` opcode, and the map's stripes
    /// (count, stride in bytes; 1 and 0 when not striped).
    pub slots: Vec<(u32, String, u32, u64)>,
    /// Whether to defer at all.
    pub enabled: bool,
}

impl Deferred {
    /// Replaces each `@bt_defer_begin … @bt_defer_end` region of an inlined body with a
    /// deferred add while slots last (the regions left keep their eager form).
    fn apply(&mut self, body: &str) -> String {
        let mut out = String::with_capacity(body.len());
        let mut lines = body.lines();
        while let Some(l) = lines.next() {
            let Some(rest) = l.trim().strip_prefix("// @bt_defer_begin ") else {
                out.push_str(l);
                out.push('\n');
                continue;
            };
            let w: Vec<&str> = rest.split_whitespace().collect();
            if !self.enabled || self.slots.len() >= MAX_DEFER_SLOTS || w.len() != 6 {
                continue; // the eager block follows; its end marker is a comment
            }
            let (a, v, bits, red) = (w[0], w[1], w[2].parse().unwrap_or(64u32), w[3]);
            let stripes = (w[4].parse().unwrap_or(1u32), w[5].parse().unwrap_or(0u64));
            // Skip the eager block.
            for l in lines.by_ref() {
                if l.trim() == "// @bt_defer_end" {
                    break;
                }
            }
            let s = self.slots.len();
            self.slots
                .push((bits, red.to_string(), stripes.0, stripes.1));
            let add = if bits == 32 {
                format!("\tcvt.u64.u32 %bt_t, {v};\n\tadd.s64 %bt_dv{s}, %bt_dv{s}, %bt_t;")
            } else {
                format!("\tadd.s64 %bt_dv{s}, %bt_dv{s}, {v};")
            };
            let _ = writeln!(
                out,
                "\t{{ // deferred add, slot {s}
\t.reg .pred %bt_q<2>;
\t.reg .b64 %bt_t;
\tsetp.eq.u64 %bt_q0, {a}, %bt_da{s};
\t@%bt_q0 bra $__bt_acc;
\tsetp.ne.u64 %bt_q1, %bt_da{s}, 0;
\t@!%bt_q1 bra $__bt_set;
{}
$__bt_set:
\tmov.b64 %bt_da{s}, {a};
\tmov.b64 %bt_dv{s}, 0;
$__bt_acc:
{add}
\t}}",
                flush_text(s, bits, red, stripes)
            );
        }
        out
    }

    /// Kernel-scope declarations and zeroing of the slots.
    pub fn prologue(&self) -> String {
        let n = self.slots.len();
        if n == 0 {
            return String::new();
        }
        let mut s = format!("\n\t.reg .b64 %bt_da<{n}>;\n\t.reg .b64 %bt_dv<{n}>;\n");
        for k in 0..n {
            let _ = writeln!(s, "\tmov.b64 %bt_da{k}, 0;\n\tmov.b64 %bt_dv{k}, 0;");
        }
        s
    }

    /// The flush of every slot, run before each exit of the kernel.
    pub fn epilogue(&self) -> String {
        let mut out = String::new();
        for (k, (bits, red, n, stride)) in self.slots.iter().enumerate() {
            let _ = writeln!(
                out,
                "\t{{ // bpftime-super: deferred adds, slot {k}
\t.reg .pred %bt_q;
\tsetp.ne.u64 %bt_q, %bt_da{k}, 0;
\t@!%bt_q bra $__bt_flushed;
{}
\tmov.b64 %bt_da{k}, 0;
\tmov.b64 %bt_dv{k}, 0;
$__bt_flushed:
\t}}",
                flush_text(k, *bits, red, (*n, *stride))
            );
        }
        out
    }
}

/// A warp-aggregated `red` of slot `s`'s sum to its address, on this SM's stripe.
fn flush_text(s: usize, bits: u32, red: &str, (n, stride): (u32, u64)) -> String {
    let mut out = String::from("\t{\n\t.reg .b64 %bt_fa;\n");
    if n > 1 {
        let _ = writeln!(
            out,
            "\t.reg .b32 %bt_sm;\n\t.reg .b64 %bt_so;\n\tmov.u32 %bt_sm, %smid;\n\tand.b32 %bt_sm, %bt_sm, {};\n\tmul.wide.u32 %bt_so, %bt_sm, {stride};\n\tadd.s64 %bt_fa, %bt_da{s}, %bt_so;",
            n - 1
        );
    } else {
        let _ = writeln!(out, "\tmov.b64 %bt_fa, %bt_da{s};");
    }
    if bits == 32 {
        let _ = writeln!(
            out,
            "\t.reg .b32 %bt_fv;\n\tcvt.u32.u64 %bt_fv, %bt_dv{s};\n{}",
            jit::lower::aggregated_add_text(red, "%bt_fa", "%bt_fv", true, false)
        );
    } else {
        let _ = writeln!(
            out,
            "{}",
            jit::lower::aggregated_add_text(red, "%bt_fa", &format!("%bt_dv{s}"), false, false)
        );
    }
    out.push_str("\t}");
    out
}

/// The kernel-scope registers of sampled memory sites (`%bt_sc<n>`, zeroed at entry), for
/// a kernel with `sites` sites.
pub fn mem_prologue(sites: usize, sampling: Sampling) -> String {
    if sampling.is_all() || sites == 0 {
        return String::new();
    }
    let mut s = format!(
        "
	.reg .b32 %bt_sc<{sites}>;
"
    );
    for k in 0..sites {
        let _ = writeln!(s, "	mov.u32 %bt_sc{k}, 0;");
    }
    s
}

/// The code around one memory access ([`jit::passes::mem::MemSite`]): the address and
/// value captured around the instruction, the [`ebpf::MemCtx`] words the probes read, and
/// the calls, under the instruction's guard. `site_id` is the session-wide id, `local` the
/// site's index within its kernel (its sampling counter).
#[expect(
    clippy::too_many_arguments,
    reason = "one call site; the site's ids, the kernel's sampling, slots and trace are distinct"
)]
pub fn mem_block(
    kernel: &KernelSig,
    probes: &[&CompiledProbe],
    site: &jit::passes::mem::MemSite,
    site_id: u32,
    local: usize,
    uid: u32,
    sampling: Sampling,
    deferred: &mut Deferred,
    trace: Option<crate::memtrace::TraceRing>,
    mut save: Option<&mut SaveArea>,
) -> jit::passes::mem::MemBlock {
    use ebpf::MemCtx;
    use jit::passes::mem::{MemBlock, MemSpace, Regs};
    let words = probes.iter().fold(0u64, |w, p| w | p.ctx_words);
    let wants = |off: usize| words & (1u64 << (off / 8)) != 0;
    let mut regs = Regs::default();
    let mut before = String::new();
    let mut after = String::new();
    // The ctx words' code: at the body's ctx point when the probe has one, else before it.
    // One probe with a ctx point (`jit::lower::CTX_POINT`) gets the words there: one that
    // returns before it pays for none of them. Several probes share the words, so they are
    // ready before the first. The body's own registers are renamed there
    // ([`unshadow`]), so a loaded value is read from the kernel's register at the point
    // too: reading it before the body would wait for the load's data at every site, before
    // the probe could decide anything. Only the lanes that run the probe are active at the
    // point (the guard needs no ballot).
    let point = jit::lower::CTX_POINT.trim();
    let at_point = probes.len() == 1
        && probes[0]
            .inline
            .as_deref()
            .is_some_and(|t| t.lines().filter(|l| l.trim() == point).count() == 1);
    let mut lazy = String::new();
    let mut fill: Vec<(usize, String)> = Vec::new();
    let line = |t: &mut String, l: &str| {
        t.push_str("\t\t");
        t.push_str(l);
        t.push('\n');
    };
    let generic = site.space == MemSpace::Generic;
    let need_addr = wants(MemCtx::ADDR)
        || wants(MemCtx::WARP)
        || (generic && wants(MemCtx::SPACE_SITE))
        || trace.is_some();
    let a = regs.d();
    if need_addr {
        before.push_str(&site.address_into(&a));
        if wants(MemCtx::ADDR) {
            fill.push((MemCtx::ADDR, a.clone()));
        }
    }
    for (off, word) in [(MemCtx::VALUE, 0), (MemCtx::VALUE_HI, 1)] {
        if wants(off) {
            let v = regs.d();
            let code = site.value_into(&v, word, &mut regs);
            if site.value_after() && at_point {
                // Nothing but the probe's own code runs between the load and the point.
                lazy.push_str(&code);
            } else if site.value_after() {
                after.push_str(&code);
            } else {
                // A store's or an atomic's operand: an atomic may write its result over it.
                before.push_str(&code);
            }
            fill.push((off, v));
        }
    }
    let konst = |regs: &mut Regs, t: &mut String, v: u64| -> String {
        let d = regs.d();
        line(t, &format!("mov.u64 {d}, {};", v as i64));
        d
    };
    if wants(MemCtx::SIZE_OP) {
        let d = konst(
            &mut regs,
            &mut lazy,
            site.size as u64 | (site.op.code() as u64) << 32,
        );
        fill.push((MemCtx::SIZE_OP, d));
    }
    if wants(MemCtx::SPACE_SITE) {
        match site.space.code() {
            Some(c) => {
                let d = konst(&mut regs, &mut lazy, c as u64 | (site_id as u64) << 32);
                fill.push((MemCtx::SPACE_SITE, d));
            }
            None => {
                let (r, id) = (regs.r(), regs.r());
                let p = regs.p();
                line(&mut lazy, &format!("mov.u32 {r}, 0;"));
                for (sp, code) in [("global", 1), ("shared", 2), ("local", 3)] {
                    line(&mut lazy, &format!("isspacep.{sp} {p}, {a};"));
                    line(&mut lazy, &format!("@{p} mov.u32 {r}, {code};"));
                }
                line(&mut lazy, &format!("mov.u32 {id}, {site_id};"));
                let d = regs.d();
                line(&mut lazy, &format!("mov.b64 {d}, {{{r}, {id}}};"));
                fill.push((MemCtx::SPACE_SITE, d));
            }
        }
    }
    let sregs = [
        "%tid.x", "%tid.y", "%tid.z", "%ctaid.x", "%ctaid.y", "%ctaid.z",
    ];
    for w in 0..3 {
        let off = MemCtx::THREAD_IDX + 8 * w;
        if wants(off) {
            let (lo, hi) = (regs.r(), regs.r());
            line(&mut lazy, &format!("mov.u32 {lo}, {};", sregs[2 * w]));
            line(&mut lazy, &format!("mov.u32 {hi}, {};", sregs[2 * w + 1]));
            let d = regs.d();
            line(&mut lazy, &format!("mov.b64 {d}, {{{lo}, {hi}}};"));
            fill.push((off, d));
        }
    }
    if wants(MemCtx::TIMER) {
        let d = regs.d();
        line(&mut lazy, &format!("mov.u64 {d}, %globaltimer;"));
        fill.push((MemCtx::TIMER, d));
    }
    if wants(MemCtx::SM_LANE) {
        let (lo, hi) = (regs.r(), regs.r());
        line(&mut lazy, &format!("mov.u32 {lo}, %smid;"));
        line(&mut lazy, &format!("mov.u32 {hi}, %laneid;"));
        let d = regs.d();
        line(&mut lazy, &format!("mov.b64 {d}, {{{lo}, {hi}}};"));
        fill.push((MemCtx::SM_LANE, d));
    }
    if wants(MemCtx::WARP) || wants(MemCtx::LEADER_FLAGS) {
        // The lanes making this access: the active lanes, less those the guard turns off.
        let (act, m) = (regs.r(), regs.r());
        line(&mut lazy, &format!("activemask.b32 {act};"));
        match site.guard_operand().filter(|_| !at_point) {
            Some(g) => line(&mut lazy, &format!("vote.sync.ballot.b32 {m}, {g}, {act};")),
            None => line(&mut lazy, &format!("mov.b32 {m}, {act};")),
        }
        if wants(MemCtx::WARP) {
            // Distinct 32-byte sectors: one leader per group of lanes with the same sector.
            let sec = regs.d();
            line(&mut lazy, &format!("shr.u64 {sec}, {a}, 5;"));
            if let Some((p, neg)) = site.guard.as_ref().filter(|_| !at_point) {
                let off = if *neg { "" } else { "!" };
                line(&mut lazy, &format!("@{off}{p} mov.u64 {sec}, -1;"));
            }
            let (mm, t, lm, lb, n) = (regs.r(), regs.r(), regs.r(), regs.r(), regs.r());
            let q = regs.p();
            line(
                &mut lazy,
                &format!("match.any.sync.b64 {mm}, {sec}, {act};"),
            );
            line(&mut lazy, &format!("neg.s32 {t}, {mm};"));
            line(&mut lazy, &format!("and.b32 {t}, {t}, {mm};"));
            line(&mut lazy, &format!("mov.u32 {lm}, %lanemask_eq;"));
            line(&mut lazy, &format!("setp.eq.u32 {q}, {t}, {lm};"));
            line(
                &mut lazy,
                &format!("vote.sync.ballot.b32 {lb}, {q}, {act};"),
            );
            line(&mut lazy, &format!("and.b32 {lb}, {lb}, {m};"));
            line(&mut lazy, &format!("popc.b32 {n}, {lb};"));
            let d = regs.d();
            line(&mut lazy, &format!("mov.b64 {d}, {{{m}, {n}}};"));
            fill.push((MemCtx::WARP, d));
        }
        if wants(MemCtx::LEADER_FLAGS) {
            let (t, lm, l, fl) = (regs.r(), regs.r(), regs.r(), regs.r());
            let q = regs.p();
            line(&mut lazy, &format!("neg.s32 {t}, {m};"));
            line(&mut lazy, &format!("and.b32 {t}, {t}, {m};"));
            line(&mut lazy, &format!("mov.u32 {lm}, %lanemask_eq;"));
            line(&mut lazy, &format!("setp.eq.u32 {q}, {t}, {lm};"));
            line(&mut lazy, &format!("selp.u32 {l}, 1, 0, {q};"));
            line(&mut lazy, &format!("mov.u32 {fl}, {};", generic as u32));
            let d = regs.d();
            line(&mut lazy, &format!("mov.b64 {d}, {{{l}, {fl}}};"));
            fill.push((MemCtx::LEADER_FLAGS, d));
        }
    }
    if wants(MemCtx::KERNEL_ID) {
        let d = konst(
            &mut regs,
            &mut lazy,
            ebpf::ProbeCtx::kernel_id(&kernel.name),
        );
        fill.push((MemCtx::KERNEL_ID, d));
    }
    // Words read but not set above (the correlation id, until launches pass one) are zero.
    let mut zero: Option<String> = None;
    for w in 0..MemCtx::SIZE / 8 {
        let off = 8 * w;
        if wants(off) && !fill.iter().any(|(o, _)| *o == off) {
            let z = match &zero {
                Some(z) => z.clone(),
                None => {
                    let z = konst(&mut regs, &mut lazy, 0);
                    zero = Some(z.clone());
                    z
                }
            };
            fill.push((off, z));
        }
    }
    fill.sort_by_key(|(o, _)| *o);
    // Who calls: the guard's lanes, thinned by sampling: (predicate, negated).
    let mut pred: Option<(String, bool)> = site.guard.clone();
    if !sampling.is_all() {
        let sc = format!("%bt_sc{local}");
        let p = regs.p();
        line(
            &mut after,
            &format!("{}add.u32 {sc}, {sc}, 1;", site.guard_prefix()),
        );
        let every = sampling.every.max(1);
        let take = regs.p();
        if every > 1 {
            let rem = regs.r();
            line(&mut after, &format!("rem.u32 {rem}, {sc}, {every};"));
            line(&mut after, &format!("setp.eq.u32 {take}, {rem}, 0;"));
        } else {
            line(&mut after, &format!("setp.ne.u32 {take}, {sc}, 0;"));
        }
        if sampling.budget > 0 {
            let limit = sampling.budget as u64 * every as u64;
            let under = regs.p();
            line(
                &mut after,
                &format!("setp.le.u32 {under}, {sc}, {};", limit.min(u32::MAX as u64)),
            );
            line(&mut after, &format!("and.pred {take}, {take}, {under};"));
        }
        match &site.guard {
            Some((g, false)) => line(&mut after, &format!("and.pred {p}, {take}, {g};")),
            Some((g, true)) => {
                line(&mut after, &format!("not.pred {p}, {g};"));
                line(&mut after, &format!("and.pred {p}, {p}, {take};"));
            }
            None => line(&mut after, &format!("mov.pred {p}, {take};")),
        }
        pred = Some((p, false));
    }
    if let Some(t) = trace {
        after.push_str(&trace_block(site, site_id, &a, pred.as_ref(), t));
    }
    let ctx = format!("__bpftime_mctx{uid}");
    let lo = fill.first().map_or(0, |(o, _)| *o);
    let hi = fill.last().map_or(8, |(o, _)| *o + 8);
    let all_inline = probes.iter().all(|p| p.inline.is_some());
    let mut cw = 0;
    if all_inline {
        // The words in `%bt_cw<k>`, read by the inlined bodies; nothing in memory.
        cw = fill.last().map_or(0, |(o, _)| o / 8 + 1);
        for (off, d) in &fill {
            line(&mut lazy, &format!("mov.b64 %bt_cw{}, {d};", off / 8));
        }
        if !at_point {
            after.push_str(&lazy);
        }
        let skip = format!("$__bt_skip{uid}");
        if let Some((p, neg)) = &pred {
            let not = if *neg { "" } else { "!" };
            line(&mut after, &format!("@{not}{p} bra {skip};"));
        }
        for p in probes {
            // Sums stay in registers only where an access repeats (a loop): a site run once
            // per thread would pay the flush at exit for nothing.
            let body = match site.in_loop {
                true => deferred.apply(p.inline.as_deref().unwrap_or_default()),
                false => p.inline.clone().unwrap_or_default(),
            };
            // The point is a comment: replaced by the words, or dropped. A body split at it
            // (`jit::JitOptions::split_cold`) frees the kernel's live registers for its cold
            // part: stored at the point, loaded at the cold part's one exit.
            let cold_end = jit::lower::COLD_END.trim();
            let body = match (at_point, &save) {
                (true, Some(_)) if body.lines().any(|l| l.trim() == cold_end) => {
                    let (store, load, bytes) = save_live(&site.live);
                    if let Some(s) = save.as_deref_mut() {
                        s.bytes = s.bytes.max(bytes);
                        s.blocks += 1;
                    }
                    let body = splice_point(&unshadow(&body), &(store + &lazy));
                    splice_marker(&body, cold_end, &load)
                }
                (true, _) => splice_point(&unshadow(&body), &lazy),
                (false, _) => splice_point(&body, ""),
            };
            let _ = writeln!(after, "\t\t{{ // {}\n{body}\t\t}}", p.name);
        }
        if pred.is_some() {
            let _ = writeln!(after, "{skip}:");
        }
    } else {
        after.push_str(&lazy);
        for (off, d) in &fill {
            line(
                &mut after,
                &format!("st.local.u64 [{ctx}+{}], {d};", off - lo),
            );
        }
        let c = regs.d();
        line(&mut after, &format!("mov.u64 {c}, {ctx};"));
        line(&mut after, &format!("cvta.local.u64 {c}, {c};"));
        if lo != 0 {
            line(&mut after, &format!("sub.s64 {c}, {c}, {lo};"));
        }
        let pre = match &pred {
            Some((p, true)) => format!("@!{p} "),
            Some((p, false)) => format!("@{p} "),
            None => String::new(),
        };
        for p in probes {
            let _ = writeln!(
                after,
                "\t\t{{ .param .b64 bt_ret; .param .b64 bt_ctx; st.param.b64 [bt_ctx], {c}; {pre}call (bt_ret), {}, (bt_ctx); }}",
                p.func
            );
        }
    }
    let mut decls = regs.decls();
    if all_inline {
        if cw > 0 {
            let _ = writeln!(decls, "\t\t.reg .b64 %bt_cw<{cw}>;");
        }
        if after.contains("%bt_sv") {
            let _ = writeln!(decls, "\t\t.reg .b32 %bt_sv;");
        }
    } else {
        let _ = writeln!(
            decls,
            "\t\t.local .align 8 .b8 {ctx}[{}];",
            (hi - lo).max(8)
        );
    }
    let names: Vec<&str> = probes.iter().map(|p| p.name.as_str()).collect();
    let loc = match &site.loc {
        Some(l) => format!(" (file {} line {})", l.file, l.line),
        None => String::new(),
    };
    MemBlock {
        decls,
        before,
        after,
        comment: format!("memprobe {} site {site_id}{loc}", names.join(", ")),
    }
}

/// An inlined body with its own registers renamed (`%rd7` → `%bq_rd7`, `.reg .b64
/// %rd<48>` → `.reg .b64 %bq_rd<48>`; also `%r`, `%rs`, `%p`, `%f`, `%fd`), so that code
/// spliced into it can read the kernel's registers of those names. The helper blocks'
/// `%h…`, the warp blocks' `%w…` and the block's `%bt_…` are other names and stay.
fn unshadow(body: &str) -> String {
    let mut out = String::with_capacity(body.len() + body.len() / 8);
    let b = body.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let rest = &body[i + 1..];
            let prefix = ["rd", "rs", "fd", "r", "f", "p"].into_iter().find(|p| {
                rest.strip_prefix(p)
                    .is_some_and(|t| t.starts_with(|c: char| c.is_ascii_digit() || c == '<'))
            });
            if let Some(p) = prefix {
                out.push_str("%bq_");
                out.push_str(p);
                i += 1 + p.len();
                continue;
            }
        }
        let c = body[i..].chars().next().unwrap_or('\0');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// `body` with its ctx point line replaced by `words`.
fn splice_point(body: &str, words: &str) -> String {
    splice_marker(body, jit::lower::CTX_POINT.trim(), words)
}

/// `body` with each line that is `marker` replaced by `text`.
fn splice_marker(body: &str, marker: &str, text: &str) -> String {
    let mut out = String::with_capacity(body.len() + text.len());
    for l in body.split_inclusive('\n') {
        if l.trim() == marker {
            out.push_str(text);
        } else {
            out.push_str(l);
        }
    }
    out
}

/// The kernel's local array that `save_live` stores registers in.
pub const SAVE_AREA: &str = "__bt_save";

/// One kernel's use of [`SAVE_AREA`]: the most bytes a block stores, and how many blocks
/// free registers around a probe's cold part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SaveArea {
    /// Bytes the array needs.
    pub bytes: usize,
    /// Blocks that store and load registers.
    pub blocks: usize,
}

impl SaveArea {
    /// The array's declaration for the kernel's prologue (empty when no block uses it).
    pub fn prologue(&self) -> String {
        if self.bytes == 0 {
            return String::new();
        }
        format!("\n\t.local .align 8 .b8 {SAVE_AREA}[{}];\n", self.bytes)
    }
}

/// Stores of the kernel registers `live` (name, bits; 1 for a predicate) into
/// [`SAVE_AREA`], the loads that put them back, and the bytes used. Between the two, ptxas
/// sees none of them live: the code there may use the registers they held (a predicate
/// goes through `%bt_sv`, which the block declares).
fn save_live(live: &[(String, u32)]) -> (String, String, usize) {
    let mut regs: Vec<&(String, u32)> = live.iter().collect();
    // Widest slot first (a predicate takes 4 bytes): every slot is aligned to its size.
    regs.sort_by_key(|(_, b)| std::cmp::Reverse(if *b == 1 { 32 } else { *b }));
    let (mut store, mut load, mut at) = (String::new(), String::new(), 0usize);
    for (r, bits) in regs {
        let ty = match *bits {
            1 | 32 => "b32",
            16 => "b16",
            64 => "b64",
            // Wider registers (`.b128`) are left in place.
            _ => continue,
        };
        let size = match ty {
            "b16" => 2,
            "b32" => 4,
            _ => 8,
        };
        at = at.next_multiple_of(size);
        if *bits == 1 {
            let _ = writeln!(store, "\tselp.b32 %bt_sv, 1, 0, {r};");
            let _ = writeln!(store, "\tst.local.b32 [{SAVE_AREA}+{at}], %bt_sv;");
            let _ = writeln!(load, "\tld.local.b32 %bt_sv, [{SAVE_AREA}+{at}];");
            let _ = writeln!(load, "\tsetp.ne.b32 {r}, %bt_sv, 0;");
        } else {
            let _ = writeln!(store, "\tst.local.{ty} [{SAVE_AREA}+{at}], {r};");
            let _ = writeln!(load, "\tld.local.{ty} {r}, [{SAVE_AREA}+{at}];");
        }
        at += size;
    }
    (store, load, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every live register is stored and loaded back at its own aligned slot, widest first;
    /// a predicate goes through `%bt_sv`; a 128-bit register stays in place.
    #[test]
    fn live_registers_are_saved_aligned_and_restored() {
        let live: Vec<(String, u32)> = [
            ("%p1", 1),
            ("%rs2", 16),
            ("%r3", 32),
            ("%rd4", 64),
            ("%q", 128),
        ]
        .into_iter()
        .map(|(n, b)| (n.to_string(), b))
        .collect();
        let (store, load, bytes) = save_live(&live);
        assert_eq!(
            store,
            "\tst.local.b64 [__bt_save+0], %rd4;\n\tselp.b32 %bt_sv, 1, 0, %p1;\n\tst.local.b32 [__bt_save+8], %bt_sv;\n\tst.local.b32 [__bt_save+12], %r3;\n\tst.local.b16 [__bt_save+16], %rs2;\n"
        );
        assert_eq!(
            load,
            "\tld.local.b64 %rd4, [__bt_save+0];\n\tld.local.b32 %bt_sv, [__bt_save+8];\n\tsetp.ne.b32 %p1, %bt_sv, 0;\n\tld.local.b32 %r3, [__bt_save+12];\n\tld.local.b16 %rs2, [__bt_save+16];\n"
        );
        assert_eq!(bytes, 18);
        assert_eq!(save_live(&[]), (String::new(), String::new(), 0));
        assert_eq!(
            SaveArea {
                bytes: 0,
                blocks: 3
            }
            .prologue(),
            ""
        );
        assert!(
            SaveArea {
                bytes: 18,
                blocks: 1
            }
            .prologue()
            .contains("__bt_save[18]")
        );
    }

    #[test]
    fn unshadow_renames_the_bodys_registers_only() {
        let t = "\t.reg .b64 %rd<48>;\n\t.reg .pred %p<3>;\n\tadd.s64 %rd1, %rd12, %r3;\n\t@%p0 mov.u64 %hd1, %rd1;\n\tmov.u64 %bt_d3, %globaltimer; setp.ne.u32 %wp0, %wr1, %rs2; cvt.f64.f32 %fd1, %f2;\n";
        assert_eq!(
            unshadow(t),
            "\t.reg .b64 %bq_rd<48>;\n\t.reg .pred %bq_p<3>;\n\tadd.s64 %bq_rd1, %bq_rd12, %bq_r3;\n\t@%bq_p0 mov.u64 %hd1, %bq_rd1;\n\tmov.u64 %bt_d3, %globaltimer; setp.ne.u32 %wp0, %wr1, %bq_rs2; cvt.f64.f32 %bq_fd1, %bq_f2;\n"
        );
    }

    #[test]
    fn rename_touches_only_bpf_identifiers() {
        let t = ".func (.param .b64 ret0) bpf_prog_x(.param .b64 ctx)\n{ call.uni (r), bpf_h1_m0, (a); mov.u64 %rd1, bpf_prandom_state; $Lbpf_x: %bpf_y; xbpf_z; }";
        let r = rename(t, "__bpftime2_");
        assert!(r.contains("__bpftime2_prog_x("));
        assert!(r.contains("__bpftime2_h1_m0,"));
        assert!(r.contains("__bpftime2_prandom_state;"));
        assert!(r.contains("$Lbpf_x") && r.contains("%bpf_y") && r.contains("xbpf_z"));
    }

    #[test]
    fn empty_probe_block_is_a_call() {
        let k = KernelSig {
            name: "k".into(),
            params: vec![],
        };
        let p = CompiledProbe {
            func: "__bpftime0_prog_f".into(),
            text: String::new(),
            index: 0,
            ctx_words: 0,
            site: SiteKind::Entry,
            name: "f".into(),
            inline: None,
        };
        let b = site_block(&k, &[&p], SiteKind::Entry, 3, None);
        assert!(!b.contains("st.local"), "{b}");
        assert!(b.contains("call.uni (bt_ret), __bpftime0_prog_f, (bt_ctx);"));
    }

    #[test]
    fn block_fills_exactly_the_words_read() {
        let k = KernelSig {
            name: "_Z9vectorAddPKfS0_Pfi".into(),
            params: ["p0", "p1", "p2", "p3"]
                .iter()
                .enumerate()
                .map(|(i, n)| ParamSig {
                    name: n.to_string(),
                    size: if i == 3 { 4 } else { 8 },
                    array: false,
                })
                .collect(),
        };
        let words = (1u64 << (PtRegs::PARAM_OFFSETS[3] / 8))
            | (1 << (ProbeCtx::GLOBAL_THREAD_ID / 8))
            | (1 << (ProbeCtx::KERNEL_ID / 8));
        let p = CompiledProbe {
            func: "f".into(),
            text: String::new(),
            index: 0,
            ctx_words: words,
            site: SiteKind::Entry,
            name: "f".into(),
            inline: None,
        };
        let b = site_block(&k, &[&p], SiteKind::Entry, 0, None);
        assert_eq!(b.matches("st.local.u64").count(), 3, "{b}");
        assert!(b.contains("ld.param.u32 %bt_r0, [p3];"), "{b}");
        // The array spans the words read, from pt_regs' rcx (88) to kernel_id (384).
        let lo = PtRegs::PARAM_OFFSETS[3];
        assert!(b.contains("[__bpftime_ctx0+0], %bt_d0;"), "{b}");
        assert!(
            b.contains("sub.s64 %bt_d") && b.contains(&format!(", {lo};")),
            "{b}"
        );
        assert!(
            b.contains(&format!(
                ".b8 __bpftime_ctx0[{}];",
                ProbeCtx::KERNEL_ID + 8 - lo
            )),
            "{b}"
        );
        let id = ProbeCtx::kernel_id("_Z9vectorAddPKfS0_Pfi") as i64;
        assert!(b.contains(&format!(", {id};")), "{b}");
    }
}
