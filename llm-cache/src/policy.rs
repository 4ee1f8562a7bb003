//! Cache policies behind one trait, [`Policy`]: LRU, LFU, static pinning, hybrid
//! (pinned + LRU) and Belady's offline bound.
//!
//! The model every policy shares: a GPU-side cache of `capacity` bytes holding whole
//! objects (dense `u32` ids, sizes from the trace's object table). Lookups come one at a
//! time ([`Policy::access`], with the lookup's position `t` in the sequence). A hit costs
//! nothing; a miss moves the object's bytes host→device (counted by `crate::sim`, not
//! here), and then the policy decides whether to keep it, evicting what it must. An object
//! larger than the whole capacity is never kept (it is streamed on every use). Nothing is
//! ever prefetched: the first touch of every object is a miss (compulsory).
//!
//! | policy | on a miss | cost per lookup |
//! |--------|-----------|-----------------|
//! | [`Lru`] | admit; evict least recently used until it fits | O(1): a doubly linked list in `Vec`s indexed by id |
//! | [`Lfu`] | admit; evict the resident with the fewest lookups *so far in the trace* (counts survive eviction: "perfect" LFU), ties by least recent use | O(log n): a min-heap with lazy deletion |
//! | [`Static`] | admit only the pinned set, chosen offline by [`pin_set`]; everything else is streamed | O(1) |
//! | [`Hybrid`] | pinned objects as `Static` within `fraction × capacity`; the rest of the capacity (including pinned budget left unused) is an LRU for the other objects | O(1) |
//! | [`Belady`] | evict the resident whose next use is furthest; *bypass* (don't admit) when the object's own next use is at least as far as every resident's and it does not fit in the free space | O(log n): a max-heap with lazy deletion over precomputed next uses ([`next_uses`]) |
//!
//! **Belady and variable sizes.** With equal-sized objects this is Belady's MIN with
//! bypass, which is optimal: no policy in this model gets more hits. With variable sizes,
//! exact optimal caching is NP-hard; the rule above (evict furthest-next-use first, as many
//! as needed, bypass as stated) is the classical heuristic, not a proven bound. A smarter
//! policy can beat it on bytes, and occasionally on hits, for traces with very uneven
//! sizes. Ties between residents that are never used again go to the higher id first.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// `next_uses` value of a lookup whose object is never looked up again.
pub const NEVER: u32 = u32::MAX;

/// A cache policy replaying one lookup sequence.
pub trait Policy: Send {
    /// Looks up `object` at position `t` of the sequence (positions come in order, from
    /// 0, and stay below `u32::MAX`); returns `true` on a hit. On a miss the policy admits
    /// the object or not.
    fn access(&mut self, t: usize, object: u32) -> bool;
    /// Bytes held now.
    fn resident_bytes(&self) -> u64;
}

/// The policies, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    /// Least recently used.
    Lru,
    /// Least frequently used (perfect LFU).
    Lfu,
    /// Pin the most-used objects that fit.
    Static,
    /// A pinned set plus LRU for the rest.
    Hybrid,
    /// Belady's furthest-next-use with bypass (offline).
    Belady,
}

impl PolicyKind {
    /// Every policy, in report order.
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::Lru,
        PolicyKind::Lfu,
        PolicyKind::Static,
        PolicyKind::Hybrid,
        PolicyKind::Belady,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Lru => "lru",
            PolicyKind::Lfu => "lfu",
            PolicyKind::Static => "static",
            PolicyKind::Hybrid => "hybrid",
            PolicyKind::Belady => "belady",
        }
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy `{0}`: expected lru, lfu, static, hybrid or belady")]
pub struct UnknownPolicy(pub String);

