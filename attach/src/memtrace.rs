//! The memory trace's layout (`trace --mem-trace FILE`), shared by the record blocks
//! [`crate::codegen::trace_block`] puts at each access, the shim's drain
//! ([`crate::shim::memtrace`]) and the reader (`bpftime-super memtrace`).
//!
//! ```text
//! device: STRIPES sub-rings of sub = cap/STRIPES records, one per SM (%smid % STRIPES), each
//!         with a CTL_BYTES control block: head @CTL_HEAD, tail @CTL_TAIL, drops @CTL_DROPS;
//!         after the records, 2 × sub u64 hole marks per sub-ring (TraceRing::marks_of)
//! file:   HEADER bytes (FILE_MAGIC, version 1, record size), then 32-byte Records
//! ```
//!
//! The protocol, per sub-ring. Producers (a warp's lanes together) read head and tail and,
//! when head + n - tail <= sub, take indices [h, h+n) by an atomic add on head; index q is
//! then written to slot q % sub, whose earlier record (q - sub < tail) the host has
//! drained. When the ring looks full the group drops, counts itself and leaves head alone,
//! so the head never runs away from the tail. Groups that passed the check together may
//! still take indices past tail + sub: such a lane does not write its record (its slot
//! still holds one the host has not read) but stores q in mark slot q % (2 × sub), and
//! counts itself dropped. The host walks indices from its tail: a complete record (both
//! sequence fields equal q) is kept, an index whose mark is q is skipped, anything else is
//! still being written and ends the walk until the next drain.
//!
//! A mark is never overwritten before the host read it. Every index the host has not
//! passed lies in [T, head), T the host's tail, and head <= T + sub + ov: a group adds its
//! lanes only after seeing head + n <= tail + sub with a tail no newer than T, and the
//! overshoot ov comes from groups that read the head before others moved it, at most one
//! per warp in flight: ov <= 32 lanes × 64 warps × 2 SMs sharing a sub-ring = 4096 <
//! MIN_SUB <= sub. The live indices thus span fewer than 2 × sub, and no two of them share
//! a mark slot. (One mark per record slot is not enough: the holes past a lap's end are
//! read only at the next drain, when the next lap's holes may already reuse their slots.)

/// Where memory-trace records go on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRing {
    /// Device address of the ring of 32-byte records.
    pub ring: u64,
    /// Device address of its control blocks, [`CTL_BYTES`] apart.
    pub ctl: u64,
    /// Records it holds (a power of two).
    pub cap: u64,
}

impl TraceRing {
    /// Records of one SM's sub-ring.
    pub fn sub(&self) -> u64 {
        (self.cap / STRIPES).max(1)
    }
    /// Hole marks of one sub-ring: 2 × [`TraceRing::sub`] (see the module's note).
    pub fn mark_slots(&self) -> u64 {
        2 * self.sub()
    }
    /// Device address of the hole marks of sub-ring `k` (the marks follow the records).
    pub fn marks_of(&self, k: u64) -> u64 {
        self.ring + self.cap * RECORD as u64 + k * self.mark_slots() * 8
    }
    /// Bytes of the device allocation: the records and the marks.
    pub fn bytes(&self) -> u64 {
        self.cap * RECORD as u64 + STRIPES * self.mark_slots() * 8
    }
}

/// Fewest records in one sub-ring (see the module's note on marks).
pub const MIN_SUB: u64 = 8192;
const _: () = assert!(2 * 64 * 32 < MIN_SUB && MIN_SUB.is_power_of_two());

/// First 8 bytes of a trace file.
pub const FILE_MAGIC: &[u8; 8] = b"BPFTMTR1";
/// Bytes of the file header: magic, version (u32), record size (u32), then zeros.
pub const HEADER: usize = 64;
/// Bytes of one record.
pub const RECORD: usize = 32;
/// Offsets in the control block.
pub const CTL_HEAD: u64 = 0;
/// Where the host writes how far it drained.
pub const CTL_TAIL: u64 = 64;
/// Records dropped because the ring was full.
pub const CTL_DROPS: u64 = 128;
/// Bytes of one sub-ring's control block.
pub const CTL_BYTES: usize = 256;
/// Sub-rings, one per SM (modulo): a power of two.
pub const STRIPES: u64 = 128;

