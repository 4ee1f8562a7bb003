//! Array and per-thread array maps: `u32` index keys, preallocated zeroed values.
//!
//! Layout: `threads` consecutive slot sets, each `max_entries` values of `value_size` bytes
//! rounded up to 8 (so every value is 8-byte aligned). A global-data map's `init` bytes fill
//! entry 0 of every slot set.

use super::raw::RawBuf;
use super::{BPF_EXIST, BPF_NOEXIST, MapError, MapOps, round8};
use crate::program::{MapDef, MapKind};
use std::ptr::NonNull;

/// An `Array` (one slot set) or `PerThreadArray` (one slot set per thread).
pub struct ArrayMap {
    def: MapDef,
    stride: usize,
    threads: usize,
    buf: RawBuf,
}

impl ArrayMap {
    /// Creates the storage; `threads` is 1 for a plain array.
    pub fn new(def: &MapDef, threads: usize) -> Result<ArrayMap, MapError> {
        if def.key_size != 4 {
            return Err(MapError::Invalid(format!(
                "array map `{}`: key_size must be 4, found {}",
                def.name, def.key_size
            )));
        }
        if def.value_size == 0 || def.value_size > super::MAX_VALUE_SIZE {
            return Err(MapError::Invalid(format!(
                "array map `{}`: value_size must be 1..={}, found {}",
                def.name,
                super::MAX_VALUE_SIZE,
                def.value_size
            )));
        }
        if def.max_entries == 0 {
            return Err(MapError::Invalid(format!(
                "array map `{}`: max_entries must be > 0",
                def.name
            )));
        }
        if threads == 0 {
            return Err(MapError::Invalid(format!(
                "array map `{}`: thread count must be > 0",
                def.name
            )));
        }
        let stride = round8(def.value_size as u64);
        let total = stride
            .checked_mul(def.max_entries as u64)
            .and_then(|v| v.checked_mul(threads as u64))
            .ok_or_else(|| MapError::TooBig(format!("array map `{}` too large", def.name)))?;
        let buf = RawBuf::zeroed(total)?;
        let stride = stride as usize;
        if let Some(init) = &def.init {
            if init.len() > def.value_size as usize {
                return Err(MapError::Invalid(format!(
                    "map `{}`: init data is {} bytes, value_size is {}",
                    def.name,
                    init.len(),
                    def.value_size
                )));
            }
            for t in 0..threads {
                buf.write(t * stride * def.max_entries as usize, init);
            }
        }
        Ok(ArrayMap {
            def: def.clone(),
            stride,
            threads,
            buf,
        })
    }

    fn offset(&self, key: &[u8], thread: usize) -> Option<usize> {
        let k: [u8; 4] = key.get(..4)?.try_into().ok()?;
        let idx = u32::from_le_bytes(k);
        // A plain array has one slot set that every thread shares.
        let thread = if self.def.kind == MapKind::PerThreadArray {
            thread
        } else {
            0
        };
        if idx >= self.def.max_entries || thread >= self.threads {
            return None;
        }
        Some((thread * self.def.max_entries as usize + idx as usize) * self.stride)
    }
}

impl MapOps for ArrayMap {
    fn def(&self) -> &MapDef {
        &self.def
    }

    fn lookup(&self, key: &[u8], thread: usize) -> Option<NonNull<u8>> {
        self.offset(key, thread).map(|o| self.buf.at(o))
    }

    fn update(&self, key: &[u8], value: &[u8], flags: u64, thread: usize) -> Result<(), MapError> {
        if flags > BPF_EXIST {
            return Err(MapError::Invalid(format!("update flags {flags:#x}")));
        }
        if key.len() < 4 || value.len() < self.def.value_size as usize {
            return Err(MapError::Invalid(format!(
                "key/value of {}/{} bytes, expected {}/{}",
                key.len(),
                value.len(),
                self.def.key_size,
                self.def.value_size
            )));
        }
        if flags == BPF_NOEXIST {
            // Every index of an array exists.
            return Err(MapError::Exists);
        }
        let off = self.offset(key, thread).ok_or_else(|| {
            MapError::TooBig(format!(
                "index {} beyond max_entries {} (or thread {thread} beyond {})",
                u32::from_le_bytes(key[..4].try_into().unwrap_or([0; 4])),
                self.def.max_entries,
                self.threads
            ))
        })?;
        self.buf.write(off, &value[..self.def.value_size as usize]);
        Ok(())
    }

    fn delete(&self, _key: &[u8]) -> Result<(), MapError> {
        Err(MapError::Invalid("array elements cannot be deleted".into()))
    }

    fn regions(&self) -> Vec<(usize, usize)> {
        vec![(self.buf.ptr().as_ptr() as usize, self.buf.len())]
    }

