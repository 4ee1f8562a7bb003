//! Which allocations the emulated tier holds.
//!
//! A [`Policy`] walks the application's device allocations in time order (with their
//! frees) and puts each in the local tier, in the CXL tier, or, for page interleave,
//! across both. The result is a [`Placement`]: a decision per allocation and the
//! [`CxlRange`]s the probe checks.
//!
//! | policy (`--placement`) | an allocation is the tier's when |
//! |---|---|
//! | `all` | always (the probe skips the range check) |
//! | `size>=N` (`size>=64MB`) | it is at least N bytes |
//! | `site=TEXT` | its call site (the first frame that names it) contains TEXT; on a running application (`cxl run`), TEXT is a function of the executable running in the allocating thread (`abi::PLACE_SITE`) |
//! | `local=N` (`local=4GB`) | the local tier's N bytes, net of live allocations, cannot hold it (Linux's local-first fallback) |
//! | `interleave=L:C[@PAGE]` | pages of PAGE (default 4KB) alternate, L local then C CXL (weighted interleave) |

use crate::abi::{CxlRange, MAX_RANGES};
use serde::Serialize;

/// One device allocation of the application.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Alloc {
    /// When it was made (any monotone clock).
    pub time_ns: u64,
    /// Device address.
    pub addr: u64,
    /// Bytes.
    pub bytes: u64,
    /// The call site, as a symbol or `file:line` (empty when unknown).
    pub site: String,
    /// When it was freed, if it was.
    pub freed_ns: Option<u64>,
}

/// A placement policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Every global access.
    All,
    /// Allocations of at least this many bytes.
    SizeAtLeast(u64),
    /// Allocations whose call site contains this text.
    Site(String),
    /// Local capacity first (net of live allocations), the rest in the tier.
    LocalFirst(u64),
    /// Page interleave: `local` pages, then `cxl` pages, of `1 << page_shift` bytes.
    Interleave {
        /// Local pages per group.
        local: u32,
        /// Tier pages per group.
        cxl: u32,
        /// log2 of the page.
        page_shift: u32,
    },
}

/// A policy that does not parse.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error(
    "placement `{0}`: expected all, size>=N, site=TEXT, local=N or interleave=L:C[@PAGE] (sizes like 64MB, 4KB; powers of 1024)"
)]
pub struct PolicyError(pub String);

/// Where one allocation went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// GPU memory.
    Local,
    /// The emulated tier.
    Cxl,
    /// Pages of both.
    Interleaved,
}

/// A policy's result.
#[derive(Clone, Debug, Serialize)]
pub struct Placement {
    /// The policy.
    pub policy: Policy,
    /// Per allocation, in the order given.
    pub tiers: Vec<Tier>,
    /// The ranges the probe checks (empty with [`Policy::All`]).
    pub ranges: Vec<CxlRange>,
    /// Allocations beyond [`MAX_RANGES`] that had to stay local (listed, never silent).
    pub overflow: Vec<usize>,
}

/// `64MB`, `4KB`, `1GB`, `4096` (bytes): powers of 1024.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let i = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let n: f64 = s[..i].parse().ok()?;
    let mult = match s[i..].to_ascii_uppercase().as_str() {
        "" | "B" => 1u64,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        _ => return None,
    };
    let v = n * mult as f64;
    (v.is_finite() && v >= 0.0 && v < u64::MAX as f64).then_some(v as u64)
}

impl std::str::FromStr for Policy {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || PolicyError(s.to_string());
        if s == "all" {
            return Ok(Policy::All);
        }
        if let Some(n) = s.strip_prefix("size>=") {
            return parse_size(n).map(Policy::SizeAtLeast).ok_or_else(bad);
        }
        if let Some(t) = s.strip_prefix("site=") {
            return (!t.is_empty())
                .then(|| Policy::Site(t.into()))
                .ok_or_else(bad);
        }
        if let Some(n) = s.strip_prefix("local=") {
            return parse_size(n).map(Policy::LocalFirst).ok_or_else(bad);
        }
        if let Some(spec) = s.strip_prefix("interleave=") {
            let (ratio, page) = spec.split_once('@').unwrap_or((spec, "4KB"));
            let (l, c) = ratio.split_once(':').ok_or_else(bad)?;
            let (local, cxl): (u32, u32) =
                (l.parse().map_err(|_| bad())?, c.parse().map_err(|_| bad())?);
            let page = parse_size(page).ok_or_else(bad)?;
            if cxl == 0 || !page.is_power_of_two() || page < 256 || local > 1024 || cxl > 1024 {
                return Err(bad());
            }
            return Ok(Policy::Interleave {
                local,
                cxl,
                page_shift: page.trailing_zeros(),
            });
        }
        Err(bad())
    }
}

