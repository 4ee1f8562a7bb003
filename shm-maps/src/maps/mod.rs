//! eBPF maps whose storage is a byte range of shared memory (normally a piece of the
//! region's data arena), used at the same time by several processes and, later, a GPU.
//!
//! This module owns the byte layouts and the protocols on them; it does not allocate:
//! the caller (the service) picks the range, sized by [`layout_size`], and records it in
//! the map directory ([`crate::layout::MapEntry`]). Every structure is `#[repr(C)]`, holds
//! offsets rather than pointers, and keeps its shared words as atomics in the memory itself,
//! so a handle made by [`attach`] in another process sees the same map. No process-local
//! lock is ever used.
//!
//! | kind             | module       | storage                                           | writers                          | readers                 |
//! |------------------|--------------|---------------------------------------------------|----------------------------------|-------------------------|
//! | `Array`          | [`array`](mod@array) | seq words, then contiguous values                 | per-entry [`lock::SeqLock`]      | pointer; dumps retry    |
//! | `PerThreadArray` | [`array`](mod@array) | as `Array`, one value set per thread              | the owning thread, no RMW atomics | pointer; dumps retry    |
//! | `Hash`           | [`hash`]     | striped pid locks, open-addressing slot array     | bucket [`lock::PidLock`] + seqlock | lock-free probe         |
//! | `RingBuf`        | [`ringbuf`]  | producer line, consumer line, power-of-two data   | producer [`lock::PidLock`]       | one consumer at a time  |
//!
//! Every map begins with a 64-byte [`MapHeader`]:
//!
//! | offset | field         | writer                 | reader                              |
//! |--------|---------------|------------------------|-------------------------------------|
//! | 0      | `magic`       | `init`, last (release) | `attach` (acquire), per-kind value  |
//! | 8      | `kind`        | `init`                 | `attach`                            |
//! | 12     | `key_size`    | `init`                 | `attach`                            |
//! | 16     | `value_size`  | `init`                 | `attach`                            |
//! | 20     | `max_entries` | `init`                 | `attach`                            |
//! | 24     | `threads`     | `init`                 | `attach`                            |
//! | 28     | `flags`       | `init`                 | `attach`                            |
//! | 32     | `total_len`   | `init`                 | `attach` (must equal `layout_size`) |
//! | 40     | `slots`       | `init`                 | `attach` (kind-specific count)      |
//! | 48     | `count`       | hash writers (atomic)  | hash inserts, tools                 |
//! | 56     | reserved      |                        |                                     |
//!
//! **No torn values.** Every [`MapOps::update`] and every value read by
//! [`MapOps::entries`] goes through the entry's sequence word ([`lock::SeqLock`]): writers
//! move it even → odd, copy, and store odd + 1 with release; dump readers retry while it
//! is odd or changed. A program that writes through a pointer from [`MapOps::lookup`] is not
//! covered, as in Linux: such writes may tear against an update or a dump.
//!
//! **Robustness.** Lock words hold the holder's pid; a waiter that spins long checks
//! `/proc/<pid>` and takes the word from a dead holder (see [`lock`]).
//!
//! **Safety.** [`init`] and [`attach`] take a raw range: the caller promises that it stays
//! mapped, readable and writable for the handle's life and is only used through this
//! module. [`create_in`] and [`open_in`] take the range from a [`ShmRegion`] and keep the
//! region alive. Under `cfg(loom)` this module is compiled out: it builds atomics on raw
//! memory, which loom cannot model; the multi-process stress tests
//! (`tests/maps_multiprocess.rs`) cover it instead.
#![cfg(not(loom))]

pub mod array;
pub mod hash;
pub mod lock;
pub mod ringbuf;

use crate::ShmRegion;
use crate::sync::{AtomicU64, Ordering};
pub use ebpf::maps::{BPF_ANY, BPF_EXIST, BPF_NOEXIST, MapError, MapOps};
use ebpf::program::{MapDef, MapKind};
use std::ptr::NonNull;
use std::sync::Arc;

/// Alignment every map's base must have.
pub const MAP_ALIGN: u64 = 64;

