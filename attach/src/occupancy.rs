//! Keeping an instrumented kernel launchable, and optionally its occupancy.
//!
//! ptxas gives a kernel the registers of its most demanding path. Probes inlined at every
//! site bring their own slow paths (a delay probe's 64-bit bookkeeping, counters summed in
//! registers through a loop), so an instrumented kernel can need several times the
//! registers of the original even where those paths never run: ptxas 12.9 gave a 16×16-tiled
//! SGEMM 88 registers per thread under cxl-sim's probe, against 32. At more than 64 a block
//! of 1024 threads no longer fits an SM's 64K registers, and a launch the original made
//! would fail.
//!
//! The shim therefore reads each original kernel's register count (from the image's own
//! SASS, or the driver's compile of its PTX) and caps the instrumented kernel with
//! `.maxnreg` ([`Cap`]):
//! - [`Cap::Launch`] (the default): only where the driver's build of the instrumented
//!   kernel would launch smaller blocks than the original ([`launch_caps`]), at the most
//!   registers at which every block size the original could launch still fits (64 for any
//!   original of at most 64). Capping every kernel so was measured slower where it changed
//!   no launch: the driver's compiler then spills (a STREAM triad at 1.96× against 1.67×
//!   uncapped under cxl-sim's probe, `bench/results/cxl_gpu.md` run 16);
//! - [`Cap::Occupancy`]: the most registers that keep the original's resident warps per
//!   SM. ptxas then spills what the probes need beyond that, and on an H200 the spills
//!   cost more than the occupancy: SGEMM 2.73× against 1.95× uncapped, the triad 2.24×
//!   against 1.66×, at a delay probe that returned at once (`bench/results/cxl_gpu.md`).
//!
//! A kernel whose probes are split (`trace --cold-split`: [`crate::instrument::Report::freed`])
//! is capped at [`freed_cap`] under [`Cap::Launch`]: its rare paths are called, with the
//! kernel's registers stored around the call, so a cap spills inside the call only.
//!
//! Kernels with `.minnctapersm` (launch bounds) are left alone: ptxas already bounds their
//! registers. So are pieces given to the JIT linkers (`cuLinkAddData`, `nvJitLinkAddData`:
//! not loadable on their own) and hot-attached copies (`shim::hot`).
//!
//! ```text
//! original: 32 regs ─▶ blocks up to 1024 threads, 64 warps/SM
//!   Launch:    instrumented, uncapped: 48 regs, 1024 threads ─▶ no cap
//!              instrumented, uncapped: 72 regs,  896 threads ─▶ cap = most regs at
//!                                                 which 1024 threads fit = 64 ─▶ `.maxnreg 64`
//!   Occupancy: cap = most regs at 64 resident warps         = 32 ─▶ `.maxnreg 32`
//! ```

/// Which cap the shim sets (`BPFTIME_REG_CAP`: `launch`, `occupancy`, `0` for none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cap {
    /// No cap.
    Off,
    /// Every block size the original could launch still fits.
    Launch,
    /// The original's resident warps per SM.
    Occupancy,
}

impl Cap {
    /// From `BPFTIME_REG_CAP`'s value (unset: [`Cap::Launch`]); `None` for an unknown one.
    pub fn parse(v: Option<&str>) -> Option<Cap> {
        match v {
            None | Some("") | Some("launch") => Some(Cap::Launch),
            Some("0") | Some("off") => Some(Cap::Off),
            Some("occupancy") => Some(Cap::Occupancy),
            Some(_) => None,
        }
    }

    /// The cap for an original kernel of `orig` registers, if any.
    pub fn registers(self, limits: SmLimits, orig: u32) -> Option<u32> {
        match self {
            Cap::Off => None,
            Cap::Occupancy => Some(register_cap(limits, orig)),
            // A block has at most 1024 threads (32 warps) and one SM's registers.
            Cap::Launch => Some(register_cap(
                SmLimits {
                    regs: limits.regs,
                    warps: limits.warps.min(32),
                },
                orig,
            )),
        }
    }
}