impl Policy {
    /// Places `allocs` (any order; walked by time).
    pub fn place(&self, allocs: &[Alloc]) -> Placement {
        let mut tiers = vec![Tier::Local; allocs.len()];
        let mut order: Vec<usize> = (0..allocs.len()).collect();
        order.sort_by_key(|&i| (allocs[i].time_ns, i));
        match self {
            Policy::All => tiers.fill(Tier::Cxl),
            Policy::SizeAtLeast(n) => {
                for (t, a) in tiers.iter_mut().zip(allocs) {
                    if a.bytes >= *n {
                        *t = Tier::Cxl;
                    }
                }
            }
            Policy::Site(text) => {
                for (t, a) in tiers.iter_mut().zip(allocs) {
                    if a.site.contains(text.as_str()) {
                        *t = Tier::Cxl;
                    }
                }
            }
            Policy::LocalFirst(capacity) => {
                // Live local allocations: (freed at, bytes).
                let mut live: Vec<(u64, u64)> = Vec::new();
                for &i in &order {
                    let a = &allocs[i];
                    live.retain(|&(freed, _)| freed > a.time_ns);
                    let used: u64 = live.iter().map(|&(_, b)| b).sum();
                    if used + a.bytes <= *capacity {
                        live.push((a.freed_ns.unwrap_or(u64::MAX), a.bytes));
                    } else {
                        tiers[i] = Tier::Cxl;
                    }
                }
            }
            Policy::Interleave { .. } => tiers.fill(Tier::Interleaved),
        }
        let (il, ic, ps) = match self {
            Policy::Interleave {
                local,
                cxl,
                page_shift,
            } => (*local, *cxl, *page_shift),
            _ => (0, 0, 0),
        };
        let mut ranges = Vec::new();
        let mut overflow = Vec::new();
        if *self != Policy::All {
            for &i in &order {
                if tiers[i] == Tier::Local {
                    continue;
                }
                if ranges.len() == MAX_RANGES {
                    tiers[i] = Tier::Local;
                    overflow.push(i);
                    continue;
                }
                ranges.push(CxlRange {
                    base: allocs[i].addr,
                    len: allocs[i].bytes,
                    interleave_local: il,
                    interleave_cxl: ic,
                    page_shift: ps,
                    pad: 0,
                });
            }
        }
        Placement {
            policy: self.clone(),
            tiers,
            ranges,
            overflow,
        }
    }
}

impl Placement {
    /// Allocations (wholly or in part) in the tier.
    pub fn matched(&self) -> usize {
        self.tiers.iter().filter(|t| **t != Tier::Local).count()
    }

    /// Bytes in the tier (interleaved allocations by their share of pages).
    pub fn cxl_bytes(&self, allocs: &[Alloc]) -> u64 {
        let mut sum = 0;
        for (t, a) in self.tiers.iter().zip(allocs) {
            sum += match t {
                Tier::Local => 0,
                Tier::Cxl => a.bytes,
                Tier::Interleaved => {
                    let r = &self.ranges[self
                        .ranges
                        .iter()
                        .position(|r| r.base == a.addr)
                        .unwrap_or(0)];
                    let page = 1u64 << r.page_shift;
                    (0..a.bytes.div_ceil(page))
                        .filter(|p| r.contains(a.addr + p * page))
                        .map(|p| page.min(a.bytes - p * page))
                        .sum()
                }
            };
        }
        sum
    }

