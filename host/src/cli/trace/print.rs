//! Printing maps the way bpftrace does.
//!
//! | map | printed as |
//! |-----|------------|
//! | array named `*_hist` | log2 histogram: slot k counts values in `[2^k, 2^(k+1))`, slot 0 counts 0 and 1 |
//! | array named `*_lhist` or `*_lhist_<step>` | linear histogram, slot k = `[k·step, (k+1)·step)` |
//! | one-entry array | `@name: value` |
//! | other arrays and hashes | `@name[key]: value`, one line per non-zero entry, sorted by value |
//! | ring buffer | each record drained since the last print, as hex |
//! | array or hash whose name contains `site` | one line per memory site, sorted by source location: `@name[file:line kernel opcode]: value` |
//!
//! Keys: an 8-byte key of a map whose name contains `page` or `addr` prints in hex; an 8-byte key (or the first 8 bytes of a larger key) equal to a kernel's
//! `kernel_id` prints as the kernel's demangled name (without its parameter list), and one
//! equal to the address of a driver function a host probe ran on (`PT_REGS_IP(ctx)`) as
//! that function's name;
//! printable NUL-terminated bytes print as a string; other keys as their little-endian
//! u64 (or u32) words. Values: u64 words.

use std::collections::BTreeMap;
use std::fmt::Write;

/// Kernel ids to names (demangled, parameters dropped), from the shim's attach reports.
pub type KernelNames = BTreeMap<u64, String>;

/// Memory site ids to their sites, from the shim's reports.
pub type SiteNames = BTreeMap<u32, attach::instrument::MemSiteInfo>;

/// How a map is printed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Style {
    /// Log2 histogram.
    Log2,
    /// Linear histogram with this step.
    Linear(u64),
    /// One value.
    Scalar,
    /// One line per key.
    Table,
    /// Ring buffer records.
    Records,
    /// One line per memory site (4-byte keys are site ids).
    Sites,
}

/// The style for map `name` (its name in the object, without the `stem:` prefix).
pub fn style_of(name: &str, kind: ebpf::MapKind, max_entries: u32) -> Style {
    if kind == ebpf::MapKind::RingBuf {
        return Style::Records;
    }
    let is_array = matches!(kind, ebpf::MapKind::Array | ebpf::MapKind::PerThreadArray);
    if name.contains("site") && (is_array || kind == ebpf::MapKind::Hash) {
        return Style::Sites;
    }
    if is_array && name.ends_with("_hist") {
        return Style::Log2;
    }
    if is_array && let Some(pos) = name.rfind("_lhist") {
        let step = name[pos + "_lhist".len()..]
            .strip_prefix('_')
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        return Style::Linear(step.max(1));
    }
    if is_array && max_entries == 1 {
        return Style::Scalar;
    }
    Style::Table
}