/// An SM's register file and resident-warp limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmLimits {
    /// 32-bit registers per SM.
    pub regs: u32,
    /// Resident warps per SM.
    pub warps: u32,
}

impl SmLimits {
    /// sm_80 and sm_90 (A100, H100, H200): 64K registers, 64 warps.
    pub const SM90: SmLimits = SmLimits {
        regs: 65536,
        warps: 64,
    };

    /// Resident warps at `regs` registers per thread: registers are given out per warp, in
    /// units of 256 (8 per thread).
    pub fn warps_at(&self, regs: u32) -> u32 {
        let per_warp = regs.max(1).div_ceil(8) * 8 * 32;
        (self.regs / per_warp).min(self.warps)
    }
}

/// The most registers per thread (at most 255) that keep the resident warps a kernel of
/// `orig` registers has: at least `orig` rounded up to the allocation unit.
pub fn register_cap(limits: SmLimits, orig: u32) -> u32 {
    let want = limits.warps_at(orig);
    let mut r = orig.max(1).div_ceil(8) * 8;
    while r + 8 <= 255 && limits.warps_at(r + 8) >= want {
        r += 8;
    }
    r.min(255)
}

/// Registers the hot part of a split memory probe (its first test and the call of its
/// cold part) may need beyond the original kernel's: one allocation unit.
pub const FREED_HEADROOM: u32 = 8;

/// The cap of a kernel whose probe blocks free its registers around the probes' cold parts
/// ([`crate::instrument::Report::freed`]), for an original of `orig` registers: the most
/// registers that keep the resident warps of `orig` + [`FREED_HEADROOM`], but never more
/// than [`Cap::Launch`] allows (every block size the original could launch still fits).
/// The kernel then runs with about the original's occupancy and what the cold parts need
/// beyond the cap spills inside their call. Without the headroom a kernel already at an
/// occupancy step spills in its own code (a 16×16-tiled SGEMM of 32 registers, capped at
/// 32: 4.1× its time, against 1.6× at 40; `bench/results/cxl_gpu.md`, run 22).
pub fn freed_cap(limits: SmLimits, orig: u32) -> u32 {
    let launch = Cap::Launch.registers(limits, orig).unwrap_or(255);
    register_cap(limits, orig + FREED_HEADROOM).min(launch)
}

/// A kernel as the driver loaded it: its registers per thread and the largest block it
/// launches (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`, which the registers bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// Registers per thread.
    pub regs: u32,
    /// Most threads per block.
    pub max_threads: u32,
}

/// The caps of [`Cap::Launch`]: only the kernels whose instrumented build, uncapped, launches
/// smaller blocks than the original did, each at the most registers at which the
/// original's blocks fit (the others run uncapped: a cap that changes nothing a launch can
/// see only makes ptxas spill). `original` and `instrumented` are per kernel, by name; a
/// kernel missing from either is left alone.
pub fn launch_caps(
    limits: SmLimits,
    original: &[(String, Loaded)],
    instrumented: &[(String, Loaded)],
) -> Vec<(String, u32)> {
    original
        .iter()
        .filter_map(|(k, o)| {
            let (_, i) = instrumented.iter().find(|(n, _)| n == k)?;
            if i.max_threads >= o.max_threads {
                return None;
            }
            Some((k.clone(), Cap::Launch.registers(limits, o.regs)?))
        })
        .collect()
}

/// `ptx` with `.maxnreg` set on each named `.entry`: inserted after its parameter list,
/// or an existing `.maxnreg` lowered to the cap (never raised). Entries with
/// `.minnctapersm`, and names not found, are left as they are. Returns the text and the
/// kernels capped.
pub fn cap_registers(ptx: &str, caps: &[(String, u32)]) -> (String, Vec<String>) {
    let mut out = ptx.to_string();
    let mut capped = Vec::new();
    for (name, cap) in caps {
        let Some(head) = entry_head(&out, name) else {
            continue;
        };
        let (after_params, body) = head;
        let directives = &out[after_params..body];
        if directives.contains(".minnctapersm") {
            continue;
        }
        if let Some(at) = directives.find(".maxnreg") {
            let start = after_params + at + ".maxnreg".len();
            let digits: String = out[start..]
                .chars()
                .skip_while(|c| c.is_whitespace())
                .take_while(|c| c.is_ascii_digit())
                .collect();
            let ws = out[start..].len() - out[start..].trim_start().len();
            let Ok(n) = digits.parse::<u32>() else {
                continue;
            };
            if n > *cap {
                out.replace_range(start + ws..start + ws + digits.len(), &cap.to_string());
                capped.push(name.clone());
            }
        } else {
            out.insert_str(after_params, &format!("\n.maxnreg {cap}"));
            capped.push(name.clone());
        }
    }
    (out, capped)
}