/// The common header at offset 0 of every map (see the table in the module doc).
#[repr(C, align(64))]
pub struct MapHeader {
    /// The kind's magic; written last by `init`, with release.
    pub magic: AtomicU64,
    /// `MapKind::id()`.
    pub kind: u32,
    /// Key size.
    pub key_size: u32,
    /// Value size.
    pub value_size: u32,
    /// Entries (ring buffers: data bytes).
    pub max_entries: u32,
    /// Value sets (per-thread arrays; 1 for the others).
    pub threads: u32,
    /// `map_flags`.
    pub flags: u32,
    /// Bytes of the whole layout.
    pub total_len: u64,
    /// Kind-specific count: array values, hash slots, ring buffer data bytes.
    pub slots: u64,
    /// Hash: live entries plus inserts in progress.
    pub count: AtomicU64,
    _reserved: u64,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<MapHeader>() == 64);
    assert!(offset_of!(MapHeader, kind) == 8);
    assert!(offset_of!(MapHeader, max_entries) == 20);
    assert!(offset_of!(MapHeader, total_len) == 32);
    assert!(offset_of!(MapHeader, count) == 48);
};

/// Rounds `n` up to a multiple of `a` (a power of two).
pub(crate) fn align_up(n: u64, a: u64) -> u64 {
    (n + a - 1) & !(a - 1)
}

/// A shared byte range and what keeps it mapped.
pub(crate) struct Storage {
    base: NonNull<u8>,
    len: u64,
    _keep: Option<Arc<ShmRegion>>,
}

// SAFETY: the storage is shared memory accessed only through atomics and the protocols of
// this module; the pointer is valid for the handle's life (the contract of `attach`).
unsafe impl Send for Storage {}
// SAFETY: as above.
unsafe impl Sync for Storage {}

impl Storage {
    /// Pointer to byte `off`; `off` must be inside the range.
    pub(crate) fn at(&self, off: u64) -> NonNull<u8> {
        debug_assert!(off <= self.len, "offset {off} beyond {}", self.len);
        // SAFETY: `off <= len` and the range is one allocation (the `attach` contract).
        unsafe { self.base.add(off as usize) }
    }

    /// The 64-bit atomic at `off` (8-aligned, inside the range).
    pub(crate) fn u64_at(&self, off: u64) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.len);
        // SAFETY: the word is aligned and in bounds, and this module only accesses it
        // atomically; it lives as long as `self`.
        unsafe { AtomicU64::from_ptr(self.at(off).as_ptr().cast()) }
    }

    /// The 32-bit atomic at `off` (4-aligned, inside the range).
    pub(crate) fn u32_at(&self, off: u64) -> &crate::sync::AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= self.len);
        // SAFETY: as in `u64_at`.
        unsafe { crate::sync::AtomicU32::from_ptr(self.at(off).as_ptr().cast()) }
    }

    fn header(&self) -> &MapHeader {
        // SAFETY: every layout starts with a `MapHeader` at the 64-aligned base; its
        // non-atomic fields are written before `magic` is published and never again.
        unsafe { &*self.base.as_ptr().cast::<MapHeader>() }
    }

    /// Copies `src` into the 8-aligned `dst_off` with relaxed 64-bit atomic stores, padding
    /// the last word with zeros (the caller holds whatever write lock applies).
    pub(crate) fn store_bytes(&self, dst_off: u64, src: &[u8]) {
        for (i, chunk) in src.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.u64_at(dst_off + 8 * i as u64)
                .store(u64::from_ne_bytes(w), Ordering::Relaxed);
        }
    }

    /// Copies `len` bytes at the 8-aligned `src_off` out with relaxed 64-bit atomic loads.
    pub(crate) fn load_bytes(&self, src_off: u64, len: usize, out: &mut Vec<u8>) {
        let start = out.len();
        out.reserve(len);
        for i in 0..len.div_ceil(8) {
            let w = self
                .u64_at(src_off + 8 * i as u64)
                .load(Ordering::Relaxed)
                .to_ne_bytes();
            let n = (len - 8 * i).min(8);
            out.extend_from_slice(&w[..n]);
        }
        debug_assert_eq!(out.len(), start + len);
    }

    /// Whether `len` bytes at `src_off` equal `key`, read with relaxed 64-bit loads.
    pub(crate) fn bytes_eq(&self, src_off: u64, key: &[u8]) -> bool {
        key.chunks(8).enumerate().all(|(i, chunk)| {
            let w = self
                .u64_at(src_off + 8 * i as u64)
                .load(Ordering::Relaxed)
                .to_ne_bytes();
            &w[..chunk.len()] == chunk
        })
    }
}

