//! BPF ring buffer in shared memory: many producers (processes, later GPU threads), one
//! consumer at a time, variable-length records.
//!
//! | offset     | field                          | writer                              | reader                        |
//! |------------|--------------------------------|-------------------------------------|-------------------------------|
//! | 0          | [`super::MapHeader`] (`slots` = size) | `init`                              | `attach`                      |
//! | 128        | `prod_lock` ([`PidLock`])      | producers                           | producers                     |
//! | 136        | `prod_pos` u64                 | producer holding `prod_lock` (release) | consumer (acquire)         |
//! | 256        | `cons_lock` ([`PidLock`])      | consumers                           | consumers                     |
//! | 264        | `cons_pos` u64                 | consumer holding `cons_lock` (release) | producers (acquire)        |
//! | 384 + off  | record header: u32 `len \| BUSY << 31 \| DISCARD << 30`, u32 reserver pid | producers | consumer |
//! | 392 + off  | record data, padded to 8 bytes | the reserving producer              | consumer                      |
//!
//! Positions grow forever; `off = pos & (size - 1)`, `size = max_entries` (a power of two).
//!
//! | step     | who      | effect                                                                 | ordering                               |
//! |----------|----------|------------------------------------------------------------------------|----------------------------------------|
//! | reserve  | producer | under `prod_lock`: room check against `cons_pos`, header = `len \| BUSY`, `prod_pos += round8(len + 8)` | `cons_pos` acquire; `prod_pos` release |
//! | commit   | producer | header = `len` (submit) or `len \| DISCARD`                             | release                                |
//! | drain    | consumer | from `cons_pos` to `prod_pos`, in order: stop at `BUSY`, skip `DISCARD`, `cons_pos +=` each record | header acquire; `cons_pos` release |
//!
//! **Wrap-around.** Linux maps the data area twice so a record may run past the end; a
//! process-independent layout cannot. A record that would cross the end is instead
//! preceded by a *padding record* (`DISCARD`, filling the rest of the area), so every record
//! is contiguous and starts at an 8-aligned offset. Padding counts against free space until
//! consumed. A record (header included) may take at most half the data area, else
//! `-E2BIG`: then, once the consumer has caught up, a record always fits at the current
//! offset or, after padding, at offset 0 (a larger one could fit neither and would wait
//! forever). Linux allows records up to the whole area. A full buffer makes `reserve` fail
//! and `output` return `-EAGAIN` (as Linux).
//!
//! **Robustness.** Both locks are pid locks (a dead holder loses them). A record reserved by
//! a process that died before committing it (its pid, in the header, is gone) is discarded
//! by the consumer instead of blocking the buffer forever.

use super::lock::{PidLock, my_pid, pid_alive};
use super::{
    MapError, MapOps, Storage, align_up, check_header, check_threads, invalid, publish,
    write_header,
};
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use ebpf::maps::MAX_MAP_BYTES;
use ebpf::program::MapDef;
use std::ptr::NonNull;

/// Magic of a ring buffer: `"BPFMRNG\x01"`.
pub const RINGBUF_MAGIC: u64 = u64::from_le_bytes(*b"BPFMRNG\x01");
/// The record is reserved and not yet committed.
pub const BUSY_BIT: u32 = 1 << 31;
/// The record was discarded (or is padding).
pub const DISCARD_BIT: u32 = 1 << 30;
/// Record header bytes.
pub const HDR_SIZE: u64 = 8;
/// Flags `bpf_ringbuf_output` accepts (`BPF_RB_NO_WAKEUP`, `BPF_RB_FORCE_WAKEUP`).
pub const VALID_FLAGS: u64 = 3;

const PROD_LOCK: u64 = 128;
const PROD_POS: u64 = 136;
const CONS_LOCK: u64 = 256;
const CONS_POS: u64 = 264;
/// Offset of the data area.
pub const DATA_OFF: u64 = 384;

