//! The structures the probe and the host share, defined once: [`CxlConfig`] (the
//! parameters and the CXL address ranges, a global of the probe object that the host writes
//! before the application starts), [`CxlState`] (the bucket and the bandwidth windows) and
//! the statistics' indices. [`c_header`] prints them for the probe; the committed
//! `bpf/cxl_abi.h` must equal it (a unit test checks, `BPFTIME_BLESS=1` rewrites it).

/// `"CXLSIM\0\x01"`, little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"CXLSIM\0\x01");
/// Layout version of [`CxlConfig`].
pub const VERSION: u64 = 2;
/// Fixed-point shift of bucket times (`ns << TIME_SHIFT`).
pub const TIME_SHIFT: u32 = 16;
/// Fixed-point one for ratios.
pub const ONE: u64 = 1024;
/// Highest link utilisation the queueing term uses (0.95 × [`ONE`]): Δq stays finite.
pub const RHO_MAX: u64 = 972;
/// Bandwidth windows are `1 << WINDOW_SHIFT` ns (65.5 µs).
pub const WINDOW_SHIFT: u32 = 16;
/// Ranges [`CxlConfig`] holds.
pub const MAX_RANGES: usize = 64;
/// History slots (last address and stride per warp and site, by hash): a power of two.
pub const HIST_SLOTS: usize = 1 << 16;

/// Tags of the emulated GPU cache (`cxl_tags`): a direct-mapped array of 128-byte lines,
/// 2^19 of them (64 MiB of lines: an H100's L2 is 50 MB). [`CxlConfig::cache_lines`] uses a
/// power of two up to this.
pub const CACHE_SLOTS: usize = 1 << 19;
/// log2 of the emulated cache's line.
pub const LINE_SHIFT: u32 = 7;

/// The tier's state is split in this many stripes (`%smid % STRIPES`), each with 1/STRIPES
/// of the cap, so that no single word takes every warp's atomics: a kernel on fewer SMs
/// than stripes sees less than the whole cap.
pub const STRIPES: usize = 16;

/// Kernel slots of the `cxl_kernels` timing map (by `kernel_id % KERNEL_SLOTS`).
pub const KERNEL_SLOTS: usize = 256;
/// Per kernel slot, the `cxl_kernel_end` map holds this many latest-exit words (by
/// `%smid % END_STRIPES`), each in its own 128-byte [`CxlStamp`].
pub const END_STRIPES: usize = 32;

/// The delay probe reads the configuration through the SM's L1 cache, which the host's
/// uploads do not invalidate. With [`FLAG_REFRESH`], in the first 2^[`REFRESH_WINDOW_SHIFT`] ns of every
/// 2^`REFRESH_SHIFT` ns of `%globaltimer` (131 µs), an SM's first probed access stamps the
/// SM's slot and fences (`bpf_membar_gpu`, which drops the SM's L1), so a parameter change
/// reaches running kernels within the shim's upload poll plus one period. Outside the
/// window the check is a compare. The stamps are per SM (`%smid % REFRESH_SLOTS`, a
/// [`CxlStamp`] each, in `cxl_refresh`).
pub const REFRESH_SHIFT: u32 = 17;
/// log2 of the refresh window (2 µs): an SM with a tier access at least this often
/// refreshes every period; in the window each tier access costs a lookup (on the H200's
/// pointer chase, a window of 8 µs, one access in 16, cost 16–22 ns a step).
pub const REFRESH_WINDOW_SHIFT: u32 = 11;
/// SM slots of `cxl_refresh`: a power of two above any GPU's SM count.
pub const REFRESH_SLOTS: usize = 256;

