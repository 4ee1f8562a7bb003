//! The data-arena allocator. Only the service allocates (clients ask it over the control
//! socket), so the allocator is ordinary process-local state; what is shared is the memory.
//!
//! First fit over a free list kept sorted by offset, coalescing on free. Each allocation
//! records its owner so that a dead client's buffers can be reclaimed.

use std::collections::BTreeMap;

/// Who owns an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    /// The service itself (map storage).
    Service,
    /// A client slot and the generation it had when it allocated.
    Client {
        /// Client slot.
        slot: u32,
        /// Generation of the slot.
        generation: u32,
    },
}

/// An arena allocation failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArenaError {
    /// Not enough contiguous free space.
    #[error("arena exhausted: {requested} bytes requested, largest free block is {largest}")]
    Exhausted {
        /// Bytes asked for.
        requested: u64,
        /// Largest free block.
        largest: u64,
    },
    /// Zero bytes, or more than the arena holds.
    #[error("bad allocation size {0}")]
    BadSize(u64),
    /// [`Arena::restore`] of an allocation that overlaps another, is misaligned or lies
    /// outside the arena.
    #[error(
        "cannot restore allocation [{off}, +{len}): it overlaps another, is misaligned or lies outside the arena"
    )]
    BadRestore {
        /// Offset.
        off: u64,
        /// Length.
        len: u64,
    },
    /// `free` of an offset that is not an allocation of this owner.
    #[error("offset {off} is not an allocation owned by {owner:?}")]
    NotAllocated {
        /// The offset given.
        off: u64,
        /// The owner that asked.
        owner: Owner,
    },
}

/// The allocator state.
#[derive(Debug)]
pub struct Arena {
    size: u64,
    align: u64,
    free: BTreeMap<u64, u64>,
    used: BTreeMap<u64, (u64, Owner)>,
}

impl Arena {
    /// An allocator over `[0, size)` with the given alignment.
    pub fn new(size: u64, align: u64) -> Self {
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        Arena {
            size,
            align: align.max(1),
            free,
            used: BTreeMap::new(),
        }
    }

    /// Allocates `len` bytes for `owner` and returns the offset.
    pub fn alloc(&mut self, len: u64, owner: Owner) -> Result<u64, ArenaError> {
        if len == 0 || len > self.size {
            return Err(ArenaError::BadSize(len));
        }
        let len = len.div_ceil(self.align) * self.align;
        let Some((&off, &flen)) = self.free.iter().find(|(_, l)| **l >= len) else {
            return Err(ArenaError::Exhausted {
                requested: len,
                largest: self.free.values().copied().max().unwrap_or(0),
            });
        };
        self.free.remove(&off);
        if flen > len {
            self.free.insert(off + len, flen - len);
        }
        self.used.insert(off, (len, owner));
        Ok(off)
    }

    /// Frees an allocation of `owner`.
    pub fn free(&mut self, off: u64, owner: Owner) -> Result<u64, ArenaError> {
        match self.used.get(&off) {
            Some(&(len, o)) if o == owner => {
                self.used.remove(&off);
                self.insert_free(off, len);
                Ok(len)
            }
            _ => Err(ArenaError::NotAllocated { off, owner }),
        }
    }

    /// Frees everything `pred` selects; returns the bytes reclaimed.
    pub fn free_where(&mut self, pred: impl Fn(Owner) -> bool) -> u64 {
        let victims: Vec<(u64, u64)> = self
            .used
            .iter()
            .filter(|(_, (_, o))| pred(*o))
            .map(|(off, (len, _))| (*off, *len))
            .collect();
        let mut total = 0;
        for (off, len) in victims {
            self.used.remove(&off);
            self.insert_free(off, len);
            total += len;
        }
        total
    }

    /// The owner and length of the allocation containing `[off, off + len)`, if one does.
    pub fn owner_of(&self, off: u64, len: u64) -> Option<(Owner, u64, u64)> {
        let (&start, &(alen, owner)) = self.used.range(..=off).next_back()?;
        (off.checked_add(len)? <= start + alen).then_some((owner, start, alen))
    }

