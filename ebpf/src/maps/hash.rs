//! Hash map: a preallocated value slab of `max_entries` slots plus a locked index.
//!
//! Values never move: a slot is taken from the free list on insert and returned on delete
//! (like the kernel's preallocated hash maps, a stale pointer still points at valid memory).
//! The index maps the key bytes to a slot; a `Mutex` makes it safe across threads.

use super::raw::RawBuf;
use super::{BPF_EXIST, BPF_NOEXIST, MapError, MapOps, round8};
use crate::program::MapDef;
use std::collections::HashMap as StdHashMap;
use std::ptr::NonNull;
use std::sync::Mutex;

/// Maximum key size, as in Linux.
pub const MAX_KEY_SIZE: u32 = 512;

struct Index {
    slots: StdHashMap<Box<[u8]>, u32>,
    free: Vec<u32>,
}

/// A fixed-capacity hash map.
pub struct HashMap {
    def: MapDef,
    stride: usize,
    values: RawBuf,
    index: Mutex<Index>,
}

impl HashMap {
    /// Creates the storage.
    pub fn new(def: &MapDef) -> Result<HashMap, MapError> {
        if def.key_size == 0 || def.key_size > MAX_KEY_SIZE {
            return Err(MapError::Invalid(format!(
                "hash map `{}`: key_size must be 1..={MAX_KEY_SIZE}, found {}",
                def.name, def.key_size
            )));
        }
        if def.value_size == 0 || def.value_size > super::MAX_VALUE_SIZE {
            return Err(MapError::Invalid(format!(
                "hash map `{}`: value_size must be 1..={}, found {}",
                def.name,
                super::MAX_VALUE_SIZE,
                def.value_size
            )));
        }
        if def.max_entries == 0 {
            return Err(MapError::Invalid(format!(
                "hash map `{}`: max_entries must be > 0",
                def.name
            )));
        }
        let stride = round8(def.value_size as u64);
        let total = stride
            .checked_mul(def.max_entries as u64)
            .ok_or_else(|| MapError::TooBig(format!("hash map `{}` too large", def.name)))?;
        let values = RawBuf::zeroed(total)?;
        Ok(HashMap {
            def: def.clone(),
            stride: stride as usize,
            values,
            index: Mutex::new(Index {
                slots: StdHashMap::with_capacity(def.max_entries.min(1 << 16) as usize),
                free: (0..def.max_entries).rev().collect(),
            }),
        })
    }