/// Little-endian u64 words of `b` (a short tail zero-padded).
pub fn words(b: &[u8]) -> Vec<u64> {
    b.chunks(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect()
}

/// Per-thread values summed per key: each value is `value_size`-byte sets laid end to end
/// (one per thread); the result has one set per key, the u64 words added.
pub fn sum_value_sets(
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    value_size: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    entries
        .into_iter()
        .map(|(k, v)| {
            if value_size == 0 || v.len() <= value_size {
                return (k, v);
            }
            let n = value_size.div_ceil(8);
            let mut sum = vec![0u64; n];
            for set in v.chunks(value_size) {
                for (s, w) in sum.iter_mut().zip(words(set)) {
                    *s = s.wrapping_add(w);
                }
            }
            let mut out: Vec<u8> = sum.iter().flat_map(|w| w.to_le_bytes()).collect();
            out.truncate(value_size);
            (k, out)
        })
        .collect()
}

/// A key of map `name`, for humans: an 8-byte key of a map whose name contains `page` or
/// `addr` is an address, in hex; otherwise [`key_text`].
pub fn key_for(name: &str, k: &[u8], kernels: &KernelNames) -> String {
    if k.len() == 8 && (name.contains("page") || name.contains("addr")) {
        return format!("{:#x}", words(k)[0]);
    }
    key_text(k, kernels)
}

/// A key, for humans.
pub fn key_text(k: &[u8], kernels: &KernelNames) -> String {
    // A key of several named addresses (a stack from `bpf_get_stack`): every word by name
    // where one is known, trailing zero words (the unused depth) left out.
    if k.len() >= 16 && k.len().is_multiple_of(8) {
        let ws = words(k);
        if ws.iter().filter(|w| kernels.contains_key(w)).count() >= 2 {
            let end = ws.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
            return ws[..end]
                .iter()
                .map(|w| kernels.get(w).cloned().unwrap_or_else(|| format!("{w:#x}")))
                .collect::<Vec<_>>()
                .join(", ");
        }
    }
    if k.len() >= 8 {
        let first = words(&k[..8])[0];
        if let Some(name) = kernels.get(&first) {
            let rest = &k[8..];
            if rest.is_empty() {
                return name.clone();
            }
            let tail: Vec<String> = words(rest).iter().map(|w| w.to_string()).collect();
            return format!("{name}, {}", tail.join(", "));
        }
    }
    if let Some(s) = as_string(k) {
        return s;
    }
    match k.len() {
        1 => k[0].to_string(),
        2 => u16::from_le_bytes([k[0], k[1]]).to_string(),
        4 => u32::from_le_bytes([k[0], k[1], k[2], k[3]]).to_string(),
        _ => words(k)
            .iter()
            .map(|w| w.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn as_string(k: &[u8]) -> Option<String> {
    let end = k.iter().position(|&b| b == 0)?;
    if end == 0 || k[end..].iter().any(|&b| b != 0) {
        return None;
    }
    let s = std::str::from_utf8(&k[..end]).ok()?;
    (s.chars().all(|c| !c.is_control()) && s.len() >= 2).then(|| s.to_string())
}

fn value_text(v: &[u8]) -> String {
    match v.len() {
        4 => u32::from_le_bytes([v[0], v[1], v[2], v[3]]).to_string(),
        8 => words(v)[0].to_string(),
        _ => words(v)
            .iter()
            .map(|w| w.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn value_num(v: &[u8]) -> u64 {
    words(v).first().copied().unwrap_or(0)
}

/// bpftrace's bucket bounds: 0, 1, 2, …, 512, 1K, 2K, …
fn bound(v: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (1 << 60, "E"),
        (1 << 50, "P"),
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for (u, s) in UNITS {
        if v >= u && v.is_multiple_of(u) {
            return format!("{}{s}", v / u);
        }
    }
    v.to_string()
}

fn bar(count: u64, max: u64) -> String {
    let n = if max == 0 {
        0
    } else {
        (count as u128 * 52 / max as u128) as usize
    };
    format!("|{}{}|", "@".repeat(n), " ".repeat(52 - n))
}

/// A site id's label: `file:line kernel opcode #id` (`ptx:<line>` without line info; the id
/// tells apart several accesses of one line).
pub fn site_text(id: u32, sites: &SiteNames) -> String {
    match sites.get(&id) {
        Some(s) => {
            let k = attach::probes::demangle(&s.kernel);
            let k = k.split_once('(').map(|(b, _)| b).unwrap_or(&k).to_string();
            format!("{} {k} {} #{id}", s.location(), s.opcode)
        }
        None => format!("site {id}"),
    }
}

/// Prints a per-site map: non-zero entries whose keys are 4-byte site ids, sorted by
/// source file and line (then PTX line).
pub fn sites(name: &str, entries: &[(Vec<u8>, Vec<u8>)], sites: &SiteNames) -> String {
    /// File, source line, PTX line, id: the order rows print in.
    type Order = (String, u32, u32, u32);
    let mut rows: Vec<(Order, String, String)> = entries
        .iter()
        .filter(|(k, v)| k.len() == 4 && v.iter().any(|&b| b != 0))
        .map(|(k, v)| {
            let id = u32::from_le_bytes([k[0], k[1], k[2], k[3]]);
            let order = match sites.get(&id) {
                Some(s) => (
                    s.file.clone().unwrap_or_default(),
                    s.line.unwrap_or(0),
                    s.ptx_line,
                    id,
                ),
                None => (String::from("~"), 0, 0, id),
            };
            (order, site_text(id, sites), value_text(v))
        })
        .collect();
    rows.sort();
    let mut s = String::new();
    if rows.is_empty() {
        let _ = writeln!(s, "@{name}: (empty)");
    }
    for (_, k, v) in rows {
        let _ = writeln!(s, "@{name}[{k}]: {v}");
    }
    s
}

/// Prints one map. `entries` are `(key, value)` bytes (array keys are u32 indices).
pub fn map(
    name: &str,
    style: Style,
    entries: &[(Vec<u8>, Vec<u8>)],
    kernels: &KernelNames,
) -> String {
    let mut s = String::new();
    match style {
        Style::Sites => return sites(name, entries, &SiteNames::new()),
        Style::Log2 | Style::Linear(_) => {
            let mut slots: BTreeMap<u64, u64> = BTreeMap::new();
            for (k, v) in entries {
                let idx = words(k).first().copied().unwrap_or(0);
                *slots.entry(idx).or_default() += value_num(v);
            }
            let nonzero: Vec<(u64, u64)> = slots.into_iter().filter(|(_, c)| *c != 0).collect();
            let _ = writeln!(s, "@{name}:");
            let (Some(first), Some(last)) = (nonzero.first(), nonzero.last()) else {
                return s;
            };
            let max = nonzero.iter().map(|(_, c)| *c).max().unwrap_or(0);
            let counts: BTreeMap<u64, u64> = nonzero.iter().copied().collect();
            for slot in first.0..=last.0 {
                let c = counts.get(&slot).copied().unwrap_or(0);
                let label = match style {
                    Style::Log2 if slot == 0 => "[0, 2)".to_string(),
                    Style::Log2 => format!(
                        "[{}, {})",
                        bound(1u64 << slot.min(63)),
                        bound(1u64.checked_shl(slot as u32 + 1).unwrap_or(u64::MAX))
                    ),
                    Style::Linear(step) => format!(
                        "[{}, {})",
                        slot.saturating_mul(step),
                        (slot + 1).saturating_mul(step)
                    ),
                    _ => unreachable!("histogram styles only"),
                };
                let _ = writeln!(s, "{label:<20}{c:>8} {}", bar(c, max));
            }
        }
        Style::Scalar => {
            let v = entries
                .first()
                .map(|(_, v)| value_text(v))
                .unwrap_or_else(|| "0".into());
            let _ = writeln!(s, "@{name}: {v}");
        }
        Style::Table => {
            let mut rows: Vec<(String, String, u64)> = entries
                .iter()
                .filter(|(_, v)| v.iter().any(|&b| b != 0))
                .map(|(k, v)| {
                    // Keys follow the map's own name, not its object's (`obj:map`).
                    let own = name.rsplit(':').next().unwrap_or(name);
                    (key_for(own, k, kernels), value_text(v), value_num(v))
                })
                .collect();
            rows.sort_by(|a, b| a.2.cmp(&b.2).then_with(|| a.0.cmp(&b.0)));
            if rows.is_empty() {
                let _ = writeln!(s, "@{name}: (empty)");
            }
            for (k, v, _) in rows {
                let _ = writeln!(s, "@{name}[{k}]: {v}");
            }
        }
        Style::Records => {
            for (_, v) in entries {
                let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
                let _ = writeln!(s, "@{name}: {hex}");
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32k(i: u32) -> Vec<u8> {
        i.to_le_bytes().to_vec()
    }
    fn u64v(v: u64) -> Vec<u8> {
        v.to_le_bytes().to_vec()
    }

    #[test]
    fn styles_follow_names() {
        use ebpf::MapKind::*;
        assert_eq!(style_of("lat_hist", Array, 64), Style::Log2);
        assert_eq!(style_of("x_lhist_10", Array, 64), Style::Linear(10));
        assert_eq!(style_of("x_lhist", Array, 64), Style::Linear(1));
        assert_eq!(style_of("total", Array, 1), Style::Scalar);
        assert_eq!(style_of("lat_hist", Hash, 64), Style::Table);
        assert_eq!(style_of("events", RingBuf, 4096), Style::Records);
    }

    #[test]
    fn log2_histogram_like_bpftrace() {
        let e = vec![
            (u32k(0), u64v(3)),
            (u32k(1), u64v(0)),
            (u32k(2), u64v(6)),
            (u32k(10), u64v(1)),
        ];
        let out = map("h", Style::Log2, &e, &KernelNames::new());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "@h:");
        assert!(lines[1].starts_with("[0, 2)") && lines[1].contains("       3 |"));
        assert!(lines[2].starts_with("[2, 4)") && lines[2].contains("       0 |"));
        assert!(lines[3].starts_with("[4, 8)") && lines[3].contains(&"@".repeat(52)));
        assert!(lines.last().unwrap().starts_with("[1K, 2K)"));
        assert_eq!(lines.len(), 1 + 11); // slots 0..=10
    }

    #[test]
    fn tables_name_kernels_and_sort_by_value() {
        let mut k = KernelNames::new();
        k.insert(7, "vectorAdd".into());
        let e = vec![(u64v(7), u64v(30)), (u64v(9), u64v(2)), (u64v(11), u64v(0))];
        let out = map("launches", Style::Table, &e, &k);
        assert_eq!(out, "@launches[9]: 2\n@launches[vectorAdd]: 30\n");
        let mut sk = b"sgemm".to_vec();
        sk.resize(16, 0);
        assert_eq!(key_text(&sk, &k), "sgemm");
        let mut pair = u64v(7);
        pair.extend(u64v(5));
        assert_eq!(key_text(&pair, &k), "vectorAdd, 5");
    }

    #[test]
    fn site_tables_sort_by_source_line() {
        use attach::instrument::MemSiteInfo;
        use jit::passes::mem::{MemOp, MemSpace};
        let site = |id: u32, line: Option<u32>, ptx_line: u32, opcode: &str| MemSiteInfo {
            id,
            kernel: "_Z9vectorAddPKfS0_Pfi".into(),
            ptx_line,
            file: line.map(|_| "/src/vecadd.cu".to_string()),
            line,
            op: MemOp::Load,
            space: MemSpace::Global,
            size: 4,
            opcode: opcode.into(),
        };
        let mut names = SiteNames::new();
        names.insert(0, site(0, Some(17), 51, "ld.global.f32"));
        names.insert(1, site(1, Some(9), 40, "st.global.f32"));
        let e = vec![
            (u32k(0), u64v(5)),
            (u32k(1), u64v(7)),
            (u32k(2), u64v(0)),
            (u32k(3), u64v(1)),
        ];
        assert_eq!(
            sites("n_by_site", &e, &names),
            "@n_by_site[vecadd.cu:9 vectorAdd st.global.f32 #1]: 7\n@n_by_site[vecadd.cu:17 vectorAdd ld.global.f32 #0]: 5\n@n_by_site[site 3]: 1\n"
        );
        assert_eq!(
            style_of("n_by_site", ebpf::MapKind::Array, 4096),
            Style::Sites
        );
        names.insert(4, site(4, None, 60, "ld.global.u8"));
        assert_eq!(site_text(4, &names), "ptx:60 vectorAdd ld.global.u8 #4");
        assert_eq!(
            key_for("bytes_by_page", &u64v(65536), &KernelNames::new()),
            "0x10000"
        );
    }

    #[test]
    fn per_thread_value_sets_are_summed() {
        let mut v = Vec::new();
        for t in 0..5u64 {
            v.extend(t.to_le_bytes());
        }
        let e = sum_value_sets(vec![(u32k(0), v)], 8);
        assert_eq!(e, vec![(u32k(0), u64v(10))]);
    }

    #[test]
    fn scalar_and_linear() {
        assert_eq!(
            map(
                "n",
                Style::Scalar,
                &[(u32k(0), u64v(42))],
                &KernelNames::new()
            ),
            "@n: 42\n"
        );
        let out = map(
            "l",
            Style::Linear(10),
            &[(u32k(1), u64v(1)), (u32k(2), u64v(2))],
            &KernelNames::new(),
        );
        assert!(
            out.contains("[10, 20)") && out.contains("[20, 30)"),
            "{out}"
        );
    }
}
