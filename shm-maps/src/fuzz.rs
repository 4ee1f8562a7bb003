//! The body of the `region` fuzz target (`fuzz/fuzz_targets/region.rs`), here so that the
//! stable test suite replays the kept corpus (`fuzz/replay/region/`) through the same code.
//!
//! A client trusts nothing in a region it opens: a corrupt or hostile region must give an
//! error, never a crash, a hang or an out-of-bounds access. The target builds a valid
//! region once (an array and a hash map in the directory, a job queued, a message, a
//! checkpoint), then, for each input, writes a copy of it to a new shared-memory object
//! with the input's patches applied and does what a client (and a recovering service)
//! does with it: open, read the queue, the client and completion tables, the messages,
//! every directory entry, attach to its map and walk it, and read the checkpoint.
//!
//! An input is a list of patches `[area u8][offset u16 le][n u8][n bytes]`. `area` picks
//! the region header, the map directory, the array's or the hash map's storage header
//! (the first 64 bytes: lock words and buckets are the maps' own protocol, where a
//! corrupt word held by a live pid is indistinguishable from a held lock), the checkpoint
//! area or the queue; the offset wraps around the area.

use crate::layout::{JobDesc, MapEntry};
use crate::region::{DirEntry, OnStale, RegionConfig, ShmRegion};
use ebpf::{MapDef, MapKind, MapOrigin};
use std::sync::{Arc, OnceLock};

/// The valid region every input patches: its bytes, and where each area starts.
struct Template {
    bytes: Vec<u8>,
    /// `(offset, length)` of each area, by area number.
    areas: Vec<(usize, usize)>,
}

fn def(name: &str, kind: MapKind, key: u32, value: u32, entries: u32) -> MapDef {
    MapDef {
        name: name.into(),
        kind,
        key_size: key,
        value_size: value,
        max_entries: entries,
        flags: 0,
        origin: MapOrigin::Manual,
        init: None,
    }
}

fn template() -> &'static Template {
    static T: OnceLock<Template> = OnceLock::new();
    T.get_or_init(|| {
        let name = format!("bpftime-fuzz-template-{}", std::process::id());
        let cfg = RegionConfig {
            queue_capacity: 8,
            max_clients: 2,
            completions_per_client: 4,
            message_slots: 4,
            max_maps: 4,
            max_records: 1024,
            arena_size: 64 << 10,
            checkpoint_size: 4096,
            queues: 1,
        };
        let r = Arc::new(
            ShmRegion::create(&name, &cfg, 0o600, OnStale::Replace).expect("template region"),
        );
        let _ = r.unlink();
        let defs = [
            def("counts", MapKind::Array, 4, 8, 4),
            def("seen", MapKind::Hash, 8, 16, 8),
        ];
        let mut off = 0;
        let mut areas = vec![
            (0, crate::layout::HEADER_SIZE),
            (r.header().maps_off as usize, 4 * size_of::<MapEntry>()),
        ];
        for d in &defs {
            let len = crate::maps::layout_size(d, 1).expect("layout");
            let m = crate::maps::create_in(&r, off, d, 1).expect("map");
            m.update(
                &[1, 0, 0, 0, 0, 0, 0, 0],
                &[7; 16][..d.value_size as usize],
                0,
                0,
            )
            .expect("update");
            r.register_map(&DirEntry {
                name: format!("prog:{}", d.name),
                kind: d.kind.id(),
                key_size: d.key_size,
                value_size: d.value_size,
                max_entries: d.max_entries,
                flags: 0,
                data_off: off,
                data_len: len,
                threads: 1,
            });
            areas.push((r.header().arena_off as usize + off as usize, 64));
            off += len.div_ceil(64) * 64;
        }
        let h = r.header();
        areas.push((h.checkpoint_off as usize, 2 * h.checkpoint_size as usize));
        areas.push((h.queue_off as usize, 256 + 8 * 128));
        r.write_checkpoint(br#"{"format":1,"programs":[]}"#)
            .expect("checkpoint");
        r.queue()
            .push(JobDesc {
                n: 1,
                completion: 1,
                ..JobDesc::default()
            })
            .expect("push");
        r.post_message("hello");
        r.set_ready();
        // SAFETY: the mapping is `len()` bytes and lives as long as `r`, dropped after.
        let bytes = unsafe { std::slice::from_raw_parts(r.base().as_ptr(), r.len()) }.to_vec();
        Template { bytes, areas }
    })
}