/// `place_kind`: the host probes place nothing (ranges come from the host, or `all`).
pub const PLACE_NONE: u64 = 0;
/// `place_kind`: allocations of at least `place_arg` bytes.
pub const PLACE_SIZE: u64 = 1;
/// `place_kind`: local capacity `place_arg` first (net of live local allocations).
pub const PLACE_LOCAL: u64 = 2;
/// `place_kind`: every allocation, page-interleaved as `place_interleave` says.
pub const PLACE_INTERLEAVE: u64 = 3;
/// `place_kind`: allocations made while the site function runs in the allocating thread
/// (the probe object's site programs, named by [`crate::probe::with_site`]).
pub const PLACE_SITE: u64 = 4;

/// `flags`: emulate (else the probe returns at once).
pub const FLAG_ENABLED: u64 = 1;
/// `flags`: every global access is to the tier (no range check).
pub const FLAG_EVERYTHING: u64 = 2;
/// `flags`: wait by spinning on `%globaltimer` (else `nanosleep` first).
pub const FLAG_SPIN: u64 = 4;
/// `flags`: compute and count, never wait (tests; the emulator's bookkeeping alone).
pub const FLAG_NO_WAIT: u64 = 8;
/// `flags`: keep the `cxl_stats` counters (an atomic per counter and request).
pub const FLAG_STATS: u64 = 16;
/// `flags`: refresh the configuration in running kernels (see [`REFRESH_SHIFT`]). The
/// check sits on the probe's path before the data wait, where it cost a pointer chase
/// 16–22 ns a step on an H200, so `cxl run` sets it only when `--at` changes parameters.
pub const FLAG_REFRESH: u64 = 32;
/// `flags`: the probe has work: [`FLAG_ENABLED`], and a delay, a cap, [`FLAG_STATS`] or
/// [`FLAG_REFRESH`]. Derived by [`CxlConfig::to_bytes`] from the other words (never set by
/// hand; [`CxlConfig::from_bytes`] drops it), so that the probe's first test at every
/// access reads one word, not five.
pub const FLAG_ACTIVE: u64 = 64;
/// `flags`: every load pays the same Δt and nothing else: the same latency in the three
/// classes, no emulated cache, no cap, no statistics. Then neither the cache nor the
/// pattern decides anything, and the probe waits out Δt (less [`CxlConfig::compensation`])
/// right after the data's arrival without looking either up (nor keeping the warp's history). Derived like
/// [`FLAG_ACTIVE`] (never set by hand; [`CxlConfig::from_bytes`] drops it).
pub const FLAG_FIXED: u64 = 128;

/// One address range of the tier. With `interleave_local + interleave_cxl > 0`, pages of
/// `1 << page_shift` bytes alternate: the first `interleave_local` of every group stay
/// local, the next `interleave_cxl` are the tier's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CxlRange {
    /// First address.
    pub base: u64,
    /// Bytes.
    pub len: u64,
    /// Local pages per group (0 with `interleave_cxl` 0: no interleave).
    pub interleave_local: u32,
    /// Tier pages per group.
    pub interleave_cxl: u32,
    /// log2 of the interleave page.
    pub page_shift: u32,
    /// Zero.
    pub pad: u32,
}