impl std::str::FromStr for PolicyKind {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

/// For each position `t` of `objects`, the position of the next lookup of the same object,
/// or [`NEVER`]. One backward pass. `objects.len()` must be below `u32::MAX`.
pub fn next_uses(objects: &[u32], n_objects: usize) -> Vec<u32> {
    let mut last = vec![NEVER; n_objects];
    let mut next = vec![NEVER; objects.len()];
    for (t, &o) in objects.iter().enumerate().rev() {
        next[t] = last[o as usize];
        last[o as usize] = t as u32;
    }
    next
}

/// The objects [`Static`] pins within `budget` bytes, in the order they were chosen.
///
/// Objects are ranked by lookup count (descending), ties by `bytes × count` (descending,
/// so among equally used objects the larger saves more traffic), then by id; walking that
/// ranking, each object is pinned if it still fits in what is left of the budget (a larger
/// one that does not fit is skipped and smaller ones further down may still be taken).
/// Objects never looked up are not pinned.
pub fn pin_set(counts: &[u64], sizes: &[u64], budget: u64) -> Vec<u32> {
    let mut order: Vec<u32> = (0..counts.len() as u32)
        .filter(|&i| counts[i as usize] > 0)
        .collect();
    order.sort_by_key(|&i| {
        let (c, s) = (counts[i as usize], sizes[i as usize]);
        (Reverse(c), Reverse(u128::from(c) * u128::from(s)), i)
    });
    let mut left = budget;
    let mut chosen = Vec::new();
    for i in order {
        let s = sizes[i as usize];
        if s <= left {
            left -= s;
            chosen.push(i);
        }
    }
    chosen
}

const NIL: u32 = u32::MAX;

/// Least recently used, O(1) per lookup.
///
/// Residents form a doubly linked list threaded through `prev`/`next` (indexed by object
/// id); `head` is the most recent, `tail` the next victim.
#[derive(Debug, Clone)]
pub struct Lru<'a> {
    sizes: &'a [u64],
    capacity: u64,
    used: u64,
    prev: Vec<u32>,
    next: Vec<u32>,
    resident: Vec<bool>,
    head: u32,
    tail: u32,
}

impl<'a> Lru<'a> {
    /// An empty cache of `capacity` bytes over objects of the given sizes.
    pub fn new(sizes: &'a [u64], capacity: u64) -> Self {
        let n = sizes.len();
        Lru {
            sizes,
            capacity,
            used: 0,
            prev: vec![NIL; n],
            next: vec![NIL; n],
            resident: vec![false; n],
            head: NIL,
            tail: NIL,
        }
    }

    fn unlink(&mut self, o: u32) {
        let (p, n) = (self.prev[o as usize], self.next[o as usize]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
    }

    fn push_front(&mut self, o: u32) {
        self.prev[o as usize] = NIL;
        self.next[o as usize] = self.head;
        if self.head == NIL {
            self.tail = o;
        } else {
            self.prev[self.head as usize] = o;
        }
        self.head = o;
    }
}

impl Policy for Lru<'_> {
    fn access(&mut self, _t: usize, o: u32) -> bool {
        if self.resident[o as usize] {
            if self.head != o {
                self.unlink(o);
                self.push_front(o);
            }
            return true;
        }
        let s = self.sizes[o as usize];
        if s > self.capacity {
            return false;
        }
        while self.used + s > self.capacity {
            let v = self.tail;
            self.unlink(v);
            self.resident[v as usize] = false;
            self.used -= self.sizes[v as usize];
        }
        self.push_front(o);
        self.resident[o as usize] = true;
        self.used += s;
        false
    }

    fn resident_bytes(&self) -> u64 {
        self.used
    }
}

/// Least frequently used, counting every lookup of the trace so far (counts are kept
/// when an object is evicted); ties go to the least recently used. O(log n) per lookup.
#[derive(Debug, Clone)]
pub struct Lfu<'a> {
    sizes: &'a [u64],
    capacity: u64,
    used: u64,
    count: Vec<u32>,
    last: Vec<u32>,
    resident: Vec<bool>,
    live: usize,
    /// `(count, last use, id)`, smallest first; an entry is current when its object is
    /// resident and its `last use` is the object's.
    heap: BinaryHeap<Reverse<(u32, u32, u32)>>,
}

impl<'a> Lfu<'a> {
    /// An empty cache of `capacity` bytes over objects of the given sizes.
    pub fn new(sizes: &'a [u64], capacity: u64) -> Self {
        let n = sizes.len();
        Lfu {
            sizes,
            capacity,
            used: 0,
            count: vec![0; n],
            last: vec![0; n],
            resident: vec![false; n],
            live: 0,
            heap: BinaryHeap::new(),
        }
    }

    fn push(&mut self, o: u32) {
        self.heap
            .push(Reverse((self.count[o as usize], self.last[o as usize], o)));
        if self.heap.len() > 2 * self.live + 64 {
            let (resident, last) = (&self.resident, &self.last);
            self.heap
                .retain(|Reverse((_, l, id))| resident[*id as usize] && last[*id as usize] == *l);
        }
    }
}

