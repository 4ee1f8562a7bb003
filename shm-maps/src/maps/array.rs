//! Arrays in shared memory: `Array` (also global data `.rodata`/`.data`/`.bss`) and
//! `PerThreadArray` (one value set per thread).
//!
//! Values are contiguous, each `stride = round_up(value_size, 8)` bytes, so a value pointer
//! plus an offset (global data `map_idx_value[i][off]`) stays inside the value. The sequence
//! words sit in their own table in front of the values.
//!
//! | offset                          | field                         | writer                    | reader                    |
//! |---------------------------------|-------------------------------|---------------------------|---------------------------|
//! | 0                               | [`MapHeader`]                 | `init`                    | `attach`                  |
//! | 64 + 8·(t·n + i)                | `seq[t][i]` ([`SeqLock`])     | `update` (CAS / owner)    | `entries`                 |
//! | `values_off` + stride·(t·n + i) | `value[t][i]`                 | `update` under `seq`; programs through `lookup` | programs; `entries` under `seq` |
//!
//! `values_off = round_up(64 + 8·threads·n, 64)`, `n = max_entries`, `t` the thread (always
//! 0 for `Array`). `Array` writers take the sequence word with a CAS (several processes may
//! update one entry). `PerThreadArray` writers own their slot set (the caller guarantees one
//! executing thread per `thread` index across all processes), so they move the sequence
//! word with plain stores and no read-modify-write atomics; dumps still never see a torn
//! value. Global data maps get `def.init` copied into entry 0 of every value set.

use super::lock::SeqLock;
use super::{
    BPF_EXIST, BPF_NOEXIST, MapError, MapHeader, MapOps, Storage, align_up, check_header,
    check_threads, invalid, publish, write_header,
};
use ebpf::maps::{MAX_MAP_BYTES, MAX_VALUE_SIZE};
use ebpf::program::{MapDef, MapKind};
use std::ptr::NonNull;

/// Magic of an `Array`: `"BPFMARR\x01"`.
pub const ARRAY_MAGIC: u64 = u64::from_le_bytes(*b"BPFMARR\x01");
/// Magic of a `PerThreadArray`: `"BPFMPTA\x01"`.
pub const PER_THREAD_MAGIC: u64 = u64::from_le_bytes(*b"BPFMPTA\x01");

/// Offsets of an array layout.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    threads: u32,
    stride: u64,
    values_off: u64,
    total: u64,
}