/// The probe's parameters.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CxlConfig {
    /// [`MAGIC`]: a probe that finds anything else does nothing.
    pub magic: u64,
    /// [`VERSION`].
    pub version: u64,
    /// `FLAG_*`.
    pub flags: u64,
    /// Δt by class, ns: sequential, strided, random.
    pub latency: [u64; 3],
    /// A byte's transfer time at the cap, ns << 16 (0: no cap).
    pub byte_cost: u64,
    /// The bucket's depth in the same units.
    pub burst: u64,
    /// Bytes the cap allows in one bandwidth window.
    pub window_cap_bytes: u64,
    /// Queueing coefficient × 1024.
    pub queue_k: u64,
    /// Strides up to this many bytes are sequential.
    pub seq_stride: u64,
    /// Lines of the emulated GPU cache in front of the tier (a power of two up to
    /// [`CACHE_SLOTS`]; 0: every access reaches the tier).
    pub cache_lines: u64,
    /// ns the probe takes off every wait: its own cost on a dependent load beyond the wait,
    /// as `cxl calibrate` measures it, so that a load costs local + Δt rather than local +
    /// Δt + the probe (a wait shorter than this is not waited). 0: none.
    pub compensation: u64,
    /// How the host probes on `cuMemAlloc_v2` place allocations: `PLACE_*`.
    pub place_kind: u64,
    /// Its parameter: the size threshold (`PLACE_SIZE`), the local capacity
    /// (`PLACE_LOCAL`).
    pub place_arg: u64,
    /// `PLACE_LOCAL`: bytes of live local allocations.
    pub place_used: u64,
    /// `PLACE_INTERLEAVE`: local pages, tier pages, log2 of the page (16 bits each).
    pub place_interleave: u64,
    /// Allocations that would have gone to the tier but found every range in use.
    pub place_dropped: u64,
    /// Ranges in use.
    pub nranges: u64,
    /// The ranges.
    pub ranges: [CxlRange; MAX_RANGES],
}

impl CxlConfig {
    /// Disabled, no ranges.
    pub fn new() -> Self {
        CxlConfig {
            magic: MAGIC,
            version: VERSION,
            flags: 0,
            latency: [0; 3],
            byte_cost: 0,
            burst: 0,
            window_cap_bytes: 0,
            queue_k: 0,
            seq_stride: 0,
            cache_lines: 0,
            compensation: 0,
            place_kind: PLACE_NONE,
            place_arg: 0,
            place_used: 0,
            place_interleave: 0,
            place_dropped: 0,
            nranges: 0,
            ranges: [CxlRange::default(); MAX_RANGES],
        }
    }

    /// The flags as the probe reads them: [`FLAG_ACTIVE`] and [`FLAG_FIXED`] derived.
    pub fn probe_flags(&self) -> u64 {
        let busy = self.latency.iter().any(|l| *l != 0) || self.byte_cost != 0;
        let active = self.flags & FLAG_ENABLED != 0
            && (busy || self.flags & (FLAG_STATS | FLAG_REFRESH) != 0);
        let fixed = active && self.fixed_latency();
        (self.flags & !(FLAG_ACTIVE | FLAG_FIXED))
            | if active { FLAG_ACTIVE } else { 0 }
            | if fixed { FLAG_FIXED } else { 0 }
    }

    /// Whether every load pays the same nonzero Δt and nothing else ([`FLAG_FIXED`]).
    pub fn fixed_latency(&self) -> bool {
        let [s, t, r] = self.latency;
        r != 0
            && s == r
            && t == r
            && self.cache_lines == 0
            && self.byte_cost == 0
            && self.flags & FLAG_STATS == 0
    }

    /// Its bytes, as the probe's global holds them (with [`FLAG_ACTIVE`] and
    /// [`FLAG_FIXED`] derived).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(std::mem::size_of::<Self>());
        for w in [
            self.magic,
            self.version,
            self.probe_flags(),
            self.latency[0],
            self.latency[1],
            self.latency[2],
            self.byte_cost,
            self.burst,
            self.window_cap_bytes,
            self.queue_k,
            self.seq_stride,
            self.cache_lines,
            self.compensation,
            self.place_kind,
            self.place_arg,
            self.place_used,
            self.place_interleave,
            self.place_dropped,
            self.nranges,
        ] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        for r in &self.ranges {
            v.extend_from_slice(&r.base.to_le_bytes());
            v.extend_from_slice(&r.len.to_le_bytes());
            v.extend_from_slice(&r.interleave_local.to_le_bytes());
            v.extend_from_slice(&r.interleave_cxl.to_le_bytes());
            v.extend_from_slice(&r.page_shift.to_le_bytes());
            v.extend_from_slice(&r.pad.to_le_bytes());
        }
        debug_assert_eq!(v.len(), std::mem::size_of::<Self>());
        v
    }

    /// Whether `addr` is in the tier (the probe's range check).
    pub fn in_tier(&self, addr: u64) -> bool {
        if self.flags & FLAG_EVERYTHING != 0 {
            return true;
        }
        self.ranges[..(self.nranges as usize).min(MAX_RANGES)]
            .iter()
            .any(|r| r.contains(addr))
    }
}