/// Where `.entry name`'s parameter list ends and its body's `{` is (a declaration without
/// a body, and text in `//` comments, are passed over).
fn entry_head(ptx: &str, name: &str) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(k) = ptx[from..].find(".entry") {
        let at = from + k + ".entry".len();
        from = at;
        let line_start = ptx[..at].rfind('\n').map_or(0, |n| n + 1);
        if ptx[line_start..at].contains("//") {
            continue;
        }
        let rest = &ptx[at..];
        let trimmed = rest.trim_start();
        let Some(after) = trimmed.strip_prefix(name) else {
            continue;
        };
        if after.starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let mut p = at + (rest.len() - trimmed.len()) + name.len();
        let open = ptx[p..].trim_start();
        if open.starts_with('(') {
            let start = p + (ptx[p..].len() - open.len());
            let close = start + ptx[start..].find(')')?;
            p = close + 1;
        }
        let body = p + ptx[p..].find(['{', ';'])?;
        if ptx[body..].starts_with(';') {
            continue;
        }
        return Some((p, body));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_keep_the_resident_warps() {
        let l = SmLimits::SM90;
        // Up to 32 registers a thread, 64 warps: the cap is 32.
        assert_eq!((l.warps_at(12), register_cap(l, 12)), (64, 32));
        assert_eq!(register_cap(l, 32), 32);
        // 40 → 48 warps (51 by registers, in units of 8 per thread: 40).
        assert_eq!((l.warps_at(40), register_cap(l, 40)), (51, 40));
        assert_eq!((l.warps_at(48), register_cap(l, 41)), (42, 48));
        assert_eq!((l.warps_at(64), register_cap(l, 64)), (32, 64));
        assert_eq!(register_cap(l, 128), 128);
        assert_eq!(register_cap(l, 255), 255);
        assert!(register_cap(l, 200) >= 200 && register_cap(l, 200) <= 255);
        // Never fewer warps than the original, never fewer registers.
        for orig in 1..=255 {
            let c = register_cap(l, orig);
            assert!(
                c >= orig && l.warps_at(c) == l.warps_at(orig),
                "{orig} -> {c}"
            );
        }
    }

    /// A kernel whose probes are split keeps the occupancy of its own registers plus one
    /// allocation unit: the triad's 12 stay at 32 (64 warps), SGEMM's 32 go to 40.
    #[test]
    fn freed_kernels_get_one_unit_of_headroom() {
        let l = SmLimits::SM90;
        assert_eq!(freed_cap(l, 12), 32);
        assert_eq!(freed_cap(l, 24), 32);
        assert_eq!(freed_cap(l, 32), 40);
        // No headroom where it would shrink the blocks the original could launch: at 64
        // registers a 1024-thread block just fits, at 72 it would not.
        assert_eq!(freed_cap(l, 64), 64);
        assert_eq!(freed_cap(l, 56), 64);
        for orig in 1..=255 {
            let c = freed_cap(l, orig);
            let launch = Cap::Launch.registers(l, orig).unwrap();
            assert!(c >= orig && c <= launch, "{orig} -> {c}");
            // Every block size the original's registers allowed still fits.
            assert!(
                l.warps_at(c).min(32) >= l.warps_at(orig).min(32),
                "{orig} -> {c}"
            );
            if orig + FREED_HEADROOM <= launch {
                assert!(c >= orig + FREED_HEADROOM, "{orig} -> {c}");
            }
        }
    }

    #[test]
    fn only_kernels_that_lose_block_sizes_are_capped() {
        let l = SmLimits::SM90;
        let k = |n: &str, regs, max_threads| (n.to_string(), Loaded { regs, max_threads });
        let original = [
            k("a", 16, 1024),
            k("b", 32, 1024),
            k("c", 100, 608),
            k("d", 20, 1024),
        ];
        // a: 48 registers, still 1024 threads: left uncapped. b: 72, down to 896: capped at
        // 64. c: from 608 threads (19 warps of 104 registers) to 512: capped at 104, what
        // keeps 19 warps. d: not in the instrumented image: left alone.
        let instrumented = [k("a", 48, 1024), k("b", 72, 896), k("c", 120, 512)];
        assert_eq!(
            launch_caps(l, &original, &instrumented),
            vec![("b".to_string(), 64), ("c".to_string(), 104)]
        );
        assert!(launch_caps(l, &original, &[]).is_empty());
    }

    #[test]
    fn launch_caps_keep_every_block_size() {
        let l = SmLimits::SM90;
        assert_eq!(Cap::Launch.registers(l, 12), Some(64));
        assert_eq!(Cap::Launch.registers(l, 64), Some(64));
        // 72 registers: 28 warps fit, so blocks up to 896 threads; so does 72.
        assert_eq!(Cap::Launch.registers(l, 72), Some(72));
        assert_eq!(Cap::Occupancy.registers(l, 12), Some(32));
        assert_eq!(Cap::Off.registers(l, 12), None);
        for orig in 1..=255 {
            let c = Cap::Launch.registers(l, orig).unwrap();
            // The largest block the original fits, in warps, fits the cap too.
            let block = l.warps_at(orig).min(32);
            assert!(c >= orig && l.warps_at(c) >= block, "{orig} -> {c}");
        }
        assert_eq!(Cap::parse(None), Some(Cap::Launch));
        assert_eq!(Cap::parse(Some("occupancy")), Some(Cap::Occupancy));
        assert_eq!(Cap::parse(Some("0")), Some(Cap::Off));
        assert_eq!(Cap::parse(Some("fast")), None);
    }

    #[test]
    fn maxnreg_is_inserted_lowered_or_left() {
        let ptx = ".visible .entry a(\n.param .u64 a_0\n)\n{\nret;\n}\n\
                   .visible .entry ab(.param .u32 x)\n.maxnreg 200\n{\nret;\n}\n\
                   .visible .entry c()\n.maxntid 256, 1, 1\n.minnctapersm 4\n{\nret;\n}\n\
                   .visible .entry d\n{\nret;\n}\n\
                   .visible .entry e()\n.maxnreg 24\n{\nret;\n}\n\
                   // .entry f() is below\n.extern .entry f(.param .u32 y);\n\
                   .visible .entry f(.param .u32 y)\n{\nret;\n}\n";
        let caps: Vec<(String, u32)> = [
            ("a", 32),
            ("ab", 64),
            ("c", 32),
            ("d", 40),
            ("e", 32),
            ("f", 48),
            ("zz", 8),
        ]
        .iter()
        .map(|(n, c)| (n.to_string(), *c))
        .collect();
        let (t, capped) = cap_registers(ptx, &caps);
        assert_eq!(capped, ["a", "ab", "d", "f"]);
        // The definition, not the comment or the declaration before it.
        assert!(
            t.contains("// .entry f() is below\n.extern .entry f(.param .u32 y);\n"),
            "{t}"
        );
        assert!(t.contains("f(.param .u32 y)\n.maxnreg 48\n{"), "{t}");
        assert!(t.contains("a(\n.param .u64 a_0\n)\n.maxnreg 32\n{"), "{t}");
        assert!(t.contains("ab(.param .u32 x)\n.maxnreg 64\n{"), "{t}");
        assert!(
            t.contains(".minnctapersm 4\n{") && !t.contains("c()\n.maxnreg"),
            "{t}"
        );
        assert!(t.contains("entry d\n.maxnreg 40\n{"), "{t}");
        // Already below the cap: kept.
        assert!(t.contains("e()\n.maxnreg 24\n{"), "{t}");
    }
}
