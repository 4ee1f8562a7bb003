//! Fixed-capacity hash map in shared memory: open addressing (linear probing) over a
//! preallocated slot array, striped pid locks for writers, lock-free readers.
//!
//! | offset                       | field                              | writer                           | reader                    |
//! |------------------------------|------------------------------------|----------------------------------|---------------------------|
//! | 0                            | [`MapHeader`] (`count` = live + inserting) | `init`; writers (`count`) | `attach`; inserts         |
//! | 64 + 4·j                     | `lock[j]` ([`PidLock`], pid or 0)  | writers of stripe `j`            | writers                   |
//! | `slots_off` + size·s + 0     | `state[s]` (see below)             | writers (CAS / release store)    | everyone (acquire)        |
//! | `slots_off` + size·s + 8     | `seq[s]` ([`SeqLock`])             | updates of a live entry          | `entries`                 |
//! | `slots_off` + size·s + 16    | `key[s]`, `round_up(key_size, 8)`  | the inserter, while `BUSY`       | probes, `entries`         |
//! | `slots_off` + size·s + 16 + K | `value[s]`, `round_up(value_size, 8)` | inserter; updates under `seq`; programs | programs, `entries` |
//!
//! `slots = next_pow2(2 · max_entries)`, `locks = min(slots, 1024)`,
//! `slots_off = round_up(64 + 4·locks, 64)`, `size = 16 + K + V`. A key hashes (FNV-1a with a
//! murmur finalizer: the same in every process) to its home slot `h & (slots - 1)`; its
//! stripe is `home & (locks - 1)`.
//!
//! **State word** (u64): bits 0-1 kind, bits 2-31 generation, bits 32-63 the inserter's pid
//! while `BUSY`.
//!
//! | kind    | meaning                          | next                                        |
//! |---------|----------------------------------|---------------------------------------------|
//! | `EMPTY` | never used; ends every probe     | `BUSY` (claim CAS, generation + 1)           |
//! | `BUSY`  | being filled; not yet visible    | `LIVE` (release store), or `TOMB` if the inserter died |
//! | `LIVE`  | holds a key and value            | `TOMB` (delete, release store)               |
//! | `TOMB`  | deleted; probes go on past it    | `BUSY` (claim CAS, generation + 1)           |
//!
//! A slot never returns to `EMPTY`, so a probe that reaches `EMPTY` has seen every slot the
//! key could be in. The price: tombstones are reused by inserts but never cleared (that
//! would need a rehash, which lock-free readers rule out), so after heavy churn a lookup of
//! an absent key may probe every slot (`O(slots)`, `slots <= 4 · max_entries`).
//!
//! **Writers** (`update`, `delete`) take the key's stripe lock, so all writers of one key
//! are serialized: an insert first probes for the key (finding it means update in place
//! under its sequence lock, so there is never a duplicate), then reserves a unit of `count`
//! (`-E2BIG` at `max_entries`), claims the first `TOMB` or `EMPTY` slot of the probe by CAS
//! (inserters of other stripes may race for it), issues a release fence, writes key and
//! value, and publishes `LIVE` with release. Delete stores `TOMB` with release and releases
//! its unit of `count`.
//!
//! **Readers** (`lookup`) take no lock: for each slot of the probe they load the state
//! with acquire, compare the key with relaxed loads, issue an acquire fence and re-load the
//! state; a changed state (the slot was deleted and reused meanwhile) means look again.
//! A pointer returned by `lookup` may outlive the entry: a deleted slot's storage stays valid
//! memory and may be reused by a later insert (as Linux's preallocated hash maps).
//!
//! **Dumps** (`entries`) read slot by slot, each value under its sequence lock, so every
//! pair is consistent, but a dump taken while others write is not a snapshot: a key deleted
//! and re-inserted further along the probe meanwhile may show twice.
//!
//! **Robustness.** A writer that dies holding a stripe lock loses it to the next writer
//! (see [`super::lock`]); a dead updater's odd sequence word is taken over the same way.
//! A `BUSY` slot whose inserter is dead is turned into `TOMB` (releasing its unit of `count`)
//! when an insert finds the map full. A process that dies between reserving a unit of
//! `count` and claiming its slot (a few instructions) leaks that unit.