/// One access, as the file holds it (little-endian).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Record {
    /// The address, in the instruction's space.
    pub addr: u64,
    /// The record's index in its SM's sub-ring (its sequence number there).
    pub idx: u64,
    /// The site id.
    pub site: u32,
    /// `size | op << 6 | space << 8 | (tid.x & 1023) << 10 | (tid.y & 1023) << 20`; space
    /// 0 for a generic address.
    pub info: u32,
    /// `%ctaid.x`.
    pub block: u32,
    /// The low 32 bits of `idx` again, written by the record's second store.
    pub idx_lo: u32,
}

const _: () = assert!(std::mem::size_of::<Record>() == RECORD);

impl Record {
    /// Parses 32 bytes.
    pub fn from_bytes(b: &[u8]) -> Record {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        Record {
            addr: u64_at(0),
            idx: u64_at(8),
            site: u32_at(16),
            info: u32_at(20),
            block: u32_at(24),
            idx_lo: u32_at(28),
        }
    }

    /// Bytes accessed.
    pub fn size(&self) -> u32 {
        self.info & 63
    }
    /// `ebpf::MemCtx` op code.
    pub fn op(&self) -> u32 {
        (self.info >> 6) & 3
    }
    /// `ebpf::MemCtx` space code, 0 for generic.
    pub fn space(&self) -> u32 {
        (self.info >> 8) & 3
    }
    /// `%tid.x` (low 10 bits).
    pub fn tid_x(&self) -> u32 {
        (self.info >> 10) & 1023
    }
    /// `%tid.y` (low 10 bits).
    pub fn tid_y(&self) -> u32 {
        (self.info >> 20) & 1023
    }
}

/// Walks a sub-ring's slots from index `from`: `records` holds the slots' bytes in index
/// order, `marks` (when read) their hole marks. Appends each complete record (both
/// sequence fields equal its index) to `out` and skips each index marked as a hole;
/// stops at the first index that is neither, a record still being written (or, without
/// `marks`, any incomplete one). Returns how many indices it passed.
pub fn take(records: &[u8], marks: Option<&[u8]>, from: u64, out: &mut Vec<u8>) -> usize {
    let mut passed = 0;
    for (k, c) in records.chunks_exact(RECORD).enumerate() {
        let want = from + k as u64;
        let r = Record::from_bytes(c);
        if r.idx == want && r.idx_lo == want as u32 {
            out.extend_from_slice(c);
        } else {
            let mark = marks.and_then(|m| m.get(k * 8..k * 8 + 8));
            if mark.is_none_or(|m| u64::from_le_bytes(m.try_into().unwrap_or([0; 8])) != want) {
                break;
            }
        }
        passed += 1;
    }
    passed
}

/// Copies a sub-ring's slots for [`drain_one`]: `first` and `n` in slots of a ring of
/// `slots` (the copy wraps), into `dst`. `false` when the copy failed.
pub type CopySlots<'a> = &'a mut dyn FnMut(Slots, usize, usize, &mut [u8]) -> bool;

/// Which slots [`drain_one`] copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slots {
    /// The records ([`TraceRing::sub`] slots of [`RECORD`] bytes).
    Records,
    /// The hole marks ([`TraceRing::mark_slots`] slots of 8 bytes).
    Marks,
}