fn geometry(def: &MapDef, threads: u32) -> Result<u64, MapError> {
    check_threads(def, threads)?;
    if def.key_size != 0 || def.value_size != 0 {
        return Err(invalid(
            def,
            format_args!(
                "key_size and value_size must be 0, found {} and {}",
                def.key_size, def.value_size
            ),
        ));
    }
    let size = def.max_entries as u64;
    if size < 16 || !size.is_power_of_two() {
        return Err(invalid(
            def,
            format_args!("max_entries must be a power of two >= 16, found {size}"),
        ));
    }
    if DATA_OFF + size > MAX_MAP_BYTES {
        return Err(MapError::TooBig(format!(
            "ring buffer `{}` of {size} bytes exceeds {MAX_MAP_BYTES} bytes",
            def.name
        )));
    }
    Ok(size)
}

/// Bytes a ring buffer of `def` needs.
pub fn layout_size(def: &MapDef, threads: u32) -> Result<u64, MapError> {
    Ok(DATA_OFF + geometry(def, threads)?)
}

/// Lays out a fresh, empty ring buffer at `base`.
///
/// # Safety
/// As [`super::init`].
pub unsafe fn init(
    base: NonNull<u8>,
    len: u64,
    def: &MapDef,
    threads: u32,
) -> Result<ShmRingBuf, MapError> {
    let size = geometry(def, threads)?;
    let st = Storage::new(def, base, len, DATA_OFF + size)?;
    // SAFETY: `init`'s contract: the range is ours alone until published. Zeroed memory is
    // an empty ring buffer: both locks free, both positions 0.
    unsafe { write_header(&st, def, 1, size) };
    publish(&st, RINGBUF_MAGIC);
    Ok(ShmRingBuf::new(def, st, size))
}

/// Attaches to a ring buffer laid out by [`init`].
///
/// # Safety
/// As [`super::attach`].
pub unsafe fn attach(
    base: NonNull<u8>,
    len: u64,
    def: &MapDef,
    threads: u32,
) -> Result<ShmRingBuf, MapError> {
    let size = geometry(def, threads)?;
    let st = Storage::new(def, base, len, DATA_OFF + size)?;
    check_header(&st, def, RINGBUF_MAGIC, 1, DATA_OFF + size)?;
    Ok(ShmRingBuf::new(def, st, size))
}

/// A ring buffer in shared memory.
pub struct ShmRingBuf {
    def: MapDef,
    pub(crate) st: Storage,
    size: u64,
}

impl ShmRingBuf {
    fn new(def: &MapDef, st: Storage, size: u64) -> ShmRingBuf {
        ShmRingBuf {
            def: def.clone(),
            st,
            size,
        }
    }

    fn prod_pos(&self) -> &AtomicU64 {
        self.st.u64_at(PROD_POS)
    }

    fn cons_pos(&self) -> &AtomicU64 {
        self.st.u64_at(CONS_POS)
    }

    /// The header word of the record at data offset `off` (8-aligned, inside the area).
    fn hdr(&self, off: u64) -> &AtomicU32 {
        self.st.u32_at(DATA_OFF + off)
    }

    /// The reserver-pid word of the record at data offset `off`.
    fn hdr_pid(&self, off: u64) -> &AtomicU32 {
        self.st.u32_at(DATA_OFF + off + 4)
    }

    /// Bytes reserved and not yet consumed (approximate while others run).
    pub fn used(&self) -> u64 {
        let prod = self.prod_pos().load(Ordering::Relaxed);
        let cons = self.cons_pos().load(Ordering::Relaxed);
        prod.saturating_sub(cons)
    }

