//! From the CUDA shim's API log (`bpftime-super trace --api-log`, [`attach::apilog`]) to a
//! [`Trace`]: every host↔device copy and every prefetch becomes an access, and copies are
//! grouped into objects by host address range and size, so that the same weight or KV
//! block is the same object each time it moves.
//!
//! | API event | becomes |
//! |-----------|---------|
//! | copy host → device (`cuMemcpyHtoD*`, `cuMemcpy*` of host to device memory) | an `h2d` access of the object at (host address, bytes) |
//! | copy device → host | a `d2h` access of the object at (host address, bytes) |
//! | `cuMemPrefetchAsync` to a device / to the host | an `h2d` / `d2h` access of the managed range (device address, bytes) |
//! | a failed call, device-to-device and host-to-host copies | nothing (counted in [`Summary`]) |
//!
//! Object names come from `--names` (CSV `host_addr,bytes,name`, as a framework hook can
//! write them: PyTorch's `tensor.data_ptr()`, `nbytes` and the parameter's name), else
//! `h2d@0x…+N`. Durations are kept for synchronous copies only: an asynchronous copy's
//! call returns when it is queued, not when it is done.
//!
//! Not seen: demand paging of managed memory (the page faults never reach the API),
//! copies made by kernels through host-mapped or registered memory, and copies inside
//! libraries that reach the GPU without the driver API (none of cuBLAS or NCCL's own
//! copies are hidden, as they use the driver too).

use crate::trace::{Access, Direction, Trace, TraceBuilder, TraceError};
use attach::apilog::{ApiEvent, FLAG_ASYNC, Kind};
use std::collections::HashMap;

/// What an API log held, beside the accesses.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    /// Events read.
    pub events: u64,
    /// Host → device copies and their bytes.
    pub h2d_copies: u64,
    /// Bytes of those copies.
    pub h2d_bytes: u64,
    /// Device → host copies.
    pub d2h_copies: u64,
    /// Bytes of those copies.
    pub d2h_bytes: u64,
    /// Device → device copies (not accesses).
    pub d2d_copies: u64,
    /// Prefetches of managed memory.
    pub prefetches: u64,
    /// Kernel launches.
    pub launches: u64,
    /// Device allocations and their bytes.
    pub allocs: u64,
    /// Bytes of those allocations.
    pub alloc_bytes: u64,
    /// Calls that returned an error (left out of the trace).
    pub failed: u64,
    /// Objects in the trace.
    pub objects: u64,
    /// Calls by driver entry point (which ones the program really used).
    pub calls: std::collections::BTreeMap<String, u64>,
}

/// Host address, bytes → a name.
pub type Names = HashMap<(u64, u64), String>;

/// Reads `host_addr,bytes,name` lines (a header line and `#` comments are skipped;
/// addresses in decimal or `0x` hex).
pub fn read_names(text: &str) -> Result<Names, String> {
    let mut out = Names::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') || (i == 0 && l.starts_with("host_addr")) {
            continue;
        }
        let mut f = l.splitn(3, ',');
        let (Some(a), Some(b), Some(n)) = (f.next(), f.next(), f.next()) else {
            return Err(format!("line {}: expected host_addr,bytes,name", i + 1));
        };
        let num = |s: &str| {
            let s = s.trim();
            match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        };
        let (Some(a), Some(b)) = (num(a), num(b)) else {
            return Err(format!("line {}: `{l}`: bad address or size", i + 1));
        };
        out.insert((a, b), n.trim().to_string());
    }
    Ok(out)
}