    /// The placement as a table: one line per allocation.
    pub fn table(&self, allocs: &[Alloc]) -> String {
        let mut s = format!("{:<18} {:>14} {:<12} site\n", "address", "bytes", "tier");
        for (t, a) in self.tiers.iter().zip(allocs) {
            s += &format!(
                "{:<#18x} {:>14} {:<12} {}\n",
                a.addr,
                a.bytes,
                match t {
                    Tier::Local => "local",
                    Tier::Cxl => "cxl",
                    Tier::Interleaved => "interleaved",
                },
                if a.site.is_empty() { "?" } else { &a.site }
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake allocator's trace: weights, activations freed and reallocated, a KV cache.
    fn trace() -> Vec<Alloc> {
        let a = |t, addr, mb: u64, site: &str, freed| Alloc {
            time_ns: t,
            addr,
            bytes: mb << 20,
            site: site.into(),
            freed_ns: freed,
        };
        vec![
            a(10, 0x7000_0000_0000, 512, "load_weights", None),
            a(20, 0x7000_2000_0000, 512, "load_weights", None),
            a(30, 0x7000_4000_0000, 64, "alloc_activations", Some(50)),
            a(40, 0x7000_5000_0000, 1024, "alloc_kv_cache", None),
            a(60, 0x7000_4000_0000, 64, "alloc_activations", None),
        ]
    }

    fn tiers(p: &str) -> Vec<Tier> {
        p.parse::<Policy>().unwrap().place(&trace()).tiers
    }

    use Tier::{Cxl as C, Local as L};

    #[test]
    fn policies_against_a_fake_allocator() {
        assert_eq!(tiers("all"), [C, C, C, C, C]);
        assert_eq!(tiers("size>=512MB"), [C, C, L, C, L]);
        assert_eq!(tiers("site=kv_cache"), [L, L, L, C, L]);
        // 1.1 GB local: both weights fit (1 GB), activations fit (1.0625 GB), the KV cache
        // does not; once the activations are freed at 50 the new ones fit again.
        assert_eq!(tiers("local=1100MB"), [L, L, L, C, L]);
        // 1 GB: the second weight fills it; activations go to CXL; after their free the
        // second allocation of activations still finds 1 GB used.
        assert_eq!(tiers("local=1GB"), [L, L, C, C, C]);
        assert_eq!(tiers("local=0"), [C, C, C, C, C]);
    }

    #[test]
    fn ranges_and_bytes() {
        let t = trace();
        let p: Policy = "size>=1GB".parse().unwrap();
        let pl = p.place(&t);
        assert_eq!(pl.ranges.len(), 1);
        assert_eq!(pl.ranges[0].base, 0x7000_5000_0000);
        assert_eq!(pl.cxl_bytes(&t), 1 << 30);
        let all = Policy::All.place(&t);
        assert!(all.ranges.is_empty(), "all: no range check");
        // 1:3 interleave of 4 KiB pages: three quarters of every allocation.
        let il: Policy = "interleave=1:3".parse().unwrap();
        let pl = il.place(&t);
        assert_eq!(pl.ranges.len(), 5);
        let total: u64 = t.iter().map(|a| a.bytes).sum();
        assert_eq!(pl.cxl_bytes(&t), total / 4 * 3);
        assert!(pl.table(&t).contains("interleaved"));
    }

    #[test]
    fn no_match_is_visible() {
        let p: Policy = "site=nothing_like_this".parse().unwrap();
        assert_eq!(p.place(&trace()).matched(), 0);
    }

    #[test]
    fn more_ranges_than_the_probe_holds_are_listed() {
        let many: Vec<Alloc> = (0..MAX_RANGES as u64 + 3)
            .map(|i| Alloc {
                time_ns: i,
                addr: i << 30,
                bytes: 4096,
                site: String::new(),
                freed_ns: None,
            })
            .collect();
        let pl = Policy::SizeAtLeast(1).place(&many);
        assert_eq!(pl.ranges.len(), MAX_RANGES);
        assert_eq!(pl.overflow.len(), 3);
    }

    #[test]
    fn bad_policies_are_refused() {
        for s in [
            "",
            "everything",
            "size>=",
            "size>=12XB",
            "site=",
            "interleave=1",
            "interleave=1:0",
            "interleave=1:2@3000",
        ] {
            let e = s.parse::<Policy>().unwrap_err();
            assert!(e.to_string().contains(&format!("`{s}`")), "{e}");
        }
        assert_eq!(parse_size("4KB"), Some(4096));
        assert_eq!(parse_size("1.5GB"), Some(3 << 29));
        assert_eq!(
            "interleave=2:1@2MB".parse::<Policy>().unwrap(),
            Policy::Interleave {
                local: 2,
                cxl: 1,
                page_shift: 21
            }
        );
    }
}