    /// Data area size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    fn reserve_inner(&self, size: u64) -> Result<NonNull<u8>, MapError> {
        let total = align_up(size.saturating_add(HDR_SIZE), 8);
        if size >= DISCARD_BIT as u64 || total > self.size / 2 {
            return Err(MapError::TooBig(format!(
                "record of {size} bytes does not fit ring buffer `{}` of {} bytes \
                 (records are limited to half the data area, header included)",
                self.def.name, self.size
            )));
        }
        let _g = PidLock::new(self.st.u32_at(PROD_LOCK)).lock();
        let mut prod = self.prod_pos().load(Ordering::Relaxed);
        // ORDERING: acquire pairs with the consumer's release store of `cons_pos` in
        // `drain_ringbuf`: its reads of the records we are about to overwrite are done.
        let cons = self.cons_pos().load(Ordering::Acquire);
        let off = prod & (self.size - 1);
        let pad = if off + total > self.size {
            self.size - off
        } else {
            0
        };
        if prod - cons + pad + total > self.size {
            return Err(MapError::Again);
        }
        if pad > 0 {
            self.hdr_pid(off).store(0, Ordering::Relaxed);
            self.hdr(off)
                .store((pad - HDR_SIZE) as u32 | DISCARD_BIT, Ordering::Relaxed);
            prod += pad;
        }
        let off = prod & (self.size - 1);
        self.hdr_pid(off).store(my_pid(), Ordering::Relaxed);
        self.hdr(off)
            .store(size as u32 | BUSY_BIT, Ordering::Relaxed);
        // ORDERING: release publishes the headers written above (padding and BUSY); pairs
        // with the consumer's acquire load of `prod_pos` in `drain_ringbuf`.
        self.prod_pos().store(prod + total, Ordering::Release);
        Ok(self.st.at(DATA_OFF + off + HDR_SIZE))
    }
}

impl MapOps for ShmRingBuf {
    fn def(&self) -> &MapDef {
        &self.def
    }

    fn lookup(&self, _key: &[u8], _thread: usize) -> Option<NonNull<u8>> {
        None
    }

    fn update(&self, _k: &[u8], _v: &[u8], _f: u64, _t: usize) -> Result<(), MapError> {
        Err(MapError::NotSupported(format!(
            "update on ring buffer `{}`",
            self.def.name
        )))
    }

    fn delete(&self, _key: &[u8]) -> Result<(), MapError> {
        Err(MapError::NotSupported(format!(
            "delete on ring buffer `{}`",
            self.def.name
        )))
    }

    fn ringbuf_reserve(&self, size: u64) -> Option<NonNull<u8>> {
        self.reserve_inner(size).ok()
    }

    fn ringbuf_commit(&self, ptr: NonNull<u8>, discard: bool) {
        let start = self.st.at(DATA_OFF).as_ptr() as usize;
        let a = ptr.as_ptr() as usize;
        if a < start + HDR_SIZE as usize
            || a - start - HDR_SIZE as usize >= self.size as usize
            || !(a - start).is_multiple_of(8)
        {
            tracing::warn!(map = %self.def.name, "commit of a pointer outside the ring buffer");
            return;
        }
        let off = (a - start) as u64 - HDR_SIZE;
        let h = self.hdr(off);
        let v = h.load(Ordering::Relaxed);
        if v & BUSY_BIT == 0 || self.hdr_pid(off).load(Ordering::Relaxed) != my_pid() {
            tracing::warn!(map = %self.def.name, off, "commit of a record that is not reserved");
            return;
        }
        let len = v & !(BUSY_BIT | DISCARD_BIT);
        // ORDERING: release publishes the record's data; pairs with the consumer's acquire
        // load of the header in `drain_ringbuf`.
        h.store(
            if discard { len | DISCARD_BIT } else { len },
            Ordering::Release,
        );
    }

    fn ringbuf_output(&self, data: &[u8], flags: u64) -> Result<(), MapError> {
        if flags & !VALID_FLAGS != 0 {
            return Err(invalid(
                &self.def,
                format_args!("ringbuf_output flags {flags:#x}"),
            ));
        }
        let p = self.reserve_inner(data.len() as u64)?;
        // SAFETY: `p` starts `data.len()` reserved bytes inside the data area that nobody
        // else reads or writes until the commit below.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.as_ptr(), data.len()) };
        self.ringbuf_commit(p, false);
        Ok(())
    }