    /// Every allocation as `(offset, length, owner)`, by offset: what a checkpoint keeps.
    pub fn allocations(&self) -> impl Iterator<Item = (u64, u64, Owner)> + '_ {
        self.used
            .iter()
            .map(|(&off, &(len, owner))| (off, len, owner))
    }

    /// An allocator over `[0, size)` holding exactly `allocations` (as listed by
    /// [`Arena::allocations`] before a crash). Refuses allocations that overlap, fall
    /// outside the arena or are misaligned, so a corrupt checkpoint cannot hand out
    /// memory twice.
    pub fn restore(
        size: u64,
        align: u64,
        allocations: impl IntoIterator<Item = (u64, u64, Owner)>,
    ) -> Result<Arena, ArenaError> {
        let mut a = Arena::new(size, align);
        let mut sorted: Vec<_> = allocations.into_iter().collect();
        sorted.sort_by_key(|&(off, _, _)| off);
        let mut end = 0u64;
        for (off, len, owner) in sorted {
            let bad = off < end
                || len == 0
                || off % a.align != 0
                || len % a.align != 0
                || off.checked_add(len).is_none_or(|e| e > size);
            if bad {
                return Err(ArenaError::BadRestore { off, len });
            }
            end = off + len;
            a.used.insert(off, (len, owner));
        }
        a.free.clear();
        let mut at = 0;
        for (&off, &(len, _)) in &a.used {
            if off > at {
                a.free.insert(at, off - at);
            }
            at = off + len;
        }
        if at < size {
            a.free.insert(at, size - at);
        }
        Ok(a)
    }

    /// Bytes in use.
    pub fn used_bytes(&self) -> u64 {
        self.used.values().map(|(l, _)| l).sum()
    }

    /// Arena size.
    pub fn size(&self) -> u64 {
        self.size
    }

    fn insert_free(&mut self, mut off: u64, mut len: u64) {
        if let Some((&poff, &plen)) = self.free.range(..off).next_back()
            && poff + plen == off
        {
            self.free.remove(&poff);
            off = poff;
            len += plen;
        }
        if let Some(&nlen) = self.free.get(&(off + len)) {
            self.free.remove(&(off + len));
            len += nlen;
        }
        self.free.insert(off, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const C: Owner = Owner::Client {
        slot: 1,
        generation: 1,
    };

    #[test]
    fn alloc_free_coalesce() {
        let mut a = Arena::new(1024, 64);
        let x = a.alloc(100, C).unwrap();
        let y = a.alloc(64, Owner::Service).unwrap();
        assert_eq!((x, y), (0, 128));
        assert_eq!(a.owner_of(10, 50), Some((C, 0, 128)));
        assert_eq!(a.owner_of(100, 64), None);
        assert!(a.free(y, C).is_err());
        assert_eq!(a.free(x, C).unwrap(), 128);
        assert_eq!(a.free_where(|o| o == Owner::Service), 64);
        assert_eq!(a.alloc(1024, C).unwrap(), 0);
        assert!(matches!(a.alloc(1, C), Err(ArenaError::Exhausted { .. })));
        assert!(matches!(a.alloc(0, C), Err(ArenaError::BadSize(0))));
    }

    #[test]
    fn restore_keeps_allocations_and_refuses_overlap() {
        let mut a = Arena::new(4096, 64);
        let x = a.alloc(100, C).unwrap();
        let y = a.alloc(64, Owner::Service).unwrap();
        let z = a.alloc(500, C).unwrap();
        a.free(y, Owner::Service).unwrap();
        let saved: Vec<_> = a.allocations().collect();
        let mut b = Arena::restore(4096, 64, saved.clone()).unwrap();
        assert_eq!(b.allocations().collect::<Vec<_>>(), saved);
        assert_eq!(b.used_bytes(), a.used_bytes());
        // The hole at `y` and the tail are free again, in the same order as before.
        assert_eq!(b.alloc(64, C).unwrap(), a.alloc(64, C).unwrap());
        assert_eq!(b.free(x, C).unwrap(), 128);
        assert_eq!(b.free(z, C).unwrap(), 512);
        let overlap = vec![(0, 128, C), (64, 64, C)];
        assert!(matches!(
            Arena::restore(4096, 64, overlap),
            Err(ArenaError::BadRestore { off: 64, .. })
        ));
        assert!(Arena::restore(4096, 64, vec![(4032, 128, C)]).is_err());
        assert!(Arena::restore(4096, 64, vec![(32, 64, C)]).is_err());
    }

    proptest! {
        #[test]
        fn never_overlaps_and_reclaims_everything(ops in proptest::collection::vec((1u64..300, any::<bool>()), 1..200)) {
            let mut a = Arena::new(8192, 64);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (len, free_one) in ops {
                if free_one && !live.is_empty() {
                    let (off, _) = live.remove(len as usize % live.len());
                    a.free(off, C).unwrap();
                } else if let Ok(off) = a.alloc(len, C) {
                    let alen = len.div_ceil(64) * 64;
                    for &(o, l) in &live {
                        prop_assert!(off + alen <= o || o + l <= off, "overlap");
                    }
                    prop_assert!(off + alen <= 8192);
                    live.push((off, alen));
                }
            }
            a.free_where(|_| true);
            prop_assert_eq!(a.used_bytes(), 0);
            prop_assert_eq!(a.alloc(8192, C).unwrap(), 0);
        }
    }
}
