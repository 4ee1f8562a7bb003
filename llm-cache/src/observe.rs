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
//! Object names come from `--names` ([`Names`]: CSV `host_addr,bytes,name`, as a framework
//! hook can write them: PyTorch's `tensor.data_ptr()`, `nbytes` and the parameter's name;
//! or with a `from_ns` column, for buffers that change hands, like an offloaded KV cache's),
//! else `h2d@0x…+N`. Durations are kept for synchronous copies only: an asynchronous copy's
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

/// Object names from a framework hook: host range (address, bytes) → name, for the whole
/// run or from a time on.
///
/// Two CSV forms, told apart by the header:
///
/// | header | a row names |
/// |--------|-------------|
/// | `host_addr,bytes,name` (or none) | every transfer of that range (a weight that stays put) |
/// | `host_addr,bytes,from_ns,name` | the transfers of that range from `from_ns` (`CLOCK_MONOTONIC`, the API log's clock) until the range's next timed row |
///
/// Timed rows are for tensors whose host buffer changes hands: an offloaded KV cache gets
/// a new pinned buffer at every offload, one token longer than the last, and the caching
/// host allocator hands a freed buffer to whichever layer asks next. The hook writes one
/// row per offload, taken just before it (so the device→host copy that fills the buffer is
/// already under the new name), and every row of one layer's keys has the same name, so
/// the trace sees one object, as large as it has grown, instead of a new object per step.
/// A timed row wins over an untimed row of the same range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    fixed: HashMap<(u64, u64), String>,
    /// Per range: (from_ns, name), sorted by time.
    timed: HashMap<(u64, u64), Vec<(u64, String)>>,
}

impl Names {
    /// No names.
    pub fn new() -> Names {
        Names::default()
    }

    /// Names every transfer of `(host_addr, bytes)`.
    pub fn insert(&mut self, range: (u64, u64), name: impl Into<String>) {
        self.fixed.insert(range, name.into());
    }

    /// Names the transfers of `(host_addr, bytes)` from `from_ns` until the range's next
    /// timed row.
    pub fn insert_from(&mut self, range: (u64, u64), from_ns: u64, name: impl Into<String>) {
        let v = self.timed.entry(range).or_default();
        let at = v.partition_point(|(t, _)| *t <= from_ns);
        v.insert(at, (from_ns, name.into()));
    }

    /// The name of a transfer of `range` that started at `time_ns`, if any.
    pub fn at(&self, range: (u64, u64), time_ns: u64) -> Option<&str> {
        let timed = self.timed.get(&range).and_then(|v| {
            let i = v.partition_point(|(t, _)| *t <= time_ns);
            i.checked_sub(1).map(|i| v[i].1.as_str())
        });
        timed.or_else(|| self.fixed.get(&range).map(String::as_str))
    }
}