    fn regions(&self) -> Vec<(usize, usize)> {
        // Programs reach ring buffer memory only through live reservations, which the
        // interpreter tracks itself.
        Vec::new()
    }

    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        Vec::new()
    }

    fn drain_ringbuf(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let _g = PidLock::new(self.st.u32_at(CONS_LOCK)).lock();
        let mut cons = self.cons_pos().load(Ordering::Relaxed);
        loop {
            // ORDERING: acquire pairs with the release store of `prod_pos` in `reserve_inner`,
            // so the headers up to `prod` are visible.
            let prod = self.prod_pos().load(Ordering::Acquire);
            if cons >= prod {
                break;
            }
            let off = cons & (self.size - 1);
            // ORDERING: acquire pairs with the release store in `ringbuf_commit`, so the
            // record's data is visible.
            let v = self.hdr(off).load(Ordering::Acquire);
            if v & BUSY_BIT != 0 {
                let pid = self.hdr_pid(off).load(Ordering::Relaxed);
                if pid != my_pid() && !pid_alive(pid) {
                    let len = v & !(BUSY_BIT | DISCARD_BIT);
                    tracing::warn!(
                        map = %self.def.name,
                        dead_pid = pid,
                        "discarding a record reserved by a dead process"
                    );
                    // Relaxed: we only read the length back, and the producer is gone.
                    let _ = self.hdr(off).compare_exchange(
                        v,
                        len | DISCARD_BIT,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    continue;
                }
                break;
            }
            let len = (v & !(BUSY_BIT | DISCARD_BIT)) as u64;
            let total = align_up(len + HDR_SIZE, 8);
            if total > self.size - off {
                tracing::error!(
                    map = %self.def.name,
                    off,
                    len,
                    "corrupt ring buffer record header; dropping everything up to the producer"
                );
                cons = prod;
            } else {
                if v & DISCARD_BIT == 0 {
                    let mut rec = Vec::with_capacity(len as usize);
                    self.st
                        .load_bytes(DATA_OFF + off + HDR_SIZE, len as usize, &mut rec);
                    out.push(rec);
                }
                cons += total;
            }
            // ORDERING: release orders our reads of the record before producers reuse its
            // space; pairs with the acquire load of `cons_pos` in `reserve_inner`.
            self.cons_pos().store(cons, Ordering::Release);
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
    use std::sync::Arc;

    fn rb(size: u32) -> Arc<ShmMap> {
        Arc::new(make(&def(MapKind::RingBuf, 0, 0, size), 1))
    }

    fn inner(m: &ShmMap) -> &ShmRingBuf {
        let ShmMap::RingBuf(r) = m else { panic!() };
        r
    }

    #[test]
    fn output_reserve_commit_discard_in_order() {
        let m = rb(64);
        m.ringbuf_output(&[1, 2, 3], 0).unwrap();
        let p = m.ringbuf_reserve(4).unwrap();
        let q = m.ringbuf_reserve(2).unwrap();
        // SAFETY: both are live reservations of at least the written sizes.
        unsafe {
            p.as_ptr().copy_from([9, 9, 9, 9].as_ptr(), 4);
            q.as_ptr().copy_from([7, 7].as_ptr(), 2);
        }
        // `p` is still BUSY: the consumer stops in front of it.
        m.ringbuf_commit(q, false);
        assert_eq!(m.drain_ringbuf(), vec![vec![1, 2, 3]]);
        m.ringbuf_commit(p, true);
        assert_eq!(m.drain_ringbuf(), vec![vec![7, 7]]);
        assert_eq!(inner(&m).used(), 0);
        assert!(matches!(
            m.ringbuf_output(&[0; 4], 4),
            Err(MapError::Invalid(_))
        ));
        assert!(matches!(
            m.ringbuf_output(&[0; 57], 0),
            Err(MapError::TooBig(_))
        ));
        assert!(matches!(
            m.update(&[], &[], BPF_ANY, 0),
            Err(MapError::NotSupported(_))
        ));
        assert!(m.entries().is_empty());
        // A pointer that is not a reservation is ignored.
        m.ringbuf_commit(p, false);
        assert!(m.drain_ringbuf().is_empty());
    }

    #[test]
    fn full_then_wraps_with_padding() {
        let m = rb(64);
        // 3 records of 16 bytes (8 header + 8 data) fill 48 of 64.
        for i in 0..3u8 {
            m.ringbuf_output(&[i; 8], 0).unwrap();
        }
        // 24 bytes (16 + 8) do not fit in the 16 left.
        assert_eq!(m.ringbuf_output(&[3; 16], 0), Err(MapError::Again));
        assert_eq!(m.drain_ringbuf().len(), 3);
        // At offset 48, a 24-byte record would cross the end: padding of 16, then offset 0.
        m.ringbuf_output(&[4; 16], 0).unwrap();
        let r = inner(&m);
        assert_eq!(r.hdr(48).load(Ordering::Relaxed), 8 | DISCARD_BIT);
        assert_eq!(r.prod_pos().load(Ordering::Relaxed), 48 + 16 + 24);
        assert_eq!(r.hdr(0).load(Ordering::Relaxed), 16);
        assert_eq!(m.drain_ringbuf(), vec![vec![4; 16]]);
        // Records are limited to half the area: 8 + 24 bytes. At offset 24 (+24 bytes) the
        // largest one fits without padding; the next one needs padding at 56.
        assert!(matches!(
            m.ringbuf_output(&[5; 25], 0),
            Err(MapError::TooBig(_))
        ));
        m.ringbuf_output(&[5; 24], 0).unwrap();
        m.ringbuf_output(&[6; 24], 0).unwrap_err();
        assert_eq!(m.drain_ringbuf(), vec![vec![5; 24]]);
        m.ringbuf_output(&[6; 24], 0).unwrap();
        assert_eq!(r.hdr(56).load(Ordering::Relaxed), DISCARD_BIT);
        assert_eq!(m.drain_ringbuf(), vec![vec![6; 24]]);
    }

    /// A zero-length record in the last 8 bytes: its data pointer is the end of the area,
    /// and its commit must still count.
    #[test]
    fn empty_record_at_the_end() {
        let m = rb(64);
        m.ringbuf_output(&[1; 24], 0).unwrap();
        m.ringbuf_output(&[2; 16], 0).unwrap();
        let p = m.ringbuf_reserve(0).unwrap();
        assert_eq!(p, inner(&m).st.at(DATA_OFF + 64));
        m.ringbuf_commit(p, false);
        assert_eq!(m.drain_ringbuf(), vec![vec![1; 24], vec![2; 16], vec![]]);
    }

    #[test]
    fn bad_defs() {
        for bad in [
            def(MapKind::RingBuf, 0, 0, 24),
            def(MapKind::RingBuf, 0, 0, 8),
            def(MapKind::RingBuf, 4, 0, 64),
        ] {
            assert!(matches!(layout_size(&bad, 1), Err(MapError::Invalid(_))));
        }
        assert_eq!(
            layout_size(&def(MapKind::RingBuf, 0, 0, 4096), 1).unwrap(),
            384 + 4096
        );
    }

    #[test]
    fn dead_reserver_is_skipped() {
        let m = rb(64);
        let p = m.ringbuf_reserve(8).unwrap();
        m.ringbuf_output(&[1; 8], 0).unwrap();
        let r = inner(&m);
        let dead = super::super::lock::tests::dead_pid();
        r.hdr_pid(0).store(dead, Ordering::Relaxed);
        assert_eq!(m.drain_ringbuf(), vec![vec![1; 8]]);
        // The stale pointer no longer commits anything.
        m.ringbuf_commit(p, false);
        assert!(m.drain_ringbuf().is_empty());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Output(u8),
        Reserve(u8),
        Commit(usize, bool),
        Drain,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0u8..60).prop_map(Op::Output),
            (0u8..60).prop_map(Op::Reserve),
            (0usize..4, any::<bool>()).prop_map(|(i, d)| Op::Commit(i, d)),
            Just(Op::Drain),
        ]
    }

    proptest::proptest! {
        /// Against a model that knows nothing of positions or padding: records come out in
        /// reservation order, up to the first uncommitted one, without the discarded ones;
        /// and an empty buffer always takes a record of up to half its size.
        #[test]
        fn behaves_like_a_queue_of_records(ops in proptest::collection::vec(op(), 1..150)) {
            use proptest::prop_assert_eq;
            let m = rb(128);
            // Model: records in reservation order: (bytes, Some(discard) once committed).
            let mut model: std::collections::VecDeque<(u32, Vec<u8>, Option<bool>)> = Default::default();
            let mut pending: Vec<(NonNull<u8>, u32)> = Vec::new();
            let mut id = 0u32;
            let mut stamp = 0u8;
            for op in ops {
                match op {
                    Op::Output(n) => {
                        stamp = stamp.wrapping_add(1);
                        let rec = vec![stamp; n as usize];
                        match m.ringbuf_output(&rec, 0) {
                            Ok(()) => {
                                id += 1;
                                model.push_back((id, rec, Some(false)))
                            }
                            Err(MapError::Again) => {
                                proptest::prop_assert!(!model.is_empty(), "empty buffer refused {n} bytes");
                            }
                            Err(MapError::TooBig(_)) => proptest::prop_assert!(n as u64 + 8 > 64),
                            Err(e) => panic!("{e}"),
                        }
                    }
                    Op::Reserve(n) => {
                        stamp = stamp.wrapping_add(1);
                        let rec = vec![stamp; n as usize];
                        if let Some(p) = m.ringbuf_reserve(n as u64) {
                            // SAFETY: a live reservation of `n` bytes.
                            unsafe { p.as_ptr().copy_from(rec.as_ptr(), rec.len()) };
                            id += 1;
                            model.push_back((id, rec, None));
                            pending.push((p, id));
                        } else {
                            proptest::prop_assert!(!model.is_empty() || n as u64 + 8 > 64);
                        }
                    }
                    Op::Commit(i, discard) => {
                        if i < pending.len() {
                            let (p, rid) = pending.remove(i);
                            m.ringbuf_commit(p, discard);
                            let slot = model.iter_mut().find(|(r, _, _)| *r == rid).unwrap();
                            slot.2 = Some(discard);
                        }
                    }
                    Op::Drain => {
                        let mut want = Vec::new();
                        while let Some((_, _, Some(_))) = model.front() {
                            let (_, r, st) = model.pop_front().unwrap();
                            if st == Some(false) {
                                want.push(r);
                            }
                        }
                        prop_assert_eq!(m.drain_ringbuf(), want);
                    }
                }
            }
        }
    }

    #[test]
    fn threads_deliver_every_record_once_in_order() {
        let m = rb(256);
        const PER: u32 = 5_000;
        let producers: Vec<_> = (0..3u32)
            .map(|p| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..PER {
                        let len = 8 + (i % 13) as usize;
                        let mut rec = vec![(i % 251) as u8; len];
                        rec[..4].copy_from_slice(&p.to_ne_bytes());
                        rec[4..8].copy_from_slice(&i.to_ne_bytes());
                        if i % 7 == 3 {
                            // Reserve and discard; never delivered.
                            loop {
                                if let Some(q) = m.ringbuf_reserve(len as u64) {
                                    m.ringbuf_commit(q, true);
                                    break;
                                }
                                std::thread::yield_now();
                            }
                            continue;
                        }
                        while m.ringbuf_output(&rec, 0) == Err(MapError::Again) {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut next = [0u32; 3];
        let expected = |mut i: u32| {
            while i % 7 == 3 {
                i += 1;
            }
            i
        };
        let want: u32 = (0..PER).filter(|i| i % 7 != 3).count() as u32;
        let mut got = 0;
        while got < 3 * want {
            for rec in m.drain_ringbuf() {
                let p = u32::from_ne_bytes(rec[..4].try_into().unwrap()) as usize;
                let i = u32::from_ne_bytes(rec[4..8].try_into().unwrap());
                assert_eq!(i, expected(next[p]), "producer {p} out of order");
                assert_eq!(rec.len(), 8 + (i % 13) as usize);
                assert!(rec[8..].iter().all(|&b| b == (i % 251) as u8));
                next[p] = expected(i) + 1;
                got += 1;
            }
            std::thread::yield_now();
        }
        for t in producers {
            t.join().unwrap();
        }
        assert!(m.drain_ringbuf().is_empty());
        assert_eq!(inner(&m).used(), 0);
    }
}