impl Policy for Lfu<'_> {
    fn access(&mut self, t: usize, o: u32) -> bool {
        let i = o as usize;
        self.count[i] = self.count[i].saturating_add(1);
        self.last[i] = t as u32;
        if self.resident[i] {
            self.push(o);
            return true;
        }
        let s = self.sizes[i];
        if s > self.capacity {
            return false;
        }
        while self.used + s > self.capacity {
            let Some(Reverse((_, l, v))) = self.heap.pop() else {
                unreachable!("bytes are in use, so something is resident");
            };
            if self.resident[v as usize] && self.last[v as usize] == l {
                self.resident[v as usize] = false;
                self.live -= 1;
                self.used -= self.sizes[v as usize];
            }
        }
        self.resident[i] = true;
        self.live += 1;
        self.used += s;
        self.push(o);
        false
    }

    fn resident_bytes(&self) -> u64 {
        self.used
    }
}

/// Pins a fixed set (see [`pin_set`]): a pinned object is loaded on its first lookup and
/// stays; every other lookup misses and is streamed.
#[derive(Debug, Clone)]
pub struct Static {
    pinned: Vec<bool>,
    loaded: Vec<bool>,
    used: u64,
    sizes: Vec<u64>,
}

impl Static {
    /// Pins `set` among `n_objects` objects of the given sizes.
    pub fn new(sizes: &[u64], set: &[u32]) -> Self {
        let mut pinned = vec![false; sizes.len()];
        for &o in set {
            pinned[o as usize] = true;
        }
        Static {
            loaded: vec![false; sizes.len()],
            pinned,
            used: 0,
            sizes: sizes.to_vec(),
        }
    }

    /// Pins what [`pin_set`] chooses for `counts` within `capacity`.
    pub fn for_capacity(sizes: &[u64], counts: &[u64], capacity: u64) -> Self {
        Static::new(sizes, &pin_set(counts, sizes, capacity))
    }

    /// Bytes pinned (whether loaded yet or not).
    pub fn pinned_bytes(&self) -> u64 {
        self.pinned
            .iter()
            .zip(&self.sizes)
            .filter(|(p, _)| **p)
            .map(|(_, s)| *s)
            .sum()
    }
}

impl Policy for Static {
    fn access(&mut self, _t: usize, o: u32) -> bool {
        let i = o as usize;
        if !self.pinned[i] {
            return false;
        }
        if self.loaded[i] {
            return true;
        }
        self.loaded[i] = true;
        self.used += self.sizes[i];
        false
    }

    fn resident_bytes(&self) -> u64 {
        self.used
    }
}

/// A pinned set within `fraction × capacity` (chosen as [`Static`] does), and an LRU over
/// the remaining bytes (`capacity − pinned bytes`) for every other object.
#[derive(Debug, Clone)]
pub struct Hybrid<'a> {
    pinned: Static,
    lru: Lru<'a>,
}

impl<'a> Hybrid<'a> {
    /// Splits `capacity`: `fraction` (0..=1) of it bounds the pinned set.
    pub fn new(sizes: &'a [u64], counts: &[u64], capacity: u64, fraction: f64) -> Self {
        let budget = ((capacity as f64) * fraction.clamp(0.0, 1.0)).floor() as u64;
        let pinned = Static::for_capacity(sizes, counts, budget.min(capacity));
        let rest = capacity - pinned.pinned_bytes();
        Hybrid {
            pinned,
            lru: Lru::new(sizes, rest),
        }
    }

    /// Bytes in the pinned set.
    pub fn pinned_bytes(&self) -> u64 {
        self.pinned.pinned_bytes()
    }
}

impl Policy for Hybrid<'_> {
    fn access(&mut self, t: usize, o: u32) -> bool {
        if self.pinned.pinned[o as usize] {
            self.pinned.access(t, o)
        } else {
            self.lru.access(t, o)
        }
    }

    fn resident_bytes(&self) -> u64 {
        self.pinned.resident_bytes() + self.lru.resident_bytes()
    }
}

/// Belady's furthest-next-use eviction with bypass, offline (see the module doc for what
/// it guarantees). O(log n) per lookup.
#[derive(Debug, Clone)]
pub struct Belady<'a> {
    sizes: &'a [u64],
    next_use: &'a [u32],
    capacity: u64,
    used: u64,
    /// Each resident's next use.
    key: Vec<u32>,
    resident: Vec<bool>,
    live: usize,
    /// `(next use, id)`, furthest first; current when resident with that key.
    heap: BinaryHeap<(u32, u32)>,
}

impl<'a> Belady<'a> {
    /// An empty cache; `next_use` comes from [`next_uses`] over the same sequence.
    pub fn new(sizes: &'a [u64], next_use: &'a [u32], capacity: u64) -> Self {
        let n = sizes.len();
        Belady {
            sizes,
            next_use,
            capacity,
            used: 0,
            key: vec![NEVER; n],
            resident: vec![false; n],
            live: 0,
            heap: BinaryHeap::new(),
        }
    }