fn invalid(def: &MapDef, why: impl std::fmt::Display) -> MapError {
    MapError::Invalid(format!("{:?} map `{}`: {why}", def.kind, def.name))
}

/// Checks `base`/`len` against a layout of `need` bytes.
fn check_range(def: &MapDef, base: NonNull<u8>, len: u64, need: u64) -> Result<(), MapError> {
    if !(base.as_ptr() as usize).is_multiple_of(MAP_ALIGN as usize) {
        return Err(invalid(
            def,
            format_args!(
                "storage at {:p} is not {MAP_ALIGN}-byte aligned",
                base.as_ptr()
            ),
        ));
    }
    if len < need {
        return Err(MapError::NoMem(format!(
            "{:?} map `{}` needs {need} bytes, the range has {len}",
            def.kind, def.name
        )));
    }
    Ok(())
}

impl Storage {
    /// Wraps a checked range of at least `need` bytes.
    fn new(def: &MapDef, base: NonNull<u8>, len: u64, need: u64) -> Result<Storage, MapError> {
        check_range(def, base, len, need)?;
        Ok(Storage {
            base,
            len: need,
            _keep: None,
        })
    }
}

/// Zeroes the whole layout and writes the header's plain fields; `magic` stays 0 until
/// [`publish`].
///
/// # Safety
/// `init`'s contract: the caller owns the fresh range exclusively.
unsafe fn write_header(st: &Storage, def: &MapDef, threads: u32, slots: u64) {
    let h = st.base.as_ptr().cast::<MapHeader>();
    // SAFETY: the caller owns the `st.len` bytes exclusively (nobody attaches while `magic`
    // is not published); the header is in bounds and 64-aligned (`check_range`).
    unsafe {
        std::ptr::write_bytes(st.base.as_ptr(), 0, st.len as usize);
        (*h).kind = def.kind.id();
        (*h).key_size = def.key_size;
        (*h).value_size = def.value_size;
        (*h).max_entries = def.max_entries;
        (*h).threads = threads;
        (*h).flags = def.flags;
        (*h).total_len = st.len;
        (*h).slots = slots;
    }
}

/// Publishes a laid-out map by storing its magic.
fn publish(st: &Storage, magic: u64) {
    // ORDERING: release publishes the header and the initialized storage; pairs with the
    // acquire load in `check_header` (`attach`, possibly in another process).
    st.header().magic.store(magic, Ordering::Release);
}

/// Validates the header of an attached map against `def`.
fn check_header(
    st: &Storage,
    def: &MapDef,
    magic: u64,
    threads: u32,
    total_len: u64,
) -> Result<(), MapError> {
    let h = st.header();
    // ORDERING: acquire pairs with the release store in `publish`, so the header fields and
    // the initial storage are visible.
    let found = h.magic.load(Ordering::Acquire);
    if found != magic {
        return Err(invalid(
            def,
            format_args!("header magic {found:#018x}, expected {magic:#018x}"),
        ));
    }
    let checks: [(&str, u64, u64); 7] = [
        ("kind", h.kind as u64, def.kind.id() as u64),
        ("key_size", h.key_size as u64, def.key_size as u64),
        ("value_size", h.value_size as u64, def.value_size as u64),
        ("max_entries", h.max_entries as u64, def.max_entries as u64),
        ("threads", h.threads as u64, threads as u64),
        ("flags", h.flags as u64, def.flags as u64),
        ("total_len", h.total_len, total_len),
    ];
    for (what, found, expected) in checks {
        if found != expected {
            return Err(invalid(
                def,
                format_args!("header {what} is {found}, expected {expected}"),
            ));
        }
    }
    Ok(())
}