/// The trace of `events` (in log order), and what else the log held.
pub fn trace_of(events: &[ApiEvent], names: &Names) -> Result<(Trace, Summary), TraceError> {
    let mut b = TraceBuilder::default();
    let mut ids: HashMap<(u64, u64), u32> = HashMap::new();
    let mut s = Summary {
        events: events.len() as u64,
        ..Summary::default()
    };
    let mut events: Vec<&ApiEvent> = events.iter().collect();
    // Log order is return order: sort by start time (stable for equal times).
    events.sort_by_key(|e| e.start_ns);
    for e in events {
        *s.calls
            .entry(attach::shim::api::call_name(e.call).to_string())
            .or_default() += 1;
        if e.result != 0 {
            s.failed += 1;
            continue;
        }
        let (key, dir) = match e.kind {
            Kind::HtoD => {
                s.h2d_copies += 1;
                s.h2d_bytes += e.bytes;
                ((e.src, e.bytes), Direction::HostToDevice)
            }
            Kind::DtoH => {
                s.d2h_copies += 1;
                s.d2h_bytes += e.bytes;
                ((e.dst, e.bytes), Direction::DeviceToHost)
            }
            Kind::Prefetch => {
                s.prefetches += 1;
                let dir = if e.aux as i64 == -1 {
                    Direction::DeviceToHost
                } else {
                    Direction::HostToDevice
                };
                ((e.dst, e.bytes), dir)
            }
            Kind::DtoD => {
                s.d2d_copies += 1;
                continue;
            }
            Kind::Launch => {
                s.launches += 1;
                continue;
            }
            Kind::Alloc | Kind::Managed => {
                s.allocs += 1;
                s.alloc_bytes += e.bytes;
                continue;
            }
            _ => continue,
        };
        if e.bytes == 0 {
            continue;
        }
        let id = *ids.entry(key).or_insert_with(|| {
            let name = names
                .get(&key)
                .cloned()
                .unwrap_or_else(|| format!("h2d@{:#x}+{}", key.0, key.1));
            b.object(&name, key.1)
        });
        let mut a = Access::new(e.start_ns, id, e.bytes, dir).with_stream(e.stream as u32);
        if e.flags & FLAG_ASYNC == 0 {
            a = a.with_duration(e.dur_ns);
        }
        b.access(a);
    }
    let t = b.build()?;
    s.objects = t.objects.len() as u64;
    Ok((t, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(t: u64, kind: Kind, host: u64, dev: u64, bytes: u64, flags: u8) -> ApiEvent {
        let mut e = ApiEvent::new(0, kind);
        e.start_ns = t;
        e.dur_ns = 1000;
        e.bytes = bytes;
        e.flags = flags;
        match kind {
            Kind::HtoD => (e.dst, e.src) = (dev, host),
            _ => (e.dst, e.src) = (host, dev),
        }
        e
    }

    #[test]
    fn copies_of_one_host_range_are_one_object() {
        let mut failed = copy(5, Kind::HtoD, 0x3000, 0xd0, 64, 0);
        failed.result = 1;
        let mut launch = ApiEvent::new(0, Kind::Launch);
        launch.start_ns = 6;
        let ev = [
            copy(1, Kind::HtoD, 0x1000, 0xa0, 4096, 0),
            copy(2, Kind::HtoD, 0x2000, 0xb0, 8192, FLAG_ASYNC),
            copy(3, Kind::HtoD, 0x1000, 0xc0, 4096, 0), // same weight, new device buffer
            copy(4, Kind::DtoH, 0x2000, 0xb0, 8192, 0),
            failed,
            launch,
            copy(7, Kind::HtoD, 0x1000, 0xa0, 2048, 0), // same address, other size
        ];
        let names: Names = [((0x1000, 4096), "layers.0.mlp.up".to_string())].into();
        let (t, s) = trace_of(&ev, &names).unwrap();
        let objs: Vec<u32> = t.accesses.iter().map(|a| a.object).collect();
        assert_eq!(objs, [0, 1, 0, 1, 2]);
        assert_eq!(t.objects[0].name, "layers.0.mlp.up");
        assert_eq!(t.objects[1].name, "h2d@0x2000+8192");
        assert_eq!(t.accesses[3].dir, Direction::DeviceToHost);
        assert_eq!(
            (t.accesses[0].duration_ns, t.accesses[1].duration_ns),
            (1000, 0),
            "async copies carry no duration"
        );
        assert_eq!(
            (
                s.h2d_copies,
                s.h2d_bytes,
                s.d2h_copies,
                s.failed,
                s.launches,
                s.objects
            ),
            (4, 4096 * 2 + 8192 + 2048, 1, 1, 1, 3)
        );
        assert_eq!(s.calls.values().sum::<u64>(), 7);
    }

    #[test]
    fn names_files_parse_and_complain_by_line() {
        let n = read_names("host_addr,bytes,name\n0x10,4,a.b\n# c\n32,8,c,d\n").unwrap();
        assert_eq!(n[&(16, 4)], "a.b");
        assert_eq!(n[&(32, 8)], "c,d");
        assert!(read_names("0x10,4\n").unwrap_err().contains("line 1"));
        assert!(read_names("x,4,n\n").unwrap_err().contains("line 1"));
    }
}