    fn current(&self, (k, id): (u32, u32)) -> bool {
        self.resident[id as usize] && self.key[id as usize] == k
    }

    fn push(&mut self, o: u32) {
        self.heap.push((self.key[o as usize], o));
        if self.heap.len() > 2 * self.live + 64 {
            let (resident, key) = (&self.resident, &self.key);
            self.heap
                .retain(|(k, id)| resident[*id as usize] && key[*id as usize] == *k);
        }
    }

    /// The furthest current entry, dropping stale ones above it.
    fn furthest(&mut self) -> Option<(u32, u32)> {
        while let Some(&top) = self.heap.peek() {
            if self.current(top) {
                return Some(top);
            }
            self.heap.pop();
        }
        None
    }
}

impl Policy for Belady<'_> {
    fn access(&mut self, t: usize, o: u32) -> bool {
        let i = o as usize;
        let nu = self.next_use[t];
        if self.resident[i] {
            self.key[i] = nu;
            self.push(o);
            return true;
        }
        let s = self.sizes[i];
        if s > self.capacity {
            return false;
        }
        if self.used + s > self.capacity {
            match self.furthest() {
                Some((far, _)) if nu >= far => return false,
                _ => {}
            }
            while self.used + s > self.capacity {
                let Some((_, v)) = self.furthest() else {
                    unreachable!("bytes are in use, so something is resident");
                };
                self.heap.pop();
                self.resident[v as usize] = false;
                self.live -= 1;
                self.used -= self.sizes[v as usize];
            }
        }
        self.resident[i] = true;
        self.key[i] = nu;
        self.live += 1;
        self.used += s;
        self.push(o);
        false
    }

    fn resident_bytes(&self) -> u64 {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(p: &mut dyn Policy, seq: &[u32]) -> Vec<bool> {
        seq.iter()
            .enumerate()
            .map(|(t, &o)| p.access(t, o))
            .collect()
    }

    #[test]
    fn lru_evicts_least_recent() {
        let sizes = [1, 1, 1];
        let mut p = Lru::new(&sizes, 2);
        // 0 1 0 2 (evicts 1) 1 (miss, evicts 0) 0 (miss)
        assert_eq!(
            hits(&mut p, &[0, 1, 0, 2, 1, 0]),
            [false, false, true, false, false, false]
        );
        assert_eq!(p.resident_bytes(), 2);
    }

    #[test]
    fn belady_bypasses_far_objects() {
        let sizes = [1, 1, 1];
        let seq = [0, 1, 2, 0, 1];
        let nu = next_uses(&seq, 3);
        assert_eq!(nu, [3, 4, NEVER, NEVER, NEVER]);
        let mut p = Belady::new(&sizes, &nu, 2);
        // 2 is never used again: bypassed, so 0 and 1 both hit.
        assert_eq!(hits(&mut p, &seq), [false, false, false, true, true]);
    }

    #[test]
    fn pin_set_ranks_by_count_then_traffic() {
        // counts: 0:5, 1:5, 2:9, 3:1, 4:0
        let counts = [5, 5, 9, 1, 0];
        let sizes = [10, 20, 50, 1, 1];
        // 2 (count 9) first, then 1 (5×20 > 5×10), then 0, then 3; 4 is never used.
        assert_eq!(pin_set(&counts, &sizes, 1000), [2, 1, 0, 3]);
        // 60 bytes: 2 (50) fits, 1 (20) does not, 0 (10) does, 3 (1) does not.
        assert_eq!(pin_set(&counts, &sizes, 60), [2, 0]);
    }

    #[test]
    fn oversize_objects_are_streamed() {
        let sizes = [5, 1];
        let seq = [0, 0, 1, 1];
        let nu = next_uses(&seq, 2);
        for p in [
            &mut Lru::new(&sizes, 4) as &mut dyn Policy,
            &mut Lfu::new(&sizes, 4),
            &mut Belady::new(&sizes, &nu, 4),
        ] {
            assert_eq!(hits(p, &seq), [false, false, false, true]);
        }
    }

    #[test]
    fn policy_names_round_trip() {
        for k in PolicyKind::ALL {
            assert_eq!(k.name().parse::<PolicyKind>(), Ok(k));
        }
        assert!("fifo".parse::<PolicyKind>().is_err());
    }
}