/// A handle to a map in shared memory.
pub enum ShmMap {
    /// `Array` or `PerThreadArray`.
    Array(array::ShmArray),
    /// `Hash`.
    Hash(hash::ShmHash),
    /// `RingBuf`.
    RingBuf(ringbuf::ShmRingBuf),
}

impl ShmMap {
    fn ops(&self) -> &dyn MapOps {
        match self {
            ShmMap::Array(m) => m,
            ShmMap::Hash(m) => m,
            ShmMap::RingBuf(m) => m,
        }
    }
}

impl MapOps for ShmMap {
    fn def(&self) -> &MapDef {
        self.ops().def()
    }
    fn lookup(&self, key: &[u8], thread: usize) -> Option<NonNull<u8>> {
        self.ops().lookup(key, thread)
    }
    fn update(&self, key: &[u8], value: &[u8], flags: u64, thread: usize) -> Result<(), MapError> {
        self.ops().update(key, value, flags, thread)
    }
    fn delete(&self, key: &[u8]) -> Result<(), MapError> {
        self.ops().delete(key)
    }
    fn ringbuf_reserve(&self, size: u64) -> Option<NonNull<u8>> {
        self.ops().ringbuf_reserve(size)
    }
    fn ringbuf_commit(&self, ptr: NonNull<u8>, discard: bool) {
        self.ops().ringbuf_commit(ptr, discard)
    }
    fn ringbuf_output(&self, data: &[u8], flags: u64) -> Result<(), MapError> {
        self.ops().ringbuf_output(data, flags)
    }
    fn regions(&self) -> Vec<(usize, usize)> {
        self.ops().regions()
    }
    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.ops().entries()
    }
    fn drain_ringbuf(&self) -> Vec<Vec<u8>> {
        self.ops().drain_ringbuf()
    }
}

/// Bytes a map of `def` needs (`threads` value sets for per-thread arrays).
pub fn layout_size(def: &MapDef, threads: u32) -> Result<u64, MapError> {
    match def.kind {
        MapKind::Array | MapKind::PerThreadArray => array::layout_size(def, threads),
        MapKind::Hash => hash::layout_size(def, threads),
        MapKind::RingBuf => ringbuf::layout_size(def, threads),
    }
}

/// Lays out fresh storage for `def` at `base` and returns a handle.
///
/// # Safety
/// `base..base + len` must be valid, writable memory that stays mapped for the life of the
/// handle (and of every handle attached to it), that nobody else uses during `init`, and that
/// is afterwards accessed only through this module's handles.
pub unsafe fn init(
    base: NonNull<u8>,
    len: u64,
    def: &MapDef,
    threads: u32,
) -> Result<ShmMap, MapError> {
    // SAFETY: forwarded contract.
    unsafe {
        Ok(match def.kind {
            MapKind::Array | MapKind::PerThreadArray => {
                ShmMap::Array(array::init(base, len, def, threads)?)
            }
            MapKind::Hash => ShmMap::Hash(hash::init(base, len, def, threads)?),
            MapKind::RingBuf => ShmMap::RingBuf(ringbuf::init(base, len, def, threads)?),
        })
    }
}

/// Attaches to a map laid out by [`init`] (possibly in another process), checking its header.
///
/// # Safety
/// `base..base + len` must stay mapped for the life of the handle and be accessed only
/// through this module's handles.
pub unsafe fn attach(
    base: NonNull<u8>,
    len: u64,
    def: &MapDef,
    threads: u32,
) -> Result<ShmMap, MapError> {
    // SAFETY: forwarded contract.
    unsafe {
        Ok(match def.kind {
            MapKind::Array | MapKind::PerThreadArray => {
                ShmMap::Array(array::attach(base, len, def, threads)?)
            }
            MapKind::Hash => ShmMap::Hash(hash::attach(base, len, def, threads)?),
            MapKind::RingBuf => ShmMap::RingBuf(ringbuf::attach(base, len, def, threads)?),
        })
    }
}

/// [`init`], as a trait object.
///
/// # Safety
/// As [`init`].
pub unsafe fn create(
    base: NonNull<u8>,
    len: u64,
    def: &MapDef,
    threads: u32,
) -> Result<Arc<dyn MapOps>, MapError> {
    // SAFETY: forwarded contract.
    Ok(Arc::new(unsafe { init(base, len, def, threads)? }))
}