fn geometry(def: &MapDef, threads: u32) -> Result<Geometry, MapError> {
    let threads = check_threads(def, threads)?;
    if def.key_size != 4 {
        return Err(invalid(
            def,
            format_args!("key_size must be 4, found {}", def.key_size),
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
    if let Some(init) = &def.init
        && init.len() > def.value_size as usize
    {
        return Err(invalid(
            def,
            format_args!(
                "init data is {} bytes, value_size is {}",
                init.len(),
                def.value_size
            ),
        ));
    }
    let stride = align_up(def.value_size as u64, 8);
    let values = threads as u64 * def.max_entries as u64;
    let values_off = align_up(size_of::<MapHeader>() as u64 + 8 * values, 64);
    let total = values
        .checked_mul(stride)
        .and_then(|b| b.checked_add(values_off))
        .filter(|&t| t <= MAX_MAP_BYTES)
        .ok_or_else(|| {
            MapError::TooBig(format!(
                "{:?} map `{}`: {threads} x {} values of {} bytes exceed {MAX_MAP_BYTES} bytes",
                def.kind, def.name, def.max_entries, def.value_size
            ))
        })?;
    Ok(Geometry {
        threads,
        stride,
        values_off,
        total,
    })
}

fn magic(def: &MapDef) -> u64 {
    if def.kind == MapKind::PerThreadArray {
        PER_THREAD_MAGIC
    } else {
        ARRAY_MAGIC
    }
}

/// Bytes an array of `def` needs.
pub fn layout_size(def: &MapDef, threads: u32) -> Result<u64, MapError> {
    Ok(geometry(def, threads)?.total)
}

/// Lays out a fresh array at `base`.
///
/// # Safety
/// As [`super::init`].
pub unsafe fn init(
    base: NonNull<u8>,
    len: u64,
    def: &MapDef,
    threads: u32,
) -> Result<ShmArray, MapError> {
    let g = geometry(def, threads)?;
    let st = Storage::new(def, base, len, g.total)?;
    // SAFETY: `init`'s contract: the range is ours alone until published.
    unsafe {
        write_header(
            &st,
            def,
            g.threads,
            g.threads as u64 * def.max_entries as u64,
        )
    };
    let m = ShmArray::new(def, st, g);
    if let Some(init) = &def.init {
        for t in 0..g.threads {
            m.st.store_bytes(m.value_off(0, t), init);
        }
    }
    publish(&m.st, magic(def));
    Ok(m)
}

/// Attaches to an array laid out by [`init`].
///
/// # Safety
/// As [`super::attach`].
pub unsafe fn attach(
    base: NonNull<u8>,
    len: u64,
    def: &MapDef,
    threads: u32,
) -> Result<ShmArray, MapError> {
    let g = geometry(def, threads)?;
    let st = Storage::new(def, base, len, g.total)?;
    check_header(&st, def, magic(def), g.threads, g.total)?;
    Ok(ShmArray::new(def, st, g))
}

/// An `Array` or `PerThreadArray` in shared memory.
pub struct ShmArray {
    def: MapDef,
    pub(crate) st: Storage,
    g: Geometry,
}

impl ShmArray {
    fn new(def: &MapDef, st: Storage, g: Geometry) -> ShmArray {
        ShmArray {
            def: def.clone(),
            st,
            g,
        }
    }

    fn flat(&self, idx: u32, thread: u32) -> u64 {
        thread as u64 * self.def.max_entries as u64 + idx as u64
    }

    fn value_off(&self, idx: u32, thread: u32) -> u64 {
        self.g.values_off + self.flat(idx, thread) * self.g.stride
    }

    fn seq(&self, idx: u32, thread: u32) -> SeqLock<'_> {
        SeqLock::new(
            self.st
                .u64_at(size_of::<MapHeader>() as u64 + 8 * self.flat(idx, thread)),
        )
    }

    /// `(index, thread)` for a key, if in range.
    fn index(&self, key: &[u8], thread: usize) -> Option<(u32, u32)> {
        let k: [u8; 4] = key.get(..4)?.try_into().ok()?;
        let idx = u32::from_ne_bytes(k);
        // A plain array has one slot set that every thread shares: the worker index a
        // program runs under must not select (or miss) anything.
        let thread = if self.def.kind == MapKind::PerThreadArray {
            thread
        } else {
            0
        };
        (idx < self.def.max_entries && thread < self.g.threads as usize)
            .then_some((idx, thread as u32))
    }

    /// Reads value `idx` of `thread` under its sequence lock.
    fn read_value(&self, idx: u32, thread: u32, out: &mut Vec<u8>) {
        let vs = self.def.value_size as usize;
        let off = self.value_off(idx, thread);
        let start = out.len();
        self.seq(idx, thread).read(|| {
            out.truncate(start);
            self.st.load_bytes(off, vs, out);
        });
    }
}

impl MapOps for ShmArray {
    fn def(&self) -> &MapDef {
        &self.def
    }

    fn lookup(&self, key: &[u8], thread: usize) -> Option<NonNull<u8>> {
        let (idx, t) = self.index(key, thread)?;
        Some(self.st.at(self.value_off(idx, t)))
    }

    fn update(&self, key: &[u8], value: &[u8], flags: u64, thread: usize) -> Result<(), MapError> {
        if flags > BPF_EXIST {
            return Err(invalid(&self.def, format_args!("update flags {flags:#x}")));
        }
        if key.len() < 4 || value.len() < self.def.value_size as usize {
            return Err(invalid(
                &self.def,
                format_args!(
                    "key/value of {}/{} bytes, expected 4/{}",
                    key.len(),
                    value.len(),
                    self.def.value_size
                ),
            ));
        }
        if flags == BPF_NOEXIST {
            return Err(MapError::Exists);
        }
        let (idx, t) = self.index(key, thread).ok_or_else(|| {
            MapError::TooBig(format!(
                "index {} beyond max_entries {} of `{}` (or thread {thread} beyond {})",
                u32::from_ne_bytes([key[0], key[1], key[2], key[3]]),
                self.def.max_entries,
                self.def.name,
                self.g.threads
            ))
        })?;
        let lock = self.seq(idx, t);
        let _w = if self.def.kind == MapKind::PerThreadArray {
            lock.write_owned()
        } else {
            lock.write()
        };
        self.st.store_bytes(
            self.value_off(idx, t),
            &value[..self.def.value_size as usize],
        );
        Ok(())
    }

    fn delete(&self, _key: &[u8]) -> Result<(), MapError> {
        Err(invalid(&self.def, "array elements cannot be deleted"))
    }

    fn regions(&self) -> Vec<(usize, usize)> {
        let start = self.st.at(self.g.values_off).as_ptr() as usize;
        vec![(start, (self.g.total - self.g.values_off) as usize)]
    }

    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..self.def.max_entries)
            .map(|i| {
                let mut v =
                    Vec::with_capacity(self.def.value_size as usize * self.g.threads as usize);
                for t in 0..self.g.threads {
                    self.read_value(i, t, &mut v);
                }
                (i.to_ne_bytes().to_vec(), v)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::super::{BPF_ANY, ShmMap, layout_size as any_layout_size};
    use super::*;
    use std::sync::Arc;

    fn k(i: u32) -> [u8; 4] {
        i.to_ne_bytes()
    }

    #[test]
    fn a_plain_array_is_one_slot_set_for_every_thread() {
        // Found by the crash test of issue 18: worker 1's lookups of a shared array
        // missed, so half of a 2-worker service's jobs saw no map value.
        let m = make(&def(MapKind::Array, 4, 8, 2), 1);
        let p0 = m.lookup(&k(1), 0).unwrap();
        for t in [1, 3, 63] {
            assert_eq!(m.lookup(&k(1), t), Some(p0), "thread {t}");
            m.update(&k(0), &[t as u8; 8], BPF_ANY, t).unwrap();
            assert_eq!(read(m.lookup(&k(0), 0).unwrap(), 8), vec![t as u8; 8]);
        }
        let per = make(&def(MapKind::PerThreadArray, 4, 8, 2), 2);
        assert_ne!(per.lookup(&k(1), 1), per.lookup(&k(1), 0));
        assert!(per.lookup(&k(1), 2).is_none());
    }

    #[test]
    fn lookup_update_bounds() {
        let m = make(&def(MapKind::Array, 4, 12, 3), 1);
        let p = m.lookup(&k(1), 0).unwrap();
        assert_eq!(read(p, 12), vec![0; 12]);
        assert_eq!(p.as_ptr() as usize % 8, 0);
        m.update(&k(1), &[7; 12], BPF_ANY, 0).unwrap();
        assert_eq!(read(p, 12), vec![7; 12]);
        // Values are contiguous: entry 2 is 16 bytes (stride) after entry 1.
        let p2 = m.lookup(&k(2), 0).unwrap();
        assert_eq!(p2.as_ptr() as usize - p.as_ptr() as usize, 16);
        assert!(m.lookup(&k(3), 0).is_none());
        assert!(matches!(
            m.update(&k(3), &[1; 12], BPF_ANY, 0),
            Err(MapError::TooBig(_))
        ));
        assert_eq!(
            m.update(&k(0), &[1; 12], BPF_NOEXIST, 0),
            Err(MapError::Exists)
        );
        assert!(matches!(
            m.update(&k(0), &[1; 12], 9, 0),
            Err(MapError::Invalid(_))
        ));
        assert!(matches!(
            m.update(&k(0), &[1; 11], BPF_ANY, 0),
            Err(MapError::Invalid(_))
        ));
        m.update(&k(2), &[2; 12], BPF_EXIST, 0).unwrap();
        assert!(matches!(m.delete(&k(0)), Err(MapError::Invalid(_))));
        let e = m.entries();
        assert_eq!(
            e,
            vec![
                (k(0).to_vec(), vec![0; 12]),
                (k(1).to_vec(), vec![7; 12]),
                (k(2).to_vec(), vec![2; 12]),
            ]
        );
        let (start, len) = m.regions()[0];
        assert_eq!(len, 48);
        assert_eq!(start, p.as_ptr() as usize - 16);
        // Each update bumped entry 1's sequence word by 2.
        let ShmMap::Array(a) = &m else { panic!() };
        assert_eq!(a.st.u64_at(64 + 8).load(crate::sync::Ordering::Relaxed), 2);
    }

    #[test]
    fn layout_size_matches_the_table() {
        // 64 header + 3 seq words (24) → values at 128; 3 x 16.
        assert_eq!(
            any_layout_size(&def(MapKind::Array, 4, 12, 3), 1).unwrap(),
            128 + 48
        );
        // Per-thread: 2 x 3 seq words (48) → values at 128; 6 x 8.
        assert_eq!(
            any_layout_size(&def(MapKind::PerThreadArray, 4, 8, 3), 2).unwrap(),
            128 + 48
        );
    }

    #[test]
    fn global_data_init_and_bad_defs() {
        let mut d = def(MapKind::Array, 4, 8, 1);
        d.init = Some(vec![1, 2, 3]);
        let m = make(&d, 1);
        assert_eq!(
            read(m.lookup(&k(0), 0).unwrap(), 8),
            vec![1, 2, 3, 0, 0, 0, 0, 0]
        );
        d.init = Some(vec![0; 9]);
        assert!(matches!(layout_size(&d, 1), Err(MapError::Invalid(_))));
        for bad in [
            def(MapKind::Array, 4, 0, 1),
            def(MapKind::Array, 4, 4, 0),
            def(MapKind::Array, 8, 4, 1),
        ] {
            assert!(matches!(layout_size(&bad, 1), Err(MapError::Invalid(_))));
        }
        assert!(matches!(
            layout_size(&def(MapKind::Array, 4, 1 << 20, u32::MAX), 1),
            Err(MapError::TooBig(_))
        ));
        assert!(matches!(
            layout_size(&def(MapKind::PerThreadArray, 4, 4, 1), 0),
            Err(MapError::Invalid(_))
        ));
    }

    #[test]
    fn per_thread_slots_are_separate() {
        let mut d = def(MapKind::PerThreadArray, 4, 8, 2);
        d.init = Some(vec![5]);
        let m = make(&d, 3);
        for t in 0..3 {
            assert_eq!(read(m.lookup(&k(0), t).unwrap(), 1), vec![5]);
            m.update(&k(1), &(t as u64 + 10).to_ne_bytes(), BPF_ANY, t)
                .unwrap();
        }
        assert!(m.lookup(&k(0), 3).is_none());
        assert!(matches!(
            m.update(&k(0), &[0; 8], BPF_ANY, 3),
            Err(MapError::TooBig(_))
        ));
        let e = m.entries();
        let mut want = Vec::new();
        for t in 0..3u64 {
            want.extend((t + 10).to_ne_bytes());
        }
        assert_eq!(e[1], (k(1).to_vec(), want));
        assert_eq!(e[0].1.len(), 24);
        assert_eq!(e[0].1[8], 5);
    }

    /// Two writer threads keep both halves of a 16-byte value equal; a dumper must never
    /// see them differ.
    #[test]
    fn dumps_never_see_torn_values() {
        use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
        let m = Arc::new(make(&def(MapKind::Array, 4, 16, 2), 1));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let (m, stop) = (m.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Relaxed) {
                        i += 1;
                        let x = (i << 8) | (w + 1);
                        let mut v = [0u8; 16];
                        v[..8].copy_from_slice(&x.to_ne_bytes());
                        v[8..].copy_from_slice(&x.to_ne_bytes());
                        m.update(&k((i % 2) as u32), &v, BPF_ANY, 0).unwrap();
                    }
                    i
                })
            })
            .collect();
        let mut changes = 0;
        let mut last = Vec::new();
        for _ in 0..20_000 {
            let e = m.entries();
            for (_, v) in &e {
                assert_eq!(v[..8], v[8..], "torn value {v:?}");
            }
            changes += (e != last) as u32;
            last = e;
        }
        stop.store(true, Relaxed);
        let n: Vec<u64> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        // A seqlock reader completes only between writes, so on a busy machine it sees few
        // distinct states; a handful proves the writers ran concurrently.
        assert!(
            changes >= 3,
            "the writers barely ran ({changes} changes seen, {n:?} writes)"
        );
    }
}
