//! BPF ring buffer: many producers, one consumer, variable-length records.
//!
//! The data area is `max_entries` bytes (a power of two). Each record is an 8-byte header
//! followed by the data, padded to 8 bytes:
//!
//! ```text
//! header (u32 len | BUSY << 31 | DISCARD << 30, u32 pad) | data ... | pad to 8
//! ```
//!
//! | step     | who      | effect                                                   |
//! |----------|----------|----------------------------------------------------------|
//! | reserve  | producer | under the lock: room check, header = len \| BUSY, prod += |
//! | commit   | producer | header = len (submit) or len \| DISCARD, release store    |
//! | drain    | consumer | in order from cons: stop at BUSY, skip DISCARD, cons +=    |
//!
//! Linux maps the data area twice so a record may wrap; here a record that would cross the
//! end is preceded by a discarded padding record that fills the tail, so every record is
//! contiguous. Padding counts against free space until consumed. A full buffer makes
//! `reserve` return `None` and `output` return `-EAGAIN` (as Linux); a record larger than the
//! whole buffer gives `-E2BIG`.

use super::raw::RawBuf;
use super::{MapError, MapOps, round8};
use crate::program::MapDef;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// Header bit: record reserved, not yet committed.
pub const BUSY_BIT: u32 = 1 << 31;
/// Header bit: record discarded.
pub const DISCARD_BIT: u32 = 1 << 30;
/// Header size in bytes.
pub const HDR_SIZE: u64 = 8;
/// `BPF_RB_NO_WAKEUP | BPF_RB_FORCE_WAKEUP`: the only flags accepted.
pub const VALID_FLAGS: u64 = 3;

struct Pos {
    prod: u64,
    cons: u64,
}

/// A ring buffer map.
pub struct RingBuf {
    def: MapDef,
    size: u64,
    buf: RawBuf,
    pos: Mutex<Pos>,
}

impl RingBuf {
    /// Creates the data area.
    pub fn new(def: &MapDef) -> Result<RingBuf, MapError> {
        if def.key_size != 0 || def.value_size != 0 {
            return Err(MapError::Invalid(format!(
                "ring buffer `{}`: key_size and value_size must be 0, found {} and {}",
                def.name, def.key_size, def.value_size
            )));
        }
        let size = def.max_entries as u64;
        if size < 16 || !size.is_power_of_two() {
            return Err(MapError::Invalid(format!(
                "ring buffer `{}`: max_entries must be a power of two >= 16, found {size}",
                def.name
            )));
        }
        Ok(RingBuf {
            def: def.clone(),
            size,
            buf: RawBuf::zeroed(size)?,
            pos: Mutex::new(Pos { prod: 0, cons: 0 }),
        })
    }