impl Default for CxlConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl CxlRange {
    /// Whether `addr` falls in this range's tier pages.
    pub fn contains(&self, addr: u64) -> bool {
        let off = addr.wrapping_sub(self.base);
        if off >= self.len {
            return false;
        }
        let group = self.interleave_local as u64 + self.interleave_cxl as u64;
        group == 0 || (off >> self.page_shift) % group >= self.interleave_local as u64
    }
}

/// One stripe of the tier's state: the bucket's theoretical arrival time and the bandwidth
/// windows (the `cxl_state` array holds [`STRIPES`] of them).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CxlState {
    /// When the link finishes what it was given, ns since `t0`, << 16.
    pub tat: u64,
    /// The current window's number (`now >> WINDOW_SHIFT`).
    pub epoch: u64,
    /// Bytes per window, by the window number's parity.
    pub window: [u64; 2],
    /// Bytes of the window before the current one.
    pub last_window: u64,
    /// The first access's `%globaltimer` (the bucket counts from it: `%globaltimer` is
    /// nanoseconds since 1970, too large to shift).
    pub t0: u64,
    /// The queueing term's factor for the current window, k · ρ / (1 − ρ) × [`ONE`] with ρ
    /// from `last_window`: computed once a window by the access that starts it, so that
    /// other accesses only multiply (three 64-bit divisions cost a lone thread ~345–370 ns
    /// an access on an H200, run 39 of `bench/results/cxl_gpu.md`).
    pub queue_factor: u64,
    /// Zero.
    pub pad: u64,
}

/// One kernel's time, as the entry/exit probes keep it (`cxl_kernels`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CxlKernel {
    /// FNV-1a 64 of the mangled name (`ProbeCtx::kernel_id`).
    pub kernel_id: u64,
    /// Launches seen.
    pub launches: u64,
    /// Sum of the finished launches' end − start, ns.
    pub total_ns: u64,
    /// The current launch's start (`%globaltimer` of block 0's entry).
    pub start: u64,
}

/// A `%globaltimer` stamp of one SM stripe, in a cache line of its own: the latest exit of
/// a block's thread 0 in the current launch (`cxl_kernel_end`), or the SM's last
/// configuration refresh (`cxl_refresh`, see [`REFRESH_SHIFT`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CxlStamp {
    /// `%globaltimer`, ns.
    pub t: u64,
    /// `cxl_kernel_end`: the correlation id of the launch whose exits the stripe takes, set
    /// when its block 0 enters (0 where launches are not numbered); unused in `cxl_refresh`.
    pub corr: u64,
    /// Zero: a cache line each.
    pub pad: [u64; 14],
}

impl CxlKernel {
    /// From the map value's bytes.
    pub fn from_bytes(b: &[u8]) -> Option<CxlKernel> {
        let w = |i: usize| {
            Some(u64::from_le_bytes(
                b.get(8 * i..8 * i + 8)?.try_into().ok()?,
            ))
        };
        Some(CxlKernel {
            kernel_id: w(0)?,
            launches: w(1)?,
            total_ns: w(2)?,
            start: w(3)?,
        })
    }

    /// Total kernel time, the last launch (ending at `end`, the latest of its stripes)
    /// included.
    pub fn time_ns(&self, end: u64) -> u64 {
        self.total_ns
            + if self.start == 0 {
                0
            } else {
                end.saturating_sub(self.start)
            }
    }
}