/// Reads a names file (see [`Names`] for its two forms; `#` comments and blank lines are
/// skipped; numbers in decimal or `0x` hex; a name may hold commas).
pub fn read_names(text: &str) -> Result<Names, String> {
    let mut out = Names::new();
    let mut timed = false;
    let num = |s: &str| {
        let s = s.trim();
        match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => s.parse().ok(),
        }
    };
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if l.starts_with("host_addr") {
            match l.replace(' ', "").as_str() {
                "host_addr,bytes,name" => timed = false,
                "host_addr,bytes,from_ns,name" => timed = true,
                _ => {
                    return Err(format!(
                        "line {}: `{l}`: the header is host_addr,bytes,name or host_addr,bytes,from_ns,name",
                        i + 1
                    ));
                }
            }
            continue;
        }
        let want = if timed {
            "host_addr,bytes,from_ns,name"
        } else {
            "host_addr,bytes,name"
        };
        let mut f = l.splitn(if timed { 4 } else { 3 }, ',');
        let (Some(a), Some(b)) = (f.next(), f.next()) else {
            return Err(format!("line {}: expected {want}", i + 1));
        };
        let (Some(a), Some(b)) = (num(a), num(b)) else {
            return Err(format!("line {}: `{l}`: bad address or size", i + 1));
        };
        if timed {
            let (Some(t), Some(n)) = (f.next(), f.next()) else {
                return Err(format!("line {}: expected {want}", i + 1));
            };
            let Some(t) = num(t) else {
                return Err(format!("line {}: `{l}`: bad from_ns", i + 1));
            };
            out.insert_from((a, b), t, n.trim());
        } else {
            let Some(n) = f.next() else {
                return Err(format!("line {}: expected {want}", i + 1));
            };
            out.insert((a, b), n.trim());
        }
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
            .entry(attach::api::call_name(e.call).to_string())
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
        // Named transfers are one object per name (the builder merges equal names and keeps
        // the largest size); others one per range.
        let id = match names.at(key, e.start_ns) {
            Some(name) => b.object(name, key.1),
            None => *ids
                .entry(key)
                .or_insert_with(|| b.object(&format!("h2d@{:#x}+{}", key.0, key.1), key.1)),
        };
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
        let mut names = Names::new();
        names.insert((0x1000, 4096), "layers.0.mlp.up");
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

    /// An offloaded KV cache: at each step every layer's keys go to a new pinned buffer one
    /// token longer (device → host), and come back (host → device) at the next step; the
    /// allocator hands layer 0's old buffer to layer 1 and back. Keyed by range alone that
    /// is a new object at almost every step; the hook's timed rows make it one per layer.
    #[test]
    fn timed_names_follow_a_kv_block_across_buffers() {
        const TOKEN: u64 = 256;
        let mut ev = Vec::new();
        let mut names = Names::new();
        let buffers = [0x10_000u64, 0x20_000];
        let mut t = 1_000;
        for step in 0..4u64 {
            for layer in 0..2usize {
                let bytes = (100 + step) * TOKEN;
                if step > 0 {
                    // prefetch: the buffer the last step's offload filled
                    let prev = buffers[(layer + step as usize - 1) % 2];
                    ev.push(copy(t, Kind::HtoD, prev, 0xd0, bytes - TOKEN, FLAG_ASYNC));
                    t += 10;
                }
                // offload: the hook's row is taken just before the copy starts
                let host = buffers[(layer + step as usize) % 2];
                names.insert_from((host, bytes), t, format!("layers.{layer}.kv.keys"));
                t += 1;
                ev.push(copy(t, Kind::DtoH, host, 0xd0, bytes, FLAG_ASYNC));
                t += 10;
            }
        }
        let (plain, _) = trace_of(&ev, &Names::new()).unwrap();
        assert_eq!(
            plain.objects.len(),
            8,
            "by range: one object per step and layer"
        );
        let (t, s) = trace_of(&ev, &names).unwrap();
        let got: Vec<(&str, u64)> = t
            .objects
            .iter()
            .map(|o| (o.name.as_str(), o.bytes))
            .collect();
        assert_eq!(
            got,
            [
                ("layers.0.kv.keys", 103 * TOKEN),
                ("layers.1.kv.keys", 103 * TOKEN)
            ]
        );
        assert_eq!(s.objects, 2);
        // Every access is its layer's, in both directions.
        let layers: Vec<u32> = t.accesses.iter().map(|a| a.object).collect();
        assert_eq!(layers, [0, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1]);
    }

    #[test]
    fn names_files_parse_and_complain_by_line() {
        let n = read_names("host_addr,bytes,name\n0x10,4,a.b\n# c\n32,8,c,d\n").unwrap();
        assert_eq!(n.at((16, 4), 0), Some("a.b"));
        assert_eq!(n.at((32, 8), u64::MAX), Some("c,d"));
        assert_eq!(n.at((32, 9), 0), None);
        assert!(read_names("0x10,4\n").unwrap_err().contains("line 1"));
        assert!(read_names("x,4,n\n").unwrap_err().contains("line 1"));
        let t =
            read_names("host_addr,bytes,from_ns,name\n0x10,4,100,k,v\n0x10,4,50,early\n").unwrap();
        assert_eq!(t.at((16, 4), 49), None);
        assert_eq!(t.at((16, 4), 50), Some("early"));
        assert_eq!(
            t.at((16, 4), 100),
            Some("k,v"),
            "rows sort by time; names keep commas"
        );
        let e = read_names("host_addr,bytes,from_ns,name\n0x10,4,soon,n\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("from_ns"), "{e}");
        let e = read_names("host_addr,bytes,when,name\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("header"), "{e}");
        let e = read_names("host_addr,bytes,from_ns,name\n0x10,4,7\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
    }
}