    fn array_layout(&self) -> Option<(usize, usize, u32)> {
        (self.def.kind == MapKind::Array).then(|| {
            (
                self.buf.ptr().as_ptr() as usize,
                self.stride,
                self.def.max_entries,
            )
        })
    }

    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let vs = self.def.value_size as usize;
        (0..self.def.max_entries)
            .map(|i| {
                let mut v = Vec::with_capacity(vs * self.threads);
                for t in 0..self.threads {
                    let off = (t * self.def.max_entries as usize + i as usize) * self.stride;
                    v.extend(self.buf.read(off, vs));
                }
                (i.to_le_bytes().to_vec(), v)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::MapOrigin;

    fn def(kind: MapKind, vs: u32, n: u32) -> MapDef {
        MapDef {
            name: "a".into(),
            kind,
            key_size: 4,
            value_size: vs,
            max_entries: n,
            flags: 0,
            origin: MapOrigin::Manual,
            init: None,
        }
    }

    fn read(p: NonNull<u8>, n: usize) -> Vec<u8> {
        // SAFETY: test pointers come from lookup and cover n bytes.
        unsafe { std::slice::from_raw_parts(p.as_ptr(), n).to_vec() }
    }

    #[test]
    fn array_lookup_update_bounds() {
        let m = ArrayMap::new(&def(MapKind::Array, 12, 3), 1).unwrap();
        let p = m.lookup(&1u32.to_le_bytes(), 0).unwrap();
        assert_eq!(read(p, 12), vec![0; 12]);
        assert_eq!(p.as_ptr() as usize % 8, 0);
        m.update(&1u32.to_le_bytes(), &[7; 12], 0, 0).unwrap();
        assert_eq!(read(p, 12), vec![7; 12]);
        assert!(m.lookup(&3u32.to_le_bytes(), 0).is_none());
        assert_eq!(
            m.update(&3u32.to_le_bytes(), &[1; 12], 0, 0)
                .unwrap_err()
                .errno(),
            -7
        );
        assert_eq!(
            m.update(&0u32.to_le_bytes(), &[1; 12], BPF_NOEXIST, 0)
                .unwrap_err()
                .errno(),
            -17
        );
        assert_eq!(
            m.update(&0u32.to_le_bytes(), &[1; 12], 9, 0)
                .unwrap_err()
                .errno(),
            -22
        );
        m.update(&2u32.to_le_bytes(), &[2; 12], BPF_EXIST, 0)
            .unwrap();
        assert_eq!(m.delete(&0u32.to_le_bytes()).unwrap_err().errno(), -22);
        let e = m.entries();
        assert_eq!(e.len(), 3);
        assert_eq!(e[2], (2u32.to_le_bytes().to_vec(), vec![2; 12]));
        // every worker thread sees the same plain-array slot
        assert_eq!(m.lookup(&1u32.to_le_bytes(), 5), Some(p));
        let (start, len) = m.regions()[0];
        assert!(p.as_ptr() as usize >= start && (p.as_ptr() as usize) + 12 <= start + len);
    }

    #[test]
    fn global_data_init_and_bad_defs() {
        let mut d = def(MapKind::Array, 8, 1);
        d.init = Some(vec![1, 2, 3]);
        let m = ArrayMap::new(&d, 1).unwrap();
        assert_eq!(
            read(m.lookup(&[0; 4], 0).unwrap(), 8),
            vec![1, 2, 3, 0, 0, 0, 0, 0]
        );
        d.init = Some(vec![0; 9]);
        assert!(ArrayMap::new(&d, 1).is_err());
        assert!(ArrayMap::new(&def(MapKind::Array, 0, 1), 1).is_err());
        assert!(ArrayMap::new(&def(MapKind::Array, 4, 0), 1).is_err());
        let mut d = def(MapKind::Array, 4, 1);
        d.key_size = 8;
        assert!(ArrayMap::new(&d, 1).is_err());
        assert!(ArrayMap::new(&def(MapKind::Array, 1 << 20, u32::MAX), 1).is_err());
    }

    #[test]
    fn per_thread_slots_are_separate() {
        let m = ArrayMap::new(&def(MapKind::PerThreadArray, 8, 2), 3).unwrap();
        m.update(&1u32.to_le_bytes(), &5u64.to_le_bytes(), 0, 2)
            .unwrap();
        assert_eq!(
            read(m.lookup(&1u32.to_le_bytes(), 2).unwrap(), 8),
            5u64.to_le_bytes()
        );
        assert_eq!(read(m.lookup(&1u32.to_le_bytes(), 0).unwrap(), 8), [0; 8]);
        assert!(m.lookup(&1u32.to_le_bytes(), 3).is_none());
        let e = m.entries();
        assert_eq!(e[1].1.len(), 24);
        assert_eq!(&e[1].1[16..], &5u64.to_le_bytes());
    }
}