/// One sub-ring's drain, apart from the copies themselves: from the host's `tail` and the
/// device's `head`, copies the slots it may pass (the marks only when a record is
/// incomplete), appends the complete records to `out` and returns how far the tail moves;
/// `None` when a copy failed. `stage` and `marks` are scratch buffers.
pub fn drain_one(
    t: &TraceRing,
    tail: u64,
    head: u64,
    copy: CopySlots<'_>,
    stage: &mut Vec<u8>,
    marks: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Option<usize> {
    out.clear();
    if head <= tail {
        return Some(0);
    }
    let sub = t.sub();
    // Indices past tail + sub can only be holes; the next drain reaches them.
    let n = (head - tail).min(sub) as usize;
    stage.resize(n * RECORD, 0);
    if !copy(Slots::Records, (tail % sub) as usize, n, stage) {
        return None;
    }
    let mut done = take(stage, None, tail, out);
    if done < n {
        // An incomplete record: a hole if its mark says so.
        let rest = n - done;
        marks.resize(rest * 8, 0);
        let at = ((tail + done as u64) % t.mark_slots()) as usize;
        if !copy(Slots::Marks, at, rest, marks) {
            return None;
        }
        done += take(
            &stage[done * RECORD..],
            Some(marks),
            tail + done as u64,
            out,
        );
    }
    Some(done)
}

/// The file header.
pub fn header() -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(FILE_MAGIC);
    h[8..12].copy_from_slice(&1u32.to_le_bytes());
    h[12..16].copy_from_slice(&(RECORD as u32).to_le_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(idx: u64, lo: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(0x1000u64.to_le_bytes());
        b.extend(idx.to_le_bytes());
        b.extend(7u32.to_le_bytes());
        b.extend((4u32 | 1 << 8 | 5 << 10).to_le_bytes());
        b.extend(3u32.to_le_bytes());
        b.extend(lo.to_le_bytes());
        b
    }

    #[test]
    fn a_record_being_written_stops_the_drain() {
        let mut b = Vec::new();
        b.extend(rec(10, 10));
        b.extend(rec(11, 11));
        b.extend(rec(12, u32::MAX)); // second half not yet written
        b.extend(rec(13, 13));
        let mut out = Vec::new();
        assert_eq!(take(&b, None, 10, &mut out), 2);
        assert_eq!(out, b[..64]);
        out.clear();
        assert_eq!(take(&b, None, 11, &mut out), 0);
        assert!(out.is_empty());
        let r = Record::from_bytes(&b[..32]);
        assert_eq!((r.size(), r.op(), r.space(), r.tid_x()), (4, 0, 1, 5));
        assert_eq!(&header()[..8], FILE_MAGIC);
    }

    fn marks(v: &[u64]) -> Vec<u8> {
        v.iter().flat_map(|m| m.to_le_bytes()).collect()
    }

    #[test]
    fn marked_holes_are_skipped_and_unmarked_ones_wait() {
        // Slots 20..25: a record, a hole (its slot still holds index 5's record, its mark
        // says 21), a record, an index still being written (stale record, stale mark), a
        // record.
        let mut b = Vec::new();
        for r in [rec(20, 20), rec(5, 5), rec(22, 22), rec(7, 7), rec(24, 24)] {
            b.extend(r);
        }
        let m = marks(&[u64::MAX, 21, 6, 23 - 16, u64::MAX]);
        let mut out = Vec::new();
        assert_eq!(take(&b, Some(&m), 20, &mut out), 3);
        assert_eq!(out.len(), 2 * RECORD);
        assert_eq!(Record::from_bytes(&out[32..]).idx, 22);
        // Its mark arrives: the walk goes on to the end.
        let m = marks(&[u64::MAX, 21, 6, 23, u64::MAX]);
        out.clear();
        assert_eq!(take(&b, Some(&m), 20, &mut out), 5);
        assert_eq!(out.len(), 3 * RECORD);
        // Without marks the hole ends the walk.
        out.clear();
        assert_eq!(take(&b, None, 20, &mut out), 1);
    }

    #[test]
    fn marks_follow_the_records() {
        let t = TraceRing {
            ring: 0x1000,
            ctl: 0,
            cap: STRIPES * MIN_SUB,
        };
        assert_eq!(t.sub(), MIN_SUB);
        assert_eq!(t.marks_of(0), 0x1000 + STRIPES * MIN_SUB * RECORD as u64);
        assert_eq!(t.marks_of(1) - t.marks_of(0), 2 * MIN_SUB * 8);
        assert_eq!(t.bytes(), STRIPES * MIN_SUB * (RECORD as u64 + 16));
    }

    /// The device side of the protocol as the record blocks run it
    /// ([`crate::codegen::trace_block`]), one step at a time, against [`drain_one`].
    struct Model {
        t: TraceRing,
        mark_slots: u64,
        head: u64,
        tail_dev: u64,
        records: Vec<(u64, u32)>,
        marks: Vec<u64>,
        drops: u64,
    }

    enum Warp {
        Idle,
        /// Read head and tail: (head, tail, lanes).
        Checked(u64, u64, u64),
        /// Took [q, q + left) with the tail it read.
        Writing(u64, u64, u64),
    }

    /// Runs `warps` producer warps of up to `lanes` lanes over `accesses` groups against
    /// a host that drains at random steps; returns (records kept, drops, produced, stuck).
    fn simulate(seed: u64, mark_slots_of: fn(&TraceRing) -> u64) -> (u64, u64, u64, bool) {
        let mut rng = seed;
        let mut next = move |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        let t = TraceRing {
            ring: 0,
            ctl: 0,
            cap: STRIPES * 16,
        };
        let (sub, mark_slots) = (t.sub(), mark_slots_of(&t));
        let mut m = Model {
            t,
            mark_slots,
            head: 0,
            tail_dev: 0,
            records: vec![(u64::MAX, u32::MAX); sub as usize],
            marks: vec![u64::MAX; mark_slots as usize],
            drops: 0,
        };
        let (nwarps, lanes) = (3, 4);
        let mut warps: Vec<Warp> = (0..nwarps).map(|_| Warp::Idle).collect();
        let (mut produced, mut groups) = (0u64, 0u64);
        let (mut tail_host, mut kept) = (0u64, 0u64);
        let (mut stage, mut mk, mut out) = (Vec::new(), Vec::new(), Vec::new());
        let mut drain = |m: &mut Model, tail_host: &mut u64, kept: &mut u64| {
            let (records, marks) = (&m.records, &m.marks);
            let mut copy = |which: Slots, first: usize, n: usize, dst: &mut [u8]| {
                for k in 0..n {
                    match which {
                        Slots::Records => {
                            let (idx, lo) = records[(first + k) % records.len()];
                            let mut r = vec![0u8; RECORD];
                            r[8..16].copy_from_slice(&idx.to_le_bytes());
                            r[28..32].copy_from_slice(&lo.to_le_bytes());
                            dst[k * RECORD..(k + 1) * RECORD].copy_from_slice(&r);
                        }
                        Slots::Marks => dst[k * 8..k * 8 + 8]
                            .copy_from_slice(&marks[(first + k) % marks.len()].to_le_bytes()),
                    }
                }
                true
            };
            let done = drain_one(
                &m.t, *tail_host, m.head, &mut copy, &mut stage, &mut mk, &mut out,
            )
            .unwrap();
            *kept += (out.len() / RECORD) as u64;
            *tail_host += done as u64;
            m.tail_dev = *tail_host;
        };
        while groups < 400 || warps.iter().any(|w| !matches!(w, Warp::Idle)) {
            if next(8) == 0 {
                drain(&mut m, &mut tail_host, &mut kept);
                continue;
            }
            let w = next(nwarps) as usize;
            warps[w] = match warps[w] {
                Warp::Idle if groups < 400 => {
                    groups += 1;
                    let n = 1 + next(lanes);
                    produced += n;
                    Warp::Checked(m.head, m.tail_dev, n)
                }
                Warp::Idle => Warp::Idle,
                Warp::Checked(h, tl, n) => {
                    if h + n - tl > sub {
                        m.drops += n;
                        Warp::Idle
                    } else {
                        let q = m.head;
                        m.head += n;
                        Warp::Writing(q, tl, n)
                    }
                }
                Warp::Writing(q, tl, left) => {
                    if q - tl < sub {
                        m.records[(q % sub) as usize] = (q, q as u32);
                    } else {
                        m.marks[(q % m.mark_slots) as usize] = q;
                        m.drops += 1;
                    }
                    if left > 1 {
                        Warp::Writing(q + 1, tl, left - 1)
                    } else {
                        Warp::Idle
                    }
                }
            };
        }
        for _ in 0..4 {
            drain(&mut m, &mut tail_host, &mut kept);
        }
        (kept, m.drops, produced, tail_host != m.head)
    }

    #[test]
    fn the_ring_protocol_loses_nothing_and_never_sticks() {
        // Interleavings of three warps and a draining host: every access is kept or counted
        // dropped, and the host's walk reaches the head, for every seed.
        for seed in 1..300 {
            let (kept, drops, produced, stuck) = simulate(seed, TraceRing::mark_slots);
            assert!(!stuck, "seed {seed}: the walk stopped short of the head");
            assert_eq!(kept + drops, produced, "seed {seed}");
            assert!(kept > 0 && drops > 0, "seed {seed}: {kept} {drops}");
        }
        // With one mark per record slot, a lap's holes are overwritten by the next lap's
        // before the host reads them, and the walk sticks for some interleaving.
        let stuck = (1..300).filter(|&s| simulate(s, |t| t.sub()).3).count();
        assert!(
            stuck > 0,
            "the model should catch the aliasing of one mark per slot"
        );
    }
}