/// Statistics, one `u64` counter each in the `cxl_stats` array (by these indices).
/// Requests that reached the tier are `sequential + strided + random`.
pub const STATS: [&str; 7] = [
    "bytes",
    "delay_ns",
    "waited_ns",
    "sequential",
    "strided",
    "random",
    "cached",
];

const _: () = assert!(std::mem::size_of::<CxlRange>() == 32);
const _: () = assert!(std::mem::size_of::<CxlConfig>() == 152 + 32 * MAX_RANGES);
const _: () = assert!(std::mem::offset_of!(CxlConfig, ranges) == 152);
const _: () = assert!(std::mem::offset_of!(CxlConfig, nranges) == 144);
const _: () = assert!(std::mem::offset_of!(CxlConfig, compensation) == 96);
const _: () = assert!(CACHE_SLOTS.is_power_of_two());
const _: () = assert!(std::mem::size_of::<CxlState>() == 64);
const _: () = assert!(std::mem::size_of::<CxlKernel>() == 32);
const _: () = assert!(std::mem::size_of::<CxlStamp>() == 128);
const _: () = assert!(HIST_SLOTS.is_power_of_two());
const _: () = assert!(STRIPES.is_power_of_two());
const _: () = assert!(REFRESH_SLOTS.is_power_of_two());
const _: () = assert!(REFRESH_WINDOW_SHIFT < REFRESH_SHIFT);

/// The C declarations of this module, for `bpf/cxl_abi.h`.
pub fn c_header() -> String {
    let mut s = String::from(
        "/* Generated from cxl-sim/src/abi.rs by c_header(); do not edit.\n * BPFTIME_BLESS=1 cargo test -p cxl-sim abi rewrites it. */\n#pragma once\n\n",
    );
    s += &format!("#define CXL_MAGIC 0x{MAGIC:016x}ULL\n#define CXL_VERSION {VERSION}\n");
    s += &format!(
        "#define CXL_MAX_RANGES {MAX_RANGES}\n#define CXL_HIST_SLOTS {HIST_SLOTS}\n#define CXL_KERNEL_SLOTS {KERNEL_SLOTS}\n#define CXL_END_STRIPES {END_STRIPES}\n#define CXL_STRIPES {STRIPES}\n#define CXL_CACHE_SLOTS {CACHE_SLOTS}\n#define CXL_LINE_SHIFT {LINE_SHIFT}\n#define CXL_REFRESH_SHIFT {REFRESH_SHIFT}\n#define CXL_REFRESH_WINDOW_SHIFT {REFRESH_WINDOW_SHIFT}\n#define CXL_REFRESH_SLOTS {REFRESH_SLOTS}\n"
    );
    s += &format!(
        "#define CXL_FLAG_ENABLED {FLAG_ENABLED}\n#define CXL_FLAG_EVERYTHING {FLAG_EVERYTHING}\n#define CXL_FLAG_SPIN {FLAG_SPIN}\n#define CXL_FLAG_NO_WAIT {FLAG_NO_WAIT}\n#define CXL_FLAG_STATS {FLAG_STATS}\n#define CXL_FLAG_REFRESH {FLAG_REFRESH}\n#define CXL_FLAG_ACTIVE {FLAG_ACTIVE}\n#define CXL_FLAG_FIXED {FLAG_FIXED}\n"
    );
    s += &format!(
        "#define CXL_PLACE_NONE {PLACE_NONE}\n#define CXL_PLACE_SIZE {PLACE_SIZE}\n#define CXL_PLACE_LOCAL {PLACE_LOCAL}\n#define CXL_PLACE_INTERLEAVE {PLACE_INTERLEAVE}\n#define CXL_PLACE_SITE {PLACE_SITE}\n"
    );
    s += &format!(
        "#define CXL_TIME_SHIFT {TIME_SHIFT}\n#define CXL_ONE {ONE}\n#define CXL_RHO_MAX {RHO_MAX}\n#define CXL_WINDOW_SHIFT {WINDOW_SHIFT}\n\n"
    );
    s += "struct cxl_range {\n\t__u64 base;\n\t__u64 len;\n\t__u32 interleave_local;\n\t__u32 interleave_cxl;\n\t__u32 page_shift;\n\t__u32 pad;\n};\n\n";
    s += "struct cxl_config {\n\t__u64 magic;\n\t__u64 version;\n\t__u64 flags;\n\t__u64 latency[3];\n\t__u64 byte_cost;\n\t__u64 burst;\n\t__u64 window_cap_bytes;\n\t__u64 queue_k;\n\t__u64 seq_stride;\n\t__u64 cache_lines;\n\t__u64 compensation;\n\t__u64 place_kind;\n\t__u64 place_arg;\n\t__u64 place_used;\n\t__u64 place_interleave;\n\t__u64 place_dropped;\n\t__u64 nranges;\n\tstruct cxl_range ranges[CXL_MAX_RANGES];\n};\n\n";
    s += "struct cxl_state {\n\t__u64 tat;\n\t__u64 epoch;\n\t__u64 window[2];\n\t__u64 last_window;\n\t__u64 t0;\n\t__u64 queue_factor;\n\t__u64 pad;\n};\n\n";
    s += "struct cxl_hist {\n\t__u64 last;\n\t__u64 stride;\n};\n\n";
    s += "struct cxl_kernel {\n\t__u64 kernel_id;\n\t__u64 launches;\n\t__u64 total_ns;\n\t__u64 start;\n};\n\n";
    s += "struct cxl_stamp {\n\t__u64 t;\n\t__u64 corr;\n\t__u64 pad[14];\n};\n\n";
    s += "enum cxl_stat {\n";
    for (i, n) in STATS.iter().enumerate() {
        s += &format!("\tCXL_STAT_{} = {i},\n", n.to_uppercase());
    }
    s += &format!("\tCXL_STATS = {},\n}};\n", STATS.len());
    s
}

