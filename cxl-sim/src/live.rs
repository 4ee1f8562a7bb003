//! Changing the tier's parameters while the application runs.
//!
//! `trace` keeps the probe's `cxl_config` in its session region (`/dev/shm/bpftime-trace-PID`);
//! the GPU probe only reads it, so the shim polls the region's copy every 200 µs and uploads
//! what changed to the GPU's copy (`attach::shim::devmaps::sync_inbound`). [`set_params`]
//! writes the parameter words there, leaving the ranges and the placement state the
//! allocator's host probes keep.
//!
//! ```text
//! cxl run --at 2s:latency-ns=800 ──(at 2 s)──▶ region: cxl_config words 2..13 ──(≤ 200 µs)──▶ GPU copy ──▶ kernels
//! ```

use crate::abi::CxlConfig;
use std::sync::atomic::{AtomicU64, Ordering};

/// The directory name of the configuration in a session region.
pub const CONFIG_MAP: &str = "cxl:.data.cxl_config";
/// The parameter words of [`CxlConfig`] (`flags` through `compensation`): what a change
/// rewrites.
pub const PARAM_WORDS: std::ops::Range<usize> = 2..13;

/// A live change that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The session region is not there (the application ended, or never started).
    #[error("session region {0}: {1}")]
    Region(String, String),
    /// The region has no configuration, or one of another shape.
    #[error("session region {0} has no {CONFIG_MAP} of {1} bytes (is cxl.bpf.o loaded?)")]
    NoConfig(String, usize),
}

/// Writes `config`'s parameter words into the running session of `trace` process `pid`.
/// Returns the `CLOCK_REALTIME` nanoseconds at which the write completed.
pub fn set_params(pid: u32, config: &CxlConfig) -> Result<u64, LiveError> {
    let name = format!("bpftime-trace-{pid}");
    let region = shm_maps::ShmRegion::open(&name)
        .map_err(|e| LiveError::Region(name.clone(), e.to_string()))?;
    let size = std::mem::size_of::<CxlConfig>();
    let e = region
        .find_map(CONFIG_MAP)
        .filter(|e| e.value_size as usize == size && e.max_entries == 1)
        .ok_or_else(|| LiveError::NoConfig(name.clone(), size))?;
    let def = ebpf::MapDef {
        name: ".data.cxl_config".into(),
        kind: ebpf::MapKind::Array,
        key_size: e.key_size,
        value_size: e.value_size,
        max_entries: 1,
        flags: e.flags,
        origin: ebpf::MapOrigin::Manual,
        init: None,
    };
    let region = std::sync::Arc::new(region);
    let map = shm_maps::maps::open_in(&region, e.data_off, &def, e.threads)
        .map_err(|err| LiveError::Region(name.clone(), err.to_string()))?;
    let value = map
        .lookup(&0u32.to_le_bytes(), 0)
        .ok_or_else(|| LiveError::NoConfig(name.clone(), size))?;
    let bytes = config.to_bytes();
    for w in PARAM_WORDS {
        let v = u64::from_le_bytes(bytes[8 * w..8 * w + 8].try_into().expect("8 bytes"));
        // SAFETY: `value` points at the map's `size`-byte value in the mapped region,
        // 8-byte aligned (array values are), and `w < PARAM_WORDS.end` words lie inside it; the region
        // stays mapped while `region` lives. Other writers (the host probes) only touch
        // the words after these, so word stores suffice.
        unsafe {
            let p = value.as_ptr().add(8 * w).cast::<AtomicU64>();
            (*p).store(v, Ordering::Release);
        }
    }
    Ok(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0))
}

/// One scheduled change of `cxl run --at WHEN:NAME=VALUE[,NAME=VALUE…]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// When, after the application started.
    pub after: std::time::Duration,
    /// `(flag name without --, value)`: `latency-ns`, `bandwidth-gbps` (`none` for no cap),
    /// `seq-ratio`, `strided-fraction`, `queue-k`.
    pub set: Vec<(String, String)>,
}

impl std::str::FromStr for Change {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "--at `{s}`: expected WHEN:NAME=VALUE[,NAME=VALUE…], e.g. 2s:latency-ns=800 (names: latency-ns, bandwidth-gbps, seq-ratio, strided-fraction, queue-k)"
            )
        };
        let (when, rest) = s.split_once(':').ok_or_else(bad)?;
        let after = duration(when).ok_or_else(bad)?;
        let mut set = Vec::new();
        for kv in rest.split(',') {
            let (k, v) = kv.split_once('=').ok_or_else(bad)?;
            if !matches!(
                k,
                "latency-ns" | "bandwidth-gbps" | "seq-ratio" | "strided-fraction" | "queue-k"
            ) {
                return Err(bad());
            }
            set.push((k.to_string(), v.to_string()));
        }
        Ok(Change { after, set })
    }
}

/// `2s`, `1500ms`, `250us`.
fn duration(s: &str) -> Option<std::time::Duration> {
    let i = s.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let n: f64 = s[..i].parse().ok()?;
    let secs = match &s[i..] {
        "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        _ => return None,
    };
    (secs.is_finite() && secs >= 0.0).then(|| std::time::Duration::from_secs_f64(secs))
}

impl Change {
    /// `p` with this change applied (validated).
    pub fn apply(&self, p: &crate::Params) -> Result<crate::Params, String> {
        let mut p = p.clone();
        for (k, v) in &self.set {
            let num = || {
                v.parse::<f64>()
                    .map_err(|_| format!("--at {k}={v}: not a number"))
            };
            match k.as_str() {
                "latency-ns" => p.latency_ns = num()?,
                "bandwidth-gbps" if v == "none" => p.bandwidth_gbps = None,
                "bandwidth-gbps" => p.bandwidth_gbps = Some(num()?),
                "seq-ratio" => p.seq_ratio = num()?,
                "strided-fraction" => p.strided_fraction = num()?,
                "queue-k" => p.queue_k = num()?,
                _ => return Err(format!("--at: unknown parameter {k}")),
            }
        }
        p.validate().map_err(|e| format!("--at: {e}"))?;
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_parse_and_apply() {
        let c: Change = "1500ms:latency-ns=800,bandwidth-gbps=none".parse().unwrap();
        assert_eq!(c.after, std::time::Duration::from_millis(1500));
        let p = crate::Params {
            bandwidth_gbps: Some(16.0),
            ..Default::default()
        };
        let q = c.apply(&p).unwrap();
        assert_eq!((q.latency_ns, q.bandwidth_gbps), (800.0, None));
        for bad in ["2s", "2s:latency=1", "x:latency-ns=1", "2s:latency-ns"] {
            assert!(bad.parse::<Change>().unwrap_err().contains(bad));
        }
        let c: Change = "1s:latency-ns=2e9".parse().unwrap();
        assert!(
            c.apply(&p)
                .unwrap_err()
                .contains("latency 2000000000 ns is out of range")
        );
    }

    #[test]
    fn the_parameter_words_are_flags_to_compensation() {
        use std::mem::offset_of;
        assert_eq!(offset_of!(CxlConfig, flags), 8 * PARAM_WORDS.start);
        assert_eq!(offset_of!(CxlConfig, place_kind), 8 * PARAM_WORDS.end);
    }
}