    fn hdr(&self, off: u64) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.size);
        // SAFETY: `off` is an 8-aligned offset inside the buffer (callers mask positions), so
        // the u32 is aligned and in bounds; headers are only accessed atomically.
        unsafe { AtomicU32::from_ptr(self.buf.at(off as usize).as_ptr().cast::<u32>()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pos> {
        self.pos.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reserve_inner(&self, size: u64) -> Result<NonNull<u8>, MapError> {
        let total = round8(size.saturating_add(HDR_SIZE));
        if size >= DISCARD_BIT as u64 || total > self.size {
            return Err(MapError::TooBig(format!(
                "record of {size} bytes does not fit ring buffer `{}` of {} bytes",
                self.def.name, self.size
            )));
        }
        let mut p = self.lock();
        let off = p.prod & (self.size - 1);
        let pad = if off + total > self.size {
            self.size - off
        } else {
            0
        };
        if p.prod - p.cons + pad + total > self.size {
            return Err(MapError::Again);
        }
        if pad > 0 {
            self.hdr(off)
                .store((pad - HDR_SIZE) as u32 | DISCARD_BIT, Ordering::Release);
            p.prod += pad;
        }
        let off = p.prod & (self.size - 1);
        self.hdr(off)
            .store(size as u32 | BUSY_BIT, Ordering::Release);
        p.prod += total;
        Ok(self.buf.at((off + HDR_SIZE) as usize))
    }

    /// Bytes reserved and not yet consumed (including padding).
    pub fn used(&self) -> u64 {
        let p = self.lock();
        p.prod - p.cons
    }
}

impl MapOps for RingBuf {
    fn def(&self) -> &MapDef {
        &self.def
    }

    fn lookup(&self, _key: &[u8], _thread: usize) -> Option<NonNull<u8>> {
        None
    }

    fn update(&self, _k: &[u8], _v: &[u8], _f: u64, _t: usize) -> Result<(), MapError> {
        Err(MapError::NotSupported("update on a ring buffer".into()))
    }

    fn delete(&self, _key: &[u8]) -> Result<(), MapError> {
        Err(MapError::NotSupported("delete on a ring buffer".into()))
    }

    fn ringbuf_reserve(&self, size: u64) -> Option<NonNull<u8>> {
        self.reserve_inner(size).ok()
    }

    fn ringbuf_commit(&self, ptr: NonNull<u8>, discard: bool) {
        let start = self.buf.ptr().as_ptr() as usize;
        let a = ptr.as_ptr() as usize;
        // A zero-length record at the very end has its data pointer one past the buffer.
        if a < start + HDR_SIZE as usize || a > start + self.size as usize || !a.is_multiple_of(8) {
            return;
        }
        let h = self.hdr((a - start) as u64 - HDR_SIZE);
        let v = h.load(Ordering::Acquire);
        if v & BUSY_BIT == 0 {
            return;
        }
        let len = v & !(BUSY_BIT | DISCARD_BIT);
        h.store(
            if discard { len | DISCARD_BIT } else { len },
            Ordering::Release,
        );
    }

    fn ringbuf_output(&self, data: &[u8], flags: u64) -> Result<(), MapError> {
        if flags & !VALID_FLAGS != 0 {
            return Err(MapError::Invalid(format!(
                "ringbuf_output flags {flags:#x}"
            )));
        }
        let p = self.reserve_inner(data.len() as u64)?;
        // SAFETY: `p` has `data.len()` reserved bytes that no one else touches until commit.
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
        let mut p = self.lock();
        while p.cons < p.prod {
            let off = p.cons & (self.size - 1);
            let h = self.hdr(off).load(Ordering::Acquire);
            if h & BUSY_BIT != 0 {
                break;
            }
            let len = (h & !(BUSY_BIT | DISCARD_BIT)) as u64;
            if h & DISCARD_BIT == 0 {
                out.push(self.buf.read((off + HDR_SIZE) as usize, len as usize));
            }
            p.cons += round8(len + HDR_SIZE);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{MapKind, MapOrigin};

    fn rb(size: u32) -> RingBuf {
        RingBuf::new(&MapDef {
            name: "rb".into(),
            kind: MapKind::RingBuf,
            key_size: 0,
            value_size: 0,
            max_entries: size,
            flags: 0,
            origin: MapOrigin::Manual,
            init: None,
        })
        .unwrap()
    }

    fn fill(p: NonNull<u8>, b: &[u8]) {
        // SAFETY: p is a live reservation of at least b.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), p.as_ptr(), b.len()) }
    }

    #[test]
    fn order_busy_and_discard() {
        let r = rb(64);
        let a = r.ringbuf_reserve(3).unwrap();
        let b = r.ringbuf_reserve(5).unwrap();
        fill(a, b"abc");
        fill(b, b"hello");
        r.ringbuf_commit(b, false);
        // a is still busy: nothing can be consumed past it.
        assert!(r.drain_ringbuf().is_empty());
        r.ringbuf_commit(a, true);
        assert_eq!(r.drain_ringbuf(), vec![b"hello".to_vec()]);
        assert_eq!(r.used(), 0);
    }

    #[test]
    fn full_wrap_and_errors() {
        let r = rb(64);
        // 3 records of 8+8 bytes = 48, then 16 left.
        for i in 0..3u8 {
            r.ringbuf_output(&[i; 8], 0).unwrap();
        }
        r.ringbuf_output(&[9; 1], 0).unwrap();
        assert!(r.ringbuf_reserve(1).is_none());
        assert_eq!(r.ringbuf_output(&[1], 0).unwrap_err().errno(), -11);
        assert_eq!(r.ringbuf_output(&[0; 57], 0).unwrap_err().errno(), -7);
        assert_eq!(r.ringbuf_output(&[0; 1], 4).unwrap_err().errno(), -22);
        let got = r.drain_ringbuf();
        assert_eq!(got, vec![vec![0; 8], vec![1; 8], vec![2; 8], vec![9]]);
        // Now at position 64 == 0 mod 64; wrap: put 40 bytes at 0..48, then 24-byte record
        // needs padding of 16 at the end... position 48, total 32 > 16 left.
        r.ringbuf_output(&[4; 40], 0).unwrap();
        r.drain_ringbuf();
        r.ringbuf_output(&[5; 20], 0).unwrap();
        assert_eq!(r.drain_ringbuf(), vec![vec![5; 20]]);
        assert_eq!(r.used(), 0);
    }

    #[test]
    fn bad_defs_and_commit_of_garbage() {
        let mut d = rb(64).def.clone();
        d.max_entries = 100;
        assert!(RingBuf::new(&d).is_err());
        d.max_entries = 64;
        d.value_size = 4;
        assert!(RingBuf::new(&d).is_err());
        let r = rb(64);
        let mut x = 0u64;
        r.ringbuf_commit(NonNull::from(&mut x).cast(), false);
        assert!(r.drain_ringbuf().is_empty());
        assert!(r.update(&[], &[], 0, 0).is_err());
    }

    proptest::proptest! {
        /// Whatever is output successfully (or reserved and submitted) comes out of drain in
        /// order and intact; discarded records never do; an empty buffer takes any record
        /// that fits from position 0.
        #[test]
        fn fifo_and_intact(ops in proptest::collection::vec((0u8..4, 0usize..60, proptest::num::u8::ANY), 1..150)) {
            let r = rb(128);
            let mut model = std::collections::VecDeque::new();
            for (kind, len, byte) in ops {
                let data = vec![byte; len];
                match kind {
                    0 => {
                        if r.ringbuf_output(&data, 0).is_ok() {
                            model.push_back(data);
                        }
                    }
                    1 | 2 => {
                        if let Some(p) = r.ringbuf_reserve(len as u64) {
                            fill(p, &data);
                            r.ringbuf_commit(p, kind == 2);
                            if kind == 1 {
                                model.push_back(data);
                            }
                        }
                    }
                    _ => {
                        let got = r.drain_ringbuf();
                        let want: Vec<_> = model.drain(..).collect();
                        proptest::prop_assert_eq!(got, want);
                        proptest::prop_assert_eq!(r.used(), 0);
                    }
                }
            }
            let want: Vec<_> = model.drain(..).collect();
            proptest::prop_assert_eq!(r.drain_ringbuf(), want);
        }
    }
}