/// [`attach`], as a trait object.
///
/// # Safety
/// As [`attach`].
pub unsafe fn open(
    base: NonNull<u8>,
    len: u64,
    def: &MapDef,
    threads: u32,
) -> Result<Arc<dyn MapOps>, MapError> {
    // SAFETY: forwarded contract.
    Ok(Arc::new(unsafe { attach(base, len, def, threads)? }))
}

fn arena_range(
    region: &ShmRegion,
    off: u64,
    def: &MapDef,
    threads: u32,
) -> Result<(NonNull<u8>, u64), MapError> {
    let len = layout_size(def, threads)?;
    let base = region.arena_ptr(off, len).ok_or_else(|| {
        MapError::NoMem(format!(
            "{:?} map `{}`: arena range {off}+{len} is outside the arena of region `{}`",
            def.kind,
            def.name,
            region.name()
        ))
    })?;
    Ok((base, len))
}

/// Lays out `def` at arena offset `off` of `region` (the caller allocated that range and
/// nobody else uses it yet); the handle keeps the region mapped.
pub fn init_in(
    region: &Arc<ShmRegion>,
    off: u64,
    def: &MapDef,
    threads: u32,
) -> Result<ShmMap, MapError> {
    let (base, len) = arena_range(region, off, def, threads)?;
    // SAFETY: the range is inside the region's arena, which stays mapped while the handle
    // holds the region; the caller owns the range (documented above).
    let mut m = unsafe { init(base, len, def, threads)? };
    m.keep(region.clone());
    Ok(m)
}

/// Attaches to the map at arena offset `off` of `region`; the handle keeps the region mapped.
pub fn attach_in(
    region: &Arc<ShmRegion>,
    off: u64,
    def: &MapDef,
    threads: u32,
) -> Result<ShmMap, MapError> {
    let (base, len) = arena_range(region, off, def, threads)?;
    // SAFETY: as in `init_in`; the header check rejects a range that holds no such map.
    let mut m = unsafe { attach(base, len, def, threads)? };
    m.keep(region.clone());
    Ok(m)
}

/// [`init_in`], as a trait object.
pub fn create_in(
    region: &Arc<ShmRegion>,
    off: u64,
    def: &MapDef,
    threads: u32,
) -> Result<Arc<dyn MapOps>, MapError> {
    Ok(Arc::new(init_in(region, off, def, threads)?))
}

/// [`attach_in`], as a trait object.
pub fn open_in(
    region: &Arc<ShmRegion>,
    off: u64,
    def: &MapDef,
    threads: u32,
) -> Result<Arc<dyn MapOps>, MapError> {
    Ok(Arc::new(attach_in(region, off, def, threads)?))
}

impl ShmMap {
    fn keep(&mut self, region: Arc<ShmRegion>) {
        let st = match self {
            ShmMap::Array(m) => &mut m.st,
            ShmMap::Hash(m) => &mut m.st,
            ShmMap::RingBuf(m) => &mut m.st,
        };
        st._keep = Some(region);
    }
}