use super::lock::{PidLock, SeqLock, my_pid, pid_alive};
use super::{
    BPF_EXIST, BPF_NOEXIST, MapError, MapHeader, MapOps, Storage, align_up, check_header,
    check_threads, invalid, publish, write_header,
};
use crate::sync::{AtomicU64, Ordering, fence};
use ebpf::maps::{MAX_MAP_BYTES, MAX_VALUE_SIZE};
use ebpf::program::MapDef;
use std::ptr::NonNull;

/// Magic of a hash map: `"BPFMHSH\x01"`.
pub const HASH_MAGIC: u64 = u64::from_le_bytes(*b"BPFMHSH\x01");
/// Largest key size, as in Linux.
pub const MAX_KEY_SIZE: u32 = 512;
/// Most stripe locks a map gets.
pub const MAX_LOCKS: u64 = 1024;

/// Slot kinds (bits 0-1 of the state word).
pub mod slot_state {
    /// Never used.
    pub const EMPTY: u64 = 0;
    /// Being filled by the pid in bits 32-63.
    pub const BUSY: u64 = 1;
    /// Holds an entry.
    pub const LIVE: u64 = 2;
    /// Deleted.
    pub const TOMB: u64 = 3;
}
use slot_state::{BUSY, EMPTY, LIVE, TOMB};

const KIND_MASK: u64 = 3;
const GEN_MASK: u64 = 0xffff_fffc;

fn kind(w: u64) -> u64 {
    w & KIND_MASK
}

fn with_kind(w: u64, k: u64) -> u64 {
    (w & GEN_MASK) | k
}

/// The word of a freshly claimed slot: next generation, `BUSY`, this pid.
fn claimed(w: u64, pid: u32) -> u64 {
    ((w & GEN_MASK).wrapping_add(4) & GEN_MASK) | BUSY | ((pid as u64) << 32)
}