    fn key<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        key.get(..self.def.key_size as usize)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        // A panic while holding the lock cannot leave the index inconsistent in a way that
        // matters for memory safety, so recover from poisoning.
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl MapOps for HashMap {
    fn def(&self) -> &MapDef {
        &self.def
    }

    fn lookup(&self, key: &[u8], _thread: usize) -> Option<NonNull<u8>> {
        let key = self.key(key)?;
        let slot = *self.lock().slots.get(key)?;
        Some(self.values.at(slot as usize * self.stride))
    }

    fn update(&self, key: &[u8], value: &[u8], flags: u64, _thread: usize) -> Result<(), MapError> {
        if flags > BPF_EXIST {
            return Err(MapError::Invalid(format!("update flags {flags:#x}")));
        }
        let vs = self.def.value_size as usize;
        let (Some(key), Some(value)) = (self.key(key), value.get(..vs)) else {
            return Err(MapError::Invalid(format!(
                "key/value of {}/{} bytes, expected {}/{}",
                key.len(),
                value.len(),
                self.def.key_size,
                self.def.value_size
            )));
        };
        let mut idx = self.lock();
        let slot = match idx.slots.get(key) {
            Some(&s) => {
                if flags == BPF_NOEXIST {
                    return Err(MapError::Exists);
                }
                s
            }
            None => {
                if flags == BPF_EXIST {
                    return Err(MapError::NotFound);
                }
                let Some(s) = idx.free.pop() else {
                    return Err(MapError::TooBig(format!(
                        "hash map `{}` is full ({} entries)",
                        self.def.name, self.def.max_entries
                    )));
                };
                idx.slots.insert(key.into(), s);
                s
            }
        };
        self.values.write(slot as usize * self.stride, value);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<(), MapError> {
        let key = self
            .key(key)
            .ok_or_else(|| MapError::Invalid("short key".into()))?;
        let mut idx = self.lock();
        let slot = idx.slots.remove(key).ok_or(MapError::NotFound)?;
        idx.free.push(slot);
        Ok(())
    }

    fn regions(&self) -> Vec<(usize, usize)> {
        vec![(self.values.ptr().as_ptr() as usize, self.values.len())]
    }

    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let idx = self.lock();
        let mut out: Vec<_> = idx
            .slots
            .iter()
            .map(|(k, &s)| {
                (
                    k.to_vec(),
                    self.values
                        .read(s as usize * self.stride, self.def.value_size as usize),
                )
            })
            .collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{MapKind, MapOrigin};

    fn def(ks: u32, vs: u32, n: u32) -> MapDef {
        MapDef {
            name: "h".into(),
            kind: MapKind::Hash,
            key_size: ks,
            value_size: vs,
            max_entries: n,
            flags: 0,
            origin: MapOrigin::Manual,
            init: None,
        }
    }

    #[test]
    fn flags_capacity_and_delete() {
        let m = HashMap::new(&def(8, 4, 2)).unwrap();
        let k = |v: u64| v.to_le_bytes();
        assert!(m.lookup(&k(1), 0).is_none());
        assert_eq!(
            m.update(&k(1), &[1; 4], BPF_EXIST, 0).unwrap_err().errno(),
            -2
        );
        m.update(&k(1), &[1; 4], BPF_NOEXIST, 0).unwrap();
        assert_eq!(
            m.update(&k(1), &[2; 4], BPF_NOEXIST, 0)
                .unwrap_err()
                .errno(),
            -17
        );
        let p = m.lookup(&k(1), 0).unwrap();
        m.update(&k(1), &[3; 4], BPF_EXIST, 0).unwrap();
        // SAFETY: p covers 4 bytes of value storage.
        assert_eq!(unsafe { *p.as_ptr().add(3) }, 3);
        m.update(&k(2), &[4; 4], 0, 0).unwrap();
        assert_eq!(m.update(&k(3), &[5; 4], 0, 0).unwrap_err().errno(), -7);
        assert_eq!(m.delete(&k(3)).unwrap_err().errno(), -2);
        m.delete(&k(1)).unwrap();
        assert!(m.lookup(&k(1), 0).is_none());
        m.update(&k(3), &[5; 4], 0, 0).unwrap();
        assert_eq!(
            m.entries(),
            vec![(k(2).to_vec(), vec![4; 4]), (k(3).to_vec(), vec![5; 4])]
        );
        assert_eq!(m.update(&k(3), &[5; 4], 7, 0).unwrap_err().errno(), -22);
        assert_eq!(m.update(&[1, 2], &[5; 4], 0, 0).unwrap_err().errno(), -22);
        let (s, l) = m.regions()[0];
        let p = m.lookup(&k(3), 0).unwrap().as_ptr() as usize;
        assert!(p >= s && p + 4 <= s + l);
    }

    #[test]
    fn bad_defs_are_errors() {
        assert!(HashMap::new(&def(0, 4, 1)).is_err());
        assert!(HashMap::new(&def(4, 0, 1)).is_err());
        assert!(HashMap::new(&def(4, 4, 0)).is_err());
        assert!(HashMap::new(&def(1024, 4, 1)).is_err());
    }

    #[test]
    fn concurrent_inserts() {
        let m = std::sync::Arc::new(HashMap::new(&def(4, 4, 1000)).unwrap());
        let hs: Vec<_> = (0..4u32)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..200u32 {
                        let key = (t * 1000 + i).to_le_bytes();
                        m.update(&key, &i.to_le_bytes(), 0, 0).unwrap();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(m.entries().len(), 800);
    }

    proptest::proptest! {
        /// Random update/delete/lookup sequences agree with a model (`std` map + capacity).
        #[test]
        fn agrees_with_a_model(ops in proptest::collection::vec((0u8..4, 0u8..6, 0u64..3, proptest::num::u32::ANY), 1..200)) {
            let m = HashMap::new(&def(1, 4, 3)).unwrap();
            let mut model = std::collections::BTreeMap::new();
            for (kind, key, flags, val) in ops {
                let k = [key];
                match kind {
                    0 | 1 => {
                        let want = match (model.contains_key(&key), flags) {
                            (true, BPF_NOEXIST) => Err(-17),
                            (false, BPF_EXIST) => Err(-2),
                            (false, _) if model.len() == 3 => Err(-7),
                            _ => Ok(()),
                        };
                        let got = m.update(&k, &val.to_le_bytes(), flags, 0).map_err(|e| e.errno());
                        proptest::prop_assert_eq!(got, want);
                        if want.is_ok() {
                            model.insert(key, val);
                        }
                    }
                    2 => {
                        let want = if model.remove(&key).is_some() { Ok(()) } else { Err(-2) };
                        proptest::prop_assert_eq!(m.delete(&k).map_err(|e| e.errno()), want);
                    }
                    _ => {
                        let got = m.lookup(&k, 0).map(|p| {
                            // SAFETY: lookup pointers cover value_size (4) bytes.
                            u32::from_le_bytes(unsafe { *p.as_ptr().cast::<[u8; 4]>() })
                        });
                        proptest::prop_assert_eq!(got, model.get(&key).copied());
                    }
                }
            }
            let want: Vec<_> = model.iter().map(|(k, v)| (vec![*k], v.to_le_bytes().to_vec())).collect();
            proptest::prop_assert_eq!(m.entries(), want);
        }
    }
}