impl CxlConfig {
    /// From the global's bytes (a map dump); `None` when they are not a configuration.
    pub fn from_bytes(b: &[u8]) -> Option<CxlConfig> {
        let w = |i: usize| {
            Some(u64::from_le_bytes(
                b.get(8 * i..8 * i + 8)?.try_into().ok()?,
            ))
        };
        let mut c = CxlConfig::new();
        if w(0)? != MAGIC || b.len() < std::mem::size_of::<CxlConfig>() {
            return None;
        }
        c.version = w(1)?;
        c.flags = w(2)? & !(FLAG_ACTIVE | FLAG_FIXED);
        c.latency = [w(3)?, w(4)?, w(5)?];
        c.byte_cost = w(6)?;
        c.burst = w(7)?;
        c.window_cap_bytes = w(8)?;
        c.queue_k = w(9)?;
        c.seq_stride = w(10)?;
        c.cache_lines = w(11)?;
        c.compensation = w(12)?;
        c.place_kind = w(13)?;
        c.place_arg = w(14)?;
        c.place_used = w(15)?;
        c.place_interleave = w(16)?;
        c.place_dropped = w(17)?;
        c.nranges = w(18)?;
        for (i, r) in c.ranges.iter_mut().enumerate() {
            let o = std::mem::offset_of!(CxlConfig, ranges) + 32 * i;
            let h = |k: usize| u32::from_le_bytes(b[o + k..o + k + 4].try_into().expect("4 bytes"));
            r.base = u64::from_le_bytes(b[o..o + 8].try_into().ok()?);
            r.len = u64::from_le_bytes(b[o + 8..o + 16].try_into().ok()?);
            r.interleave_local = h(16);
            r.interleave_cxl = h(20);
            r.page_shift = h(24);
        }
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/bpf/cxl_abi.h");
        let want = c_header();
        if std::env::var_os("BPFTIME_BLESS").is_some() {
            std::fs::write(path, &want).unwrap();
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert_eq!(
            have, want,
            "{path} is stale: BPFTIME_BLESS=1 cargo test -p cxl-sim abi"
        );
    }

    #[test]
    fn bytes_follow_the_layout() {
        let mut c = CxlConfig::new();
        c.nranges = 1;
        c.ranges[0] = CxlRange {
            base: 0x1000,
            len: 0x2000,
            interleave_local: 1,
            interleave_cxl: 3,
            page_shift: 12,
            pad: 0,
        };
        c.compensation = 97;
        let b = c.to_bytes();
        assert_eq!(&b[..8], &MAGIC.to_le_bytes());
        assert_eq!(&b[96..104], &97u64.to_le_bytes());
        assert_eq!(&b[144..152], &1u64.to_le_bytes());
        assert_eq!(&b[152..160], &0x1000u64.to_le_bytes());
        assert_eq!(&b[168..172], &1u32.to_le_bytes());
        assert_eq!(&b[176..180], &12u32.to_le_bytes());
    }

    #[test]
    fn bytes_round_trip() {
        let mut c = CxlConfig::new();
        c.flags = FLAG_ENABLED | FLAG_STATS;
        c.latency = [85, 128, 170];
        c.byte_cost = 40330;
        c.burst = 4096 * 40330;
        c.window_cap_bytes = 106496;
        c.queue_k = 1024;
        c.seq_stride = 256;
        c.cache_lines = 1 << 19;
        c.compensation = 97;
        c.place_kind = PLACE_LOCAL;
        c.place_arg = 4 << 30;
        c.place_used = 12345;
        c.nranges = 2;
        c.ranges[1] = CxlRange {
            base: 0x7f00_0000_0000,
            len: 1 << 30,
            interleave_local: 1,
            interleave_cxl: 3,
            page_shift: 12,
            pad: 0,
        };
        assert_eq!(CxlConfig::from_bytes(&c.to_bytes()), Some(c));
        // FLAG_ACTIVE is derived on the way out and dropped on the way in.
        let active = |c: &CxlConfig| {
            let b = c.to_bytes();
            u64::from_le_bytes(b[16..24].try_into().unwrap()) & FLAG_ACTIVE != 0
        };
        let mut q = CxlConfig::new();
        assert!(!active(&q), "disabled");
        q.flags = FLAG_ENABLED;
        assert!(!active(&q), "enabled, nothing to do");
        for (what, set) in [
            (
                "a latency",
                (|q: &mut CxlConfig| q.latency[2] = 1) as fn(&mut CxlConfig),
            ),
            ("a cap", |q| q.byte_cost = 1),
            ("statistics", |q| q.flags |= FLAG_STATS),
            ("the refresh", |q| q.flags |= FLAG_REFRESH),
        ] {
            let mut a = q;
            set(&mut a);
            assert!(active(&a), "{what}");
            a.flags &= !FLAG_ENABLED;
            assert!(!active(&a), "{what}, disabled");
        }
        q.flags |= FLAG_ACTIVE; // set by hand: ignored
        assert!(!active(&q));
        let mut a = q;
        a.latency[0] = 5;
        assert_eq!(
            CxlConfig::from_bytes(&a.to_bytes()).unwrap().flags,
            FLAG_ENABLED
        );
        assert_eq!(CxlConfig::from_bytes(&[0u8; 64]), None);
    }

    #[test]
    fn interleave() {
        let r = CxlRange {
            base: 1 << 20,
            len: 8 << 12,
            interleave_local: 1,
            interleave_cxl: 3,
            page_shift: 12,
            pad: 0,
        };
        let tiers: Vec<bool> = (0..8)
            .map(|p| r.contains((1 << 20) + (p << 12) + 5))
            .collect();
        assert_eq!(tiers, [false, true, true, true, false, true, true, true]);
        assert!(!r.contains((1 << 20) - 1));
        assert!(!r.contains((1 << 20) + (8 << 12)));
    }
}