/// The key hash every process computes alike: FNV-1a, then murmur3's 64-bit finalizer.
pub fn hash_key(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[derive(Clone, Copy, Debug)]
struct Geometry {
    slots: u64,
    locks: u64,
    slots_off: u64,
    key_len: u64,
    slot_size: u64,
    total: u64,
}

fn geometry(def: &MapDef, threads: u32) -> Result<Geometry, MapError> {
    check_threads(def, threads)?;
    if def.key_size == 0 || def.key_size > MAX_KEY_SIZE {
        return Err(invalid(
            def,
            format_args!(
                "key_size must be 1..={MAX_KEY_SIZE}, found {}",
                def.key_size
            ),
        ));
    }
    if def.value_size == 0 || def.value_size > MAX_VALUE_SIZE {
        return Err(invalid(
            def,
            format_args!(
                "value_size must be 1..={MAX_VALUE_SIZE}, found {}",
                def.value_size
            ),
        ));
    }
    if def.max_entries == 0 {
        return Err(invalid(def, "max_entries must be > 0"));
    }
    let slots = (2 * def.max_entries as u64).next_power_of_two();
    let locks = slots.min(MAX_LOCKS);
    let slots_off = align_up(size_of::<MapHeader>() as u64 + 4 * locks, 64);
    let key_len = align_up(def.key_size as u64, 8);
    let slot_size = 16 + key_len + align_up(def.value_size as u64, 8);
    let total = slots
        .checked_mul(slot_size)
        .and_then(|b| b.checked_add(slots_off))
        .filter(|&t| t <= MAX_MAP_BYTES)
        .ok_or_else(|| {
            MapError::TooBig(format!(
                "hash map `{}`: {slots} slots of {slot_size} bytes exceed {MAX_MAP_BYTES} bytes",
                def.name
            ))
        })?;
    Ok(Geometry {
        slots,
        locks,
        slots_off,
        key_len,
        slot_size,
        total,
    })
}

/// Bytes a hash map of `def` needs.
pub fn layout_size(def: &MapDef, threads: u32) -> Result<u64, MapError> {
    Ok(geometry(def, threads)?.total)
}

/// Lays out a fresh, empty hash map at `base`.
///
/// # Safety
/// As [`super::init`].
pub unsafe fn init(
    base: NonNull<u8>,
    len: u64,
    def: &MapDef,
    threads: u32,
) -> Result<ShmHash, MapError> {
    let g = geometry(def, threads)?;
    let st = Storage::new(def, base, len, g.total)?;
    // SAFETY: `init`'s contract: the range is ours alone until published. Zeroed memory is
    // an empty map: every lock free, every slot `EMPTY`, every sequence even.
    unsafe { write_header(&st, def, 1, g.slots) };
    publish(&st, HASH_MAGIC);
    Ok(ShmHash::new(def, st, g))
}

/// Attaches to a hash map laid out by [`init`].
///
/// # Safety
/// As [`super::attach`].
pub unsafe fn attach(
    base: NonNull<u8>,
    len: u64,
    def: &MapDef,
    threads: u32,
) -> Result<ShmHash, MapError> {
    let g = geometry(def, threads)?;
    let st = Storage::new(def, base, len, g.total)?;
    check_header(&st, def, HASH_MAGIC, 1, g.total)?;
    Ok(ShmHash::new(def, st, g))
}

/// A hash map in shared memory.
pub struct ShmHash {
    def: MapDef,
    pub(crate) st: Storage,
    g: Geometry,
}

impl ShmHash {
    fn new(def: &MapDef, st: Storage, g: Geometry) -> ShmHash {
        ShmHash {
            def: def.clone(),
            st,
            g,
        }
    }

    fn slot_off(&self, s: u64) -> u64 {
        self.g.slots_off + s * self.g.slot_size
    }

    fn state(&self, s: u64) -> &AtomicU64 {
        self.st.u64_at(self.slot_off(s))
    }

    fn seq(&self, s: u64) -> SeqLock<'_> {
        SeqLock::new(self.st.u64_at(self.slot_off(s) + 8))
    }

    fn key_off(&self, s: u64) -> u64 {
        self.slot_off(s) + 16
    }

    fn value_off(&self, s: u64) -> u64 {
        self.slot_off(s) + 16 + self.g.key_len
    }

    fn count(&self) -> &AtomicU64 {
        &self.st.header().count
    }

    fn stripe(&self, h: u64) -> PidLock<'_> {
        let home = h & (self.g.slots - 1);
        let j = home & (self.g.locks - 1);
        PidLock::new(self.st.u32_at(size_of::<MapHeader>() as u64 + 4 * j))
    }

    fn key<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        key.get(..self.def.key_size as usize)
    }

    /// Entries plus inserts in progress.
    pub fn len(&self) -> u64 {
        self.count().load(Ordering::Relaxed)
    }

    /// Whether the map holds no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The live slot holding `key`, probing from its hash `h`. Lock-free.
    fn find(&self, key: &[u8], h: u64) -> Option<u64> {
        let mask = self.g.slots - 1;
        for i in 0..self.g.slots {
            let s = (h + i) & mask;
            loop {
                // ORDERING: acquire pairs with the release store of `LIVE` by the inserter,
                // so the key (and value) it wrote are visible.
                let w = self.state(s).load(Ordering::Acquire);
                match kind(w) {
                    EMPTY => return None,
                    LIVE => {
                        let eq = self.st.bytes_eq(self.key_off(s), key);
                        // ORDERING: pairs with the release fence after a claim CAS: if the
                        // compare read any key byte of a newer occupant, the state load below
                        // sees that occupant's claim.
                        fence(Ordering::Acquire);
                        if self.state(s).load(Ordering::Relaxed) != w {
                            continue; // deleted or reused meanwhile: look again
                        }
                        if eq {
                            return Some(s);
                        }
                        break;
                    }
                    _ => break,
                }
            }
        }
        None
    }

    /// Reserves a unit of `count`, reclaiming slots of dead inserters when full.
    fn reserve_count(&self) -> Result<(), MapError> {
        let max = self.def.max_entries as u64;
        let mut reclaimed_once = false;
        loop {
            let c = self.count().load(Ordering::Relaxed);
            if c >= max {
                if !reclaimed_once && self.reclaim_dead() > 0 {
                    reclaimed_once = true;
                    continue;
                }
                return Err(MapError::TooBig(format!(
                    "hash map `{}` is full ({max} entries)",
                    self.def.name
                )));
            }
            if self
                .count()
                .compare_exchange_weak(c, c + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(());
            }
        }
    }

    /// Turns `BUSY` slots of dead inserters into `TOMB`; returns how many.
    fn reclaim_dead(&self) -> u64 {
        let me = my_pid();
        let mut n = 0;
        for s in 0..self.g.slots {
            let w = self.state(s).load(Ordering::Relaxed);
            let pid = (w >> 32) as u32;
            if kind(w) == BUSY && pid != me && !pid_alive(pid) {
                // ORDERING: release, as a delete; pairs with the acquire loads of probes.
                if self
                    .state(s)
                    .compare_exchange(w, with_kind(w, TOMB), Ordering::Release, Ordering::Relaxed)
                    .is_ok()
                {
                    tracing::warn!(
                        map = %self.def.name,
                        dead_pid = pid,
                        "reclaimed a slot left half-inserted by a dead process"
                    );
                    self.count().fetch_sub(1, Ordering::Relaxed);
                    n += 1;
                }
            }
        }
        n
    }

    /// Claims the first `TOMB` or `EMPTY` slot of `h`'s probe; returns it and its new word.
    fn claim(&self, h: u64) -> Option<(u64, u64)> {
        let mask = self.g.slots - 1;
        let me = my_pid();
        for i in 0..self.g.slots {
            let s = (h + i) & mask;
            let mut w = self.state(s).load(Ordering::Relaxed);
            while matches!(kind(w), EMPTY | TOMB) {
                let new = claimed(w, me);
                // ORDERING: acquire pairs with the release store of the delete that made the
                // slot `TOMB`, so its old occupant's writes are ordered before ours.
                match self
                    .state(s)
                    .compare_exchange(w, new, Ordering::Acquire, Ordering::Relaxed)
                {
                    Ok(_) => {
                        // ORDERING: orders the claim before the key and value stores that
                        // follow; pairs with the acquire fences in `find` and `entries`.
                        fence(Ordering::Release);
                        return Some((s, new));
                    }
                    Err(cur) => w = cur,
                }
            }
        }
        None
    }

    /// Takes `key`'s stripe lock and never releases it: a test hook for killing a process
    /// while it holds a bucket lock.
    #[doc(hidden)]
    pub fn lock_bucket_forever(&self, key: &[u8]) {
        let key = self.key(key).expect("key shorter than key_size");
        self.stripe(hash_key(key)).lock_forever();
    }

    /// The pid holding `key`'s stripe lock (0 when free); a test hook.
    #[doc(hidden)]
    pub fn bucket_holder(&self, key: &[u8]) -> u32 {
        let key = self.key(key).expect("key shorter than key_size");
        let h = hash_key(key);
        let j = (h & (self.g.slots - 1)) & (self.g.locks - 1);
        self.st
            .u32_at(size_of::<MapHeader>() as u64 + 4 * j)
            .load(Ordering::Relaxed)
    }
}