/// Checks a value-size/thread/key argument common to all kinds.
fn check_threads(def: &MapDef, threads: u32) -> Result<u32, MapError> {
    match def.kind {
        MapKind::PerThreadArray if threads == 0 => Err(invalid(def, "thread count must be > 0")),
        MapKind::PerThreadArray => Ok(threads),
        _ => Ok(1),
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    use super::*;
    use ebpf::program::MapOrigin;

    /// One 64-byte aligned line.
    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    pub struct Line([u64; 8]);

    /// 64-byte aligned zeroed memory.
    pub struct Buf {
        words: Vec<Line>,
    }

    impl Buf {
        pub fn new(len: u64) -> Buf {
            Buf {
                words: vec![Line([0; 8]); len.div_ceil(64) as usize],
            }
        }
        pub fn base(&mut self) -> NonNull<u8> {
            NonNull::new(self.words.as_mut_ptr().cast()).unwrap()
        }
        pub fn len(&self) -> u64 {
            self.words.len() as u64 * 64
        }
    }

    pub fn def(kind: MapKind, ks: u32, vs: u32, n: u32) -> MapDef {
        MapDef {
            name: "m".into(),
            kind,
            key_size: ks,
            value_size: vs,
            max_entries: n,
            flags: 0,
            origin: MapOrigin::Manual,
            init: None,
        }
    }

    /// A map laid out in a leaked buffer (tests only).
    pub fn make(def: &MapDef, threads: u32) -> ShmMap {
        let len = layout_size(def, threads).unwrap();
        let buf = Box::leak(Box::new(Buf::new(len)));
        let (base, blen) = (buf.base(), buf.len());
        // SAFETY: a fresh, leaked, 64-aligned buffer of `len` bytes used only by the map.
        unsafe { init(base, blen, def, threads).unwrap() }
    }

    pub fn read(p: NonNull<u8>, n: usize) -> Vec<u8> {
        // SAFETY: tests pass value pointers of at least `n` bytes.
        unsafe { std::slice::from_raw_parts(p.as_ptr(), n).to_vec() }
    }
}

#[cfg(test)]
mod tests {
    use super::test_util::*;
    use super::*;
    use crate::RegionConfig;

    #[test]
    fn attach_checks_the_header() {
        let d = def(MapKind::Array, 4, 8, 4);
        let len = layout_size(&d, 1).unwrap();
        let mut buf = Buf::new(len + 64);
        let base = buf.base();
        // SAFETY: fresh aligned buffer, used only here.
        unsafe {
            assert!(matches!(
                attach(base, len, &d, 1),
                Err(MapError::Invalid(_))
            ));
            init(base, len, &d, 1).unwrap();
            attach(base, len, &d, 1).unwrap();
            let mut other = d.clone();
            other.value_size = 16;
            assert!(matches!(
                attach(base, len + 64, &other, 1),
                Err(MapError::Invalid(_))
            ));
            let hd = def(MapKind::Hash, 4, 8, 4);
            assert!(matches!(
                attach(base, len, &hd, 1),
                Err(MapError::Invalid(_)) | Err(MapError::NoMem(_))
            ));
            assert!(matches!(
                attach(base, len - 8, &d, 1),
                Err(MapError::NoMem(_))
            ));
            let skew = base.add(8);
            assert!(matches!(init(skew, len, &d, 1), Err(MapError::Invalid(_))));
        }
    }

    #[test]
    fn maps_in_a_real_region() {
        let name = format!("bpftime-test-{}-maps0", std::process::id());
        let cfg = RegionConfig {
            arena_size: 1 << 20,
            queue_capacity: 4,
            max_clients: 2,
            completions_per_client: 2,
            message_slots: 2,
            max_maps: 4,
            ..Default::default()
        };
        let region = Arc::new(
            ShmRegion::create(&name, &cfg, 0o600, crate::region::OnStale::Replace).unwrap(),
        );
        let hd = def(MapKind::Hash, 8, 8, 16);
        let ad = def(MapKind::Array, 4, 8, 4);
        let h = create_in(&region, 0, &hd, 1).unwrap();
        let a_off = align_up(layout_size(&hd, 1).unwrap(), MAP_ALIGN);
        let a = create_in(&region, a_off, &ad, 1).unwrap();
        h.update(&7u64.to_ne_bytes(), &9u64.to_ne_bytes(), BPF_ANY, 0)
            .unwrap();
        a.update(&1u32.to_ne_bytes(), &5u64.to_ne_bytes(), BPF_ANY, 0)
            .unwrap();
        let h2 = open_in(&region, 0, &hd, 1).unwrap();
        let a2 = open_in(&region, a_off, &ad, 1).unwrap();
        assert_eq!(
            read(h2.lookup(&7u64.to_ne_bytes(), 0).unwrap(), 8),
            9u64.to_ne_bytes()
        );
        assert_eq!(
            read(a2.lookup(&1u32.to_ne_bytes(), 0).unwrap(), 8),
            5u64.to_ne_bytes()
        );
        assert!(open_in(&region, a_off, &hd, 1).is_err());
        assert!(matches!(
            create_in(&region, (1 << 20) - 64, &hd, 1),
            Err(MapError::NoMem(_))
        ));
        region.unlink().unwrap();
    }
}