/// Applies the input's patches to a copy of the template.
fn patched(t: &Template, data: &[u8]) -> Vec<u8> {
    let mut bytes = t.bytes.clone();
    let mut rest = data;
    while rest.len() >= 4 {
        let (area, off, n) = (rest[0], u16::from_le_bytes([rest[1], rest[2]]), rest[3]);
        rest = &rest[4..];
        let n = (n as usize).min(rest.len());
        let (start, len) = t.areas[area as usize % t.areas.len()];
        for (i, &b) in rest[..n].iter().enumerate() {
            bytes[start + (off as usize + i) % len] = b;
        }
        rest = &rest[n..];
    }
    bytes
}

/// The `region` target: see the module documentation. Returns whether the patched region
/// opened (and was exercised).
pub fn region(data: &[u8]) -> bool {
    let t = template();
    let bytes = patched(t, data);
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = format!(
        "bpftime-fuzz-region-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let path = format!("/{name}");
    let _ = rustix::shm::unlink(path.as_str());
    let fd = rustix::shm::open(
        path.as_str(),
        rustix::shm::OFlags::CREATE | rustix::shm::OFlags::EXCL | rustix::shm::OFlags::RDWR,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .expect("shm_open");
    rustix::io::write(&fd, &bytes).expect("write the patched region");
    let opened = ShmRegion::open(&name);
    let _ = rustix::shm::unlink(path.as_str());
    let r = match opened {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!("refused: {e}");
            return false;
        }
    };
    let r = Arc::new(r);
    exercise(&r);
    true
}

/// What a client and a recovering service read of a region they did not write.
fn exercise(r: &Arc<ShmRegion>) {
    let h = r.header();
    let q = r.queue();
    let _ = (q.len(), q.head(), q.tail(), q.unreleased());
    for pos in q.head()..q.head().saturating_add(4) {
        let _ = q.peek(pos);
    }
    for i in 0..h.max_clients.min(64) {
        let _ = r
            .client(i)
            .map(|c| c.pid.load(crate::sync::Ordering::Relaxed));
        let _ = r.completion_range(i);
    }
    for i in 0..(h.max_clients.saturating_mul(h.completions_per_client)).min(64) {
        let _ = r.read_completion(i);
    }
    for id in 0..4 {
        let _ = r.message(id);
    }
    let _ = r.read_checkpoint();
    for i in 0..h.max_maps.min(256) {
        let Some(e) = r.map_entry(i) else { break };
        if e.generation.load(crate::sync::Ordering::Acquire) == 0 {
            continue;
        }
        let len = (e.name_len as usize).min(64);
        let Ok(name) = std::str::from_utf8(&e.name[..len]) else {
            continue;
        };
        let Some(d) = r.find_map(name) else { continue };
        let Some(kind) = MapKind::from_id(d.kind) else {
            continue;
        };
        let def = MapDef {
            name: name.into(),
            kind,
            key_size: d.key_size,
            value_size: d.value_size,
            max_entries: d.max_entries,
            flags: d.flags,
            origin: MapOrigin::Manual,
            init: None,
        };
        if let Ok(m) = crate::maps::open_in(r, d.data_off, &def, d.threads) {
            let _ = m.entries();
            let key = vec![1u8; d.key_size.min(512) as usize];
            let _ = m.lookup(&key, 0);
        }
    }
}