impl MapOps for ShmHash {
    fn def(&self) -> &MapDef {
        &self.def
    }

    fn lookup(&self, key: &[u8], _thread: usize) -> Option<NonNull<u8>> {
        let key = self.key(key)?;
        let s = self.find(key, hash_key(key))?;
        Some(self.st.at(self.value_off(s)))
    }

    fn update(&self, key: &[u8], value: &[u8], flags: u64, _thread: usize) -> Result<(), MapError> {
        if flags > BPF_EXIST {
            return Err(invalid(&self.def, format_args!("update flags {flags:#x}")));
        }
        let vs = self.def.value_size as usize;
        let (Some(key), Some(value)) = (self.key(key), value.get(..vs)) else {
            return Err(invalid(
                &self.def,
                format_args!(
                    "key/value of {}/{} bytes, expected {}/{vs}",
                    key.len(),
                    value.len(),
                    self.def.key_size
                ),
            ));
        };
        let h = hash_key(key);
        let _g = self.stripe(h).lock();
        if let Some(s) = self.find(key, h) {
            if flags == BPF_NOEXIST {
                return Err(MapError::Exists);
            }
            let _w = self.seq(s).write();
            self.st.store_bytes(self.value_off(s), value);
            return Ok(());
        }
        if flags == BPF_EXIST {
            return Err(MapError::NotFound);
        }
        self.reserve_count()?;
        let Some((s, w)) = self.claim(h) else {
            // Unreachable while `count <= max_entries < slots`; keep the count honest anyway.
            self.count().fetch_sub(1, Ordering::Relaxed);
            return Err(MapError::TooBig(format!(
                "hash map `{}`: no free slot",
                self.def.name
            )));
        };
        // A dead updater may have left the slot's sequence odd: close it (we own the slot).
        let seq = self.st.u64_at(self.slot_off(s) + 8);
        let sv = seq.load(Ordering::Relaxed) & 0xffff_ffff;
        seq.store((sv + (sv & 1)) & 0xffff_ffff, Ordering::Relaxed);
        self.st.store_bytes(self.key_off(s), key);
        self.st.store_bytes(self.value_off(s), value);
        // ORDERING: release publishes key and value; pairs with the acquire state loads in
        // `find` and `entries`.
        self.state(s).store(with_kind(w, LIVE), Ordering::Release);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<(), MapError> {
        let Some(key) = self.key(key) else {
            return Err(invalid(
                &self.def,
                format_args!("key of {} bytes, expected {}", key.len(), self.def.key_size),
            ));
        };
        let h = hash_key(key);
        let _g = self.stripe(h).lock();
        let s = self.find(key, h).ok_or(MapError::NotFound)?;
        let w = self.state(s).load(Ordering::Relaxed);
        // ORDERING: release orders our earlier reads of the entry before the slot can be
        // claimed again; pairs with the acquire claim CAS in `claim` and the acquire loads of
        // probes.
        self.state(s).store(with_kind(w, TOMB), Ordering::Release);
        self.count().fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }

    fn regions(&self) -> Vec<(usize, usize)> {
        let start = self.st.at(self.g.slots_off).as_ptr() as usize;
        vec![(start, (self.g.total - self.g.slots_off) as usize)]
    }

    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let (ks, vs) = (self.def.key_size as usize, self.def.value_size as usize);
        let mut out = Vec::new();
        for s in 0..self.g.slots {
            loop {
                // ORDERING: acquire pairs with the inserter's release store of `LIVE`.
                let w = self.state(s).load(Ordering::Acquire);
                if kind(w) != LIVE {
                    break;
                }
                let mut k = Vec::with_capacity(ks);
                self.st.load_bytes(self.key_off(s), ks, &mut k);
                let v = self.seq(s).read(|| {
                    let mut v = Vec::with_capacity(vs);
                    self.st.load_bytes(self.value_off(s), vs, &mut v);
                    v
                });
                // ORDERING: pairs with the release fence after a claim CAS (see `find`).
                fence(Ordering::Acquire);
                if self.state(s).load(Ordering::Relaxed) == w {
                    out.push((k, v));
                    break;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::super::{BPF_ANY, ShmMap};
    use super::*;
    use ebpf::program::MapKind;
    use proptest::prelude::*;
    use std::collections::HashMap as Model;
    use std::sync::Arc;

    fn hash_of(d: &MapDef) -> (ShmMap, &'static ShmHash) {
        let m = Box::leak(Box::new(make(d, 1)));
        let ShmMap::Hash(h) = &*m else { panic!() };
        // A second handle on the same memory, as another process would have.
        // SAFETY: same leaked buffer, already initialized.
        let again = unsafe { super::super::attach(h.st.base, h.st.len, d, 1).unwrap() };
        (again, h)
    }

    fn key(i: u64) -> [u8; 8] {
        i.to_ne_bytes()
    }

    #[test]
    fn flags_capacity_and_delete() {
        let d = def(MapKind::Hash, 8, 4, 2);
        let (m, h) = hash_of(&d);
        assert_eq!(
            m.update(&key(1), &[1; 4], BPF_EXIST, 0),
            Err(MapError::NotFound)
        );
        m.update(&key(1), &[1; 4], BPF_NOEXIST, 0).unwrap();
        assert_eq!(
            m.update(&key(1), &[2; 4], BPF_NOEXIST, 0),
            Err(MapError::Exists)
        );
        m.update(&key(1), &[3; 4], BPF_EXIST, 0).unwrap();
        m.update(&key(2), &[4; 4], BPF_ANY, 0).unwrap();
        assert!(matches!(
            m.update(&key(3), &[5; 4], BPF_ANY, 0),
            Err(MapError::TooBig(_))
        ));
        // Full, but updating an existing key still works.
        m.update(&key(2), &[6; 4], BPF_ANY, 0).unwrap();
        assert_eq!(read(h.lookup(&key(1), 0).unwrap(), 4), vec![3; 4]);
        assert_eq!(read(h.lookup(&key(2), 0).unwrap(), 4), vec![6; 4]);
        assert_eq!(h.len(), 2);
        m.delete(&key(1)).unwrap();
        assert_eq!(m.delete(&key(1)), Err(MapError::NotFound));
        assert!(m.lookup(&key(1), 0).is_none());
        m.update(&key(3), &[7; 4], BPF_ANY, 0).unwrap();
        let mut e = m.entries();
        e.sort();
        assert_eq!(
            e,
            vec![(key(2).to_vec(), vec![6; 4]), (key(3).to_vec(), vec![7; 4])]
        );
        assert!(matches!(
            m.update(&key(3), &[7; 4], 4, 0),
            Err(MapError::Invalid(_))
        ));
        assert!(matches!(
            m.update(&[1; 7], &[7; 4], 0, 0),
            Err(MapError::Invalid(_))
        ));
        assert!(m.lookup(&[1; 7], 0).is_none());
        let (start, len) = m.regions()[0];
        let p = m.lookup(&key(3), 0).unwrap().as_ptr() as usize;
        assert!(p >= start && p + 4 <= start + len);
    }

    #[test]
    fn geometry_and_bad_defs() {
        // 2 entries → 4 slots, 4 locks; slots at round_up(64 + 16, 64) = 128; slot 16+8+8.
        assert_eq!(
            layout_size(&def(MapKind::Hash, 8, 4, 2), 1).unwrap(),
            128 + 4 * 32
        );
        for bad in [
            def(MapKind::Hash, 0, 4, 2),
            def(MapKind::Hash, 513, 4, 2),
            def(MapKind::Hash, 4, 0, 2),
            def(MapKind::Hash, 4, 4, 0),
        ] {
            assert!(matches!(layout_size(&bad, 1), Err(MapError::Invalid(_))));
        }
        assert!(matches!(
            layout_size(&def(MapKind::Hash, 512, 1 << 20, u32::MAX), 1),
            Err(MapError::TooBig(_))
        ));
        // Stable across processes: a fixed input hashes to a fixed value.
        assert_eq!(hash_key(b""), {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            h ^= h >> 33;
            h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
            h ^= h >> 33;
            h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
            h ^ (h >> 33)
        });
    }

    #[test]
    fn tombstones_are_reused_and_probes_cross_them() {
        let d = def(MapKind::Hash, 8, 8, 4);
        let (m, h) = hash_of(&d);
        for round in 0..200u64 {
            for i in 0..4 {
                m.update(&key(round * 4 + i), &(round).to_ne_bytes(), BPF_NOEXIST, 0)
                    .unwrap();
            }
            for i in 0..4 {
                assert_eq!(
                    read(m.lookup(&key(round * 4 + i), 0).unwrap(), 8),
                    round.to_ne_bytes()
                );
            }
            for i in 0..4 {
                m.delete(&key(round * 4 + i)).unwrap();
            }
            assert_eq!(h.len(), 0);
        }
        assert!(m.entries().is_empty());
        assert!(m.lookup(&key(5), 0).is_none());
    }

    #[test]
    fn dead_lock_holder_and_dead_inserter_are_recovered() {
        let d = def(MapKind::Hash, 8, 8, 2);
        let (m, h) = hash_of(&d);
        let dead = super::super::lock::tests::dead_pid();
        // A dead process holds key 1's stripe.
        let home = hash_key(&key(1)) & (h.g.slots - 1);
        let j = home & (h.g.locks - 1);
        h.st.u32_at(64 + 4 * j).store(dead, Ordering::Relaxed);
        assert_eq!(h.bucket_holder(&key(1)), dead);
        m.update(&key(1), &[1; 8], BPF_ANY, 0).unwrap();
        assert_eq!(h.bucket_holder(&key(1)), 0);
        // A dead process claimed a slot (counted) and never published it: the map looks
        // full until an insert reclaims it.
        let (s, _) = h.claim(hash_key(&key(9))).unwrap();
        h.count().fetch_add(1, Ordering::Relaxed);
        let w = h.state(s).load(Ordering::Relaxed);
        h.state(s)
            .store((w & 0xffff_ffff) | ((dead as u64) << 32), Ordering::Relaxed);
        assert_eq!(h.len(), 2);
        m.update(&key(2), &[2; 8], BPF_ANY, 0).unwrap();
        assert_ne!(kind(h.state(s).load(Ordering::Relaxed)), BUSY);
        let mut e = m.entries();
        e.sort();
        assert_eq!(
            e,
            vec![(key(1).to_vec(), vec![1; 8]), (key(2).to_vec(), vec![2; 8])]
        );
    }

    /// Threads insert, update and delete overlapping keys; afterwards each key is present
    /// exactly when its net insert count is 1.
    #[test]
    fn threads_keep_keys_unique() {
        let d = def(MapKind::Hash, 8, 16, 6);
        let m = Arc::new(make(&d, 1));
        let nets: Vec<Vec<i64>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..3u64)
                .map(|t| {
                    let m = m.clone();
                    sc.spawn(move || {
                        let mut net = vec![0i64; 8];
                        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                        for i in 0..50_000u64 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let k = x % 8;
                            let mut v = [0u8; 16];
                            v[..8].copy_from_slice(&k.to_ne_bytes());
                            v[8..].copy_from_slice(&(k ^ i).to_ne_bytes());
                            match (x >> 8) % 3 {
                                0 => {
                                    if m.update(&key(k), &v, BPF_NOEXIST, 0).is_ok() {
                                        net[k as usize] += 1;
                                    }
                                }
                                1 => {
                                    if m.delete(&key(k)).is_ok() {
                                        net[k as usize] -= 1;
                                    }
                                }
                                _ => {
                                    let _ = m.update(&key(k), &v, BPF_EXIST, 0);
                                    if let Some(p) = m.lookup(&key(k), 0) {
                                        // The first word is a key, whichever write won. It
                                        // may be another key's: once another thread deletes
                                        // `k`, its slot can be reused before this read (as
                                        // with Linux's preallocated hash maps, a looked-up
                                        // pointer is not pinned), but it is never garbage.
                                        let w = u64::from_ne_bytes(read(p, 8).try_into().unwrap());
                                        assert!(w < 8, "value word {w:#x} is no key");
                                    }
                                }
                            }
                        }
                        net
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let present: std::collections::HashSet<u64> = m
            .entries()
            .iter()
            .map(|(k, _)| u64::from_ne_bytes(k[..8].try_into().unwrap()))
            .collect();
        assert_eq!(present.len(), m.entries().len(), "duplicate keys");
        for k in 0..8u64 {
            let net: i64 = nets.iter().map(|n| n[k as usize]).sum();
            assert_eq!(net, present.contains(&k) as i64, "key {k}");
        }
        let ShmMap::Hash(h) = &*m else { panic!() };
        assert_eq!(h.len(), present.len() as u64);
    }

    /// Threads insert the same keys in the same order: each key is won by exactly one.
    #[test]
    fn racing_inserts_of_one_key_have_one_winner() {
        let d = def(MapKind::Hash, 8, 8, 32768);
        let m = Arc::new(make(&d, 1));
        let won: u64 = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..3u64)
                .map(|t| {
                    let m = m.clone();
                    sc.spawn(move || {
                        (0..20_000u64)
                            .filter(|&k| m.update(&key(k), &key(t), BPF_NOEXIST, 0).is_ok())
                            .count() as u64
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(won, 20_000);
        assert_eq!(m.entries().len(), 20_000);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Update(u8, u8, u64),
        Delete(u8),
        Lookup(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..16, any::<u8>(), 0u64..4).prop_map(|(k, v, f)| Op::Update(k, v, f)),
            (0u8..16).prop_map(Op::Delete),
            (0u8..16).prop_map(Op::Lookup),
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_bounded_hashmap(max in 1u32..10, ops in prop::collection::vec(op(), 1..200)) {
            let d = def(MapKind::Hash, 3, 5, max);
            let m = make(&d, 1);
            let mut model: Model<[u8; 3], [u8; 5]> = Model::new();
            for op in ops {
                match op {
                    Op::Update(k, v, f) => {
                        let (k, v) = ([k, 1, 2], [v; 5]);
                        let want = if f > BPF_EXIST {
                            Err("inval")
                        } else if model.contains_key(&k) {
                            if f == BPF_NOEXIST { Err("exists") } else { Ok(()) }
                        } else if f == BPF_EXIST {
                            Err("noent")
                        } else if model.len() >= max as usize {
                            Err("2big")
                        } else {
                            Ok(())
                        };
                        if want.is_ok() {
                            model.insert(k, v);
                        }
                        let got = m.update(&k, &v, f, 0).map_err(|e| match e {
                            MapError::Invalid(_) => "inval",
                            MapError::Exists => "exists",
                            MapError::NotFound => "noent",
                            MapError::TooBig(_) => "2big",
                            _ => "other",
                        });
                        prop_assert_eq!(got, want);
                    }
                    Op::Delete(k) => {
                        let k = [k, 1, 2];
                        let want = model.remove(&k).map(|_| ()).ok_or(MapError::NotFound);
                        prop_assert_eq!(m.delete(&k), want);
                    }
                    Op::Lookup(k) => {
                        let k = [k, 1, 2];
                        let got = m.lookup(&k, 0).map(|p| read(p, 5));
                        prop_assert_eq!(got, model.get(&k).map(|v| v.to_vec()));
                    }
                }
            }
            let mut got = m.entries();
            got.sort();
            let mut want: Vec<_> = model.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }
}
