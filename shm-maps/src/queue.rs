//! The bounded many-producer, many-consumer job queue (Vyukov's sequence protocol).
//!
//! | field            | writer                  | reader              | ordering                      |
//! |------------------|-------------------------|---------------------|-------------------------------|
//! | `tail`           | producers (CAS)         | producers           | relaxed; slot `seq` orders    |
//! | `head`           | consumers (CAS)         | consumers, `len`    | relaxed; slot `seq` orders    |
//! | `slot.desc`      | the producer owning pos | the consumer of pos | published by `seq`            |
//! | `slot.seq`       | producer: `pos + 1`     | consumers           | store release / load acquire  |
//! |                  | consumer: `pos + cap`   | producers           | store release / load acquire  |
//!
//! A producer may claim `k` consecutive positions with one CAS when all `k` slots are free
//! (batching); consumers likewise. `push` hands the job back on `Full`.
//!
//! Cross-process use is the same as in-process use: the structures hold no pointers and
//! every shared word is an atomic in the mapping. The GPU dispatcher follows the same
//! protocol with `ld.acquire.sys`/`st.release.sys`.

use crate::layout::{INLINE_WORDS, JobDesc, QueueHeader, QueueSlot, inline_words};
use crate::sync::Ordering;

/// The queue was full; the job comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("queue full ({capacity} jobs waiting)")]
pub struct QueueFull {
    /// The job that was not queued.
    pub desc: JobDesc,
    /// Queue capacity.
    pub capacity: u64,
}

/// What [`JobQueue::take_alone`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alone {
    /// The job at this position: the head is past it, its slot held until
    /// [`JobQueue::release`].
    Taken(u64, JobDesc),
    /// No job is ready at the first position not yet taken.
    Empty,
    /// The job at the first position not yet taken was declined; it stays queued, and the
    /// head names it.
    Declined,
}

/// A view of the queue in a mapped region.
#[derive(Clone, Copy)]
pub struct JobQueue<'a> {
    hdr: &'a QueueHeader,
    slots: &'a [QueueSlot],
    mask: u64,
}

impl<'a> JobQueue<'a> {
    /// Wraps a header and its slots. `slots.len()` must be a power of two.
    pub fn new(hdr: &'a QueueHeader, slots: &'a [QueueSlot]) -> Self {
        assert!(
            slots.len().is_power_of_two(),
            "queue capacity must be a power of two"
        );
        JobQueue {
            hdr,
            slots,
            mask: slots.len() as u64 - 1,
        }
    }

    /// Initializes the slot sequence numbers of a fresh queue (before anyone else sees it).
    pub fn init(&self) {
        self.hdr.head.store(0, Ordering::Relaxed);
        self.hdr.tail.store(0, Ordering::Relaxed);
        self.hdr.done.store(0, Ordering::Relaxed);
        for (i, s) in self.slots.iter().enumerate() {
            s.seq.store(i as u64, Ordering::Relaxed);
        }
        // ORDERING: pairs with the acquire loads of `seq` by the first producers and
        // consumers, which may run in other processes once the region is marked ready.
        crate::sync::fence(Ordering::Release);
    }

    /// Capacity in jobs.
    pub fn capacity(&self) -> u64 {
        self.mask + 1
    }

    /// Jobs waiting (approximate while others run).
    pub fn len(&self) -> u64 {
        let tail = self.hdr.tail.load(Ordering::Relaxed);
        let head = self.hdr.head.load(Ordering::Relaxed);
        tail.saturating_sub(head)
    }

    /// Counts `n` jobs of this queue as finished.
    pub fn count_done(&self, n: u64) {
        self.hdr.done.fetch_add(n, Ordering::Relaxed);
    }

    /// Recovery, with no consumer running and the taken jobs ended: every position below
    /// the head has finished, and so has every later one whose slot was taken (see
    /// [`JobQueue::skip_taken`]); the finished count is set to that.
    pub fn settle_done(&self) {
        let head = self.hdr.head.load(Ordering::Acquire);
        let past = self.scan_window().filter(|&p| self.taken_at(p)).count() as u64;
        self.hdr.done.store(head + past, Ordering::Relaxed);
    }

    /// Positions from the head up to the tail that recovery must look at: those a lap or
    /// more below the tail were taken (a producer reused their slot), so at most a lap.
    fn scan_window(&self) -> std::ops::Range<u64> {
        let head = self.hdr.head.load(Ordering::Acquire);
        let tail = self.hdr.tail.load(Ordering::Acquire);
        head.max(tail.saturating_sub(self.capacity()))..tail.max(head)
    }

    /// Whether the slot of `pos` has moved past `pos + 1`: a consumer took `pos` (and freed
    /// the slot, or a producer of a later lap filled it again).
    fn taken_at(&self, pos: u64) -> bool {
        // ORDERING: acquire pairs with the consumer's release of `seq`.
        self.slot(pos).seq.load(Ordering::Acquire) > pos + 1
    }

    /// Recovery, with no consumer running, where consumers take positions out of order
    /// (the GPU's dispatchers each own stripes of the queue, and the head they keep is the
    /// least of their positions): every position from the head up to the tail whose slot
    /// is full (`seq == pos + 1`), with its job. Each was either taken and not freed, or is
    /// still waiting; the caller tells them apart by their completions.
    pub fn full_past_head(&self) -> Vec<(u64, JobDesc)> {
        self.scan_window()
            .filter_map(|pos| self.peek(pos).map(|d| (pos, d)))
            .collect()
    }

    /// Recovery, with no consumer running: moves the head past the positions from it that
    /// were already taken (their slot's `seq` is past `pos + 1`), so that it names the
    /// first one a consumer may take again. Returns the new head.
    pub fn skip_taken(&self) -> u64 {
        let mut head = self.scan_window().start;
        let tail = self.hdr.tail.load(Ordering::Acquire);
        while head < tail && self.taken_at(head) {
            head += 1;
        }
        self.set_head(head);
        head
    }

    /// Jobs of this queue counted as finished.
    pub fn finished(&self) -> u64 {
        self.hdr.done.load(Ordering::Relaxed)
    }

    /// Jobs queued and not yet finished (approximate while others run): what a client
    /// routes by on a multi-GPU service.
    pub fn load(&self) -> u64 {
        let tail = self.hdr.tail.load(Ordering::Relaxed);
        tail.saturating_sub(self.hdr.done.load(Ordering::Relaxed))
    }

    /// Whether no job is waiting (approximate while others run).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Recovery after the only consumer died (the GPU worker): every position in the lap
    /// before `head` whose slot was taken but never freed (`seq == pos + 1`), with its job.
    /// Call only while no consumer runs.
    pub fn unreleased(&self) -> Vec<(u64, JobDesc)> {
        let head = self.hdr.head.load(Ordering::Acquire);
        let cap = self.capacity();
        (head.saturating_sub(cap)..head)
            .filter_map(|pos| {
                let s = self.slot(pos);
                // ORDERING: acquire pairs with the producer's release of `seq`.
                (s.seq.load(Ordering::Acquire) == pos + 1).then_some((pos, s.desc))
            })
            .collect()
    }

    /// The job at `pos` if its slot is full (`seq == pos + 1`). Recovery only.
    pub fn peek(&self, pos: u64) -> Option<JobDesc> {
        let s = self.slot(pos);
        // ORDERING: acquire pairs with the producer's release of `seq`.
        (s.seq.load(Ordering::Acquire) == pos + 1).then_some(s.desc)
    }

    /// Frees the slot of `pos` for the producer one lap later: by the consumer that took
    /// it with [`JobQueue::pop_batch_held`], or by recovery when that consumer died.
    pub fn release(&self, pos: u64) {
        // ORDERING: release pairs with the producer's acquire load of `seq`.
        self.slot(pos)
            .seq
            .store(pos + self.capacity(), Ordering::Release);
    }

    /// For a consumer that stands in while the usual ones are stopped, and is meanwhile
    /// the only one (the host during a GPU generation swap): the first job from the head
    /// on, passing over positions already taken (the GPU's dispatchers take positions out
    /// of order, so some past the head may be gone), if `accept` takes it. Nothing behind a
    /// declined job is taken: the stand-in keeps the queue's order. Positions it passes
    /// over or takes look taken to the usual consumers when they resume (their slot's
    /// `seq` is past `pos + 1` once released), which is how they skip them.
    pub fn take_alone(&self, accept: impl FnOnce(&JobDesc) -> bool) -> Alone {
        let mut pos = self.hdr.head.load(Ordering::Acquire);
        loop {
            // ORDERING: acquire pairs with the producer's release of `pos + 1` (and with
            // a consumer's release of a later value).
            let seq = self.slot(pos).seq.load(Ordering::Acquire);
            if seq > pos + 1 {
                pos += 1; // taken already
                continue;
            }
            if seq != pos + 1 {
                self.set_head(pos);
                return Alone::Empty;
            }
            // SAFETY: a published slot (`seq == pos + 1`) that no other consumer runs to
            // take meanwhile (the caller's contract); the producer does not touch it again
            // until this consumer releases it.
            let desc = unsafe { std::ptr::read_volatile(std::ptr::addr_of!(self.slot(pos).desc)) };
            if !accept(&desc) {
                self.set_head(pos);
                return Alone::Declined;
            }
            self.set_head(pos + 1);
            return Alone::Taken(pos, desc);
        }
    }

    /// The producers' position.
    pub fn tail(&self) -> u64 {
        self.hdr.tail.load(Ordering::Acquire)
    }

    /// The consumers' position.
    pub fn head(&self) -> u64 {
        self.hdr.head.load(Ordering::Acquire)
    }

    /// Moves the consumers' position to `to` (positions before it were taken). Recovery
    /// only, with no consumer running.
    pub fn set_head(&self, to: u64) {
        self.hdr.head.store(to, Ordering::Release);
    }

    fn slot(&self, pos: u64) -> &QueueSlot {
        &self.slots[(pos & self.mask) as usize]
    }

    /// Queues one job, or returns it when the queue is full.
    #[expect(
        clippy::result_large_err,
        reason = "the job comes back by value, with no allocation on the hot path"
    )]
    pub fn push(&self, desc: JobDesc) -> Result<(), QueueFull> {
        if self.push_batch(std::slice::from_ref(&desc)) == 1 {
            Ok(())
        } else {
            Err(QueueFull {
                desc,
                capacity: self.capacity(),
            })
        }
    }

    /// Queues as many of `descs` as fit, in order, claiming them with as few CASes as
    /// possible. Returns how many were queued.
    pub fn push_batch(&self, descs: &[JobDesc]) -> usize {
        self.push_batch_inline(descs, &[])
    }

    /// [`JobQueue::push_batch`], with each job's inline input words (`inline[i]` for
    /// `descs[i]`; jobs past `inline.len()` carry none). Only the
    /// [`crate::layout::inline_words`] of a job are copied.
    pub fn push_batch_inline(&self, descs: &[JobDesc], inline: &[[u64; INLINE_WORDS]]) -> usize {
        let mut done = 0;
        while done < descs.len() {
            let pos = self.hdr.tail.load(Ordering::Relaxed);
            // How many consecutive slots from `pos` are free for this lap?
            let want = (descs.len() - done) as u64;
            let mut free = 0;
            while free < want.min(self.capacity()) {
                // ORDERING: acquire pairs with the consumer's release store of
                // `pos + capacity`, so its read of the old descriptor is finished.
                let seq = self.slot(pos + free).seq.load(Ordering::Acquire);
                if seq != pos + free {
                    break;
                }
                free += 1;
            }
            if free == 0 {
                let seq = self.slot(pos).seq.load(Ordering::Acquire);
                if seq < pos {
                    return done; // full: the slot still holds the job of the previous lap
                }
                crate::sync::spin(); // another producer moved tail; retry
                continue;
            }
            if self
                .hdr
                .tail
                .compare_exchange_weak(pos, pos + free, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                crate::sync::spin();
                continue;
            }
            for i in 0..free {
                let slot = self.slot(pos + i);
                let mut d = descs[done + i as usize];
                let words = match inline.get(done + i as usize) {
                    Some(w) => *w,
                    None => {
                        // No inline copy given (a job queued again by recovery, say): the
                        // GPU reads the arena, which is the input of record anyway.
                        d.flags &= !crate::layout::job_flags::INLINE;
                        [0; INLINE_WORDS]
                    }
                };
                // SAFETY: the CAS on `tail` gave this producer exclusive ownership of the slot
                // at `pos + i` until it publishes `seq = pos + i + 1`; no consumer reads the
                // descriptor before that, and the previous consumer released it (acquire above).
                unsafe { std::ptr::write_volatile(std::ptr::addr_of!(slot.desc).cast_mut(), d) };
                for (k, w) in words.iter().take(inline_words(&d)).enumerate() {
                    // SAFETY: as above (the slot is this producer's until `seq` is stored).
                    unsafe {
                        std::ptr::write_volatile(std::ptr::addr_of!(slot.inline[k]).cast_mut(), *w)
                    };
                }
                slot.check.store(
                    crate::layout::slot_check(pos + i + 1, &d, &words),
                    Ordering::Relaxed,
                );
                // ORDERING: release publishes the descriptor and its check word; pairs with
                // the consumer's acquire load of `seq` in `pop_batch` (and the GPU's).
                slot.seq.store(pos + i + 1, Ordering::Release);
            }
            done += free as usize;
        }
        done
    }

    /// Takes one job, if any is ready.
    pub fn pop(&self) -> Option<JobDesc> {
        let mut out = [JobDesc::default()];
        (self.pop_batch(&mut out) == 1).then_some(out[0])
    }

    /// Takes up to `out.len()` consecutive ready jobs with one CAS. Returns how many.
    pub fn pop_batch(&self, out: &mut [JobDesc]) -> usize {
        self.take_batch(out, true).1
    }

    /// Like [`JobQueue::pop_batch`], but the slots stay held: the consumer hands each one
    /// back with [`JobQueue::release`] once it has started that job. Returns the first
    /// position and the count. A consumer that dies holding slots leaves its unstarted
    /// jobs where [`JobQueue::unreleased`] finds them, descriptors intact, so a recovering
    /// service can queue them again instead of losing them. The price: while a consumer
    /// runs a long job, the slots of the jobs behind it in its batch stay occupied, so
    /// producers see up to `batch - 1` fewer free slots per consumer (they were out of
    /// everyone else's reach in the consumer's batch either way).
    pub fn pop_batch_held(&self, out: &mut [JobDesc]) -> (u64, usize) {
        self.take_batch(out, false)
    }

    fn take_batch(&self, out: &mut [JobDesc], release: bool) -> (u64, usize) {
        loop {
            let pos = self.hdr.head.load(Ordering::Relaxed);
            let mut ready = 0;
            while (ready as usize) < out.len() {
                // ORDERING: acquire pairs with the producer's release store of `pos + 1`.
                let seq = self.slot(pos + ready).seq.load(Ordering::Acquire);
                if seq != pos + ready + 1 {
                    break;
                }
                ready += 1;
            }
            if ready == 0 {
                let seq = self.slot(pos).seq.load(Ordering::Acquire);
                if seq <= pos {
                    return (pos, 0); // empty, or the producer of `pos` has not published yet
                }
                crate::sync::spin(); // another consumer took `pos`; retry
                continue;
            }
            if self
                .hdr
                .head
                .compare_exchange_weak(pos, pos + ready, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                crate::sync::spin();
                continue;
            }
            for i in 0..ready {
                let slot = self.slot(pos + i);
                // SAFETY: the CAS on `head` gave this consumer exclusive ownership of the
                // published slot until it stores `pos + i + capacity`.
                out[i as usize] = unsafe { std::ptr::read_volatile(std::ptr::addr_of!(slot.desc)) };
                if release {
                    // ORDERING: release hands the slot back; pairs with the producer's
                    // acquire load in `push_batch` one lap later.
                    slot.seq.store(pos + i + self.capacity(), Ordering::Release);
                }
            }
            return (pos, ready as usize);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    struct Owned {
        hdr: Box<QueueHeader>,
        slots: Vec<QueueSlot>,
    }

    fn owned(cap: usize) -> Owned {
        let hdr = Box::new(QueueHeader::new());
        let slots = (0..cap).map(|i| QueueSlot::new(i as u64)).collect();
        let o = Owned { hdr, slots };
        JobQueue::new(&o.hdr, &o.slots).init();
        o
    }

    fn job(i: u64) -> JobDesc {
        JobDesc {
            n: i,
            ..Default::default()
        }
    }

    /// What a GPU consumer sees in a published slot: the check word matches the descriptor
    /// and the inline words it holds, which are the job's input bytes; a job pushed without
    /// inline words loses its INLINE flag (the arena stays its input).
    #[test]
    fn slots_carry_their_check_word_and_inline_input() {
        use crate::layout::{job_flags, slot_check};
        let o = owned(4);
        let q = JobQueue::new(&o.hdr, &o.slots);
        let mut d = JobDesc {
            n: 1,
            in_rec_size: 12,
            flags: job_flags::INLINE,
            tag: 5,
            ..Default::default()
        };
        let mut words = [0u64; INLINE_WORDS];
        words[0] = 0x1111;
        words[1] = 0x2222;
        words[2] = 0x3333; // past the 12 input bytes: not copied
        assert_eq!(q.push_batch_inline(&[d, d], &[words]), 2);
        let s0 = &o.slots[0];
        assert_eq!(s0.seq.load(Ordering::Acquire), 1);
        assert_eq!(s0.inline[..3], [0x1111, 0x2222, 0]);
        let mut copied = [0u64; INLINE_WORDS];
        copied[..2].copy_from_slice(&words[..2]);
        assert_eq!(
            s0.check.load(Ordering::Relaxed),
            slot_check(1, &s0.desc, &copied)
        );
        assert_eq!(s0.desc.flags, job_flags::INLINE);
        // The second job had no inline words: not inline, and checked as such.
        let s1 = &o.slots[1];
        assert_eq!(s1.desc.flags, 0);
        assert_eq!(
            s1.check.load(Ordering::Relaxed),
            slot_check(2, &s1.desc, &[0; INLINE_WORDS])
        );
        // A check word names its lap: the same job one lap later checks differently.
        d.flags = 0;
        assert_ne!(slot_check(1, &d, &copied), slot_check(5, &d, &copied));
    }

    #[test]
    fn fifo_full_and_empty() {
        let o = owned(4);
        let q = JobQueue::new(&o.hdr, &o.slots);
        assert!(q.pop().is_none());
        for i in 0..4 {
            q.push(job(i)).unwrap();
        }
        let e = q.push(job(9)).unwrap_err();
        assert_eq!(e.desc.n, 9);
        assert_eq!(q.len(), 4);
        for i in 0..4 {
            assert_eq!(q.pop().unwrap().n, i);
        }
        assert!(q.pop().is_none());
        // Wraps around.
        for lap in 0..10 {
            q.push(job(lap)).unwrap();
            assert_eq!(q.pop().unwrap().n, lap);
        }
    }

    #[test]
    fn a_stand_in_passes_over_taken_positions_and_stops_at_a_declined_job() {
        let o = owned(8);
        let q = JobQueue::new(&o.hdr, &o.slots);
        let jobs: Vec<_> = (0..6).map(job).collect();
        assert_eq!(q.push_batch(&jobs), 6);
        // Consumers that take positions out of order (the GPU's dispatchers) took 0 and 2
        // and left the head at 0, a lower bound of the positions not taken.
        q.release(0);
        q.release(2);
        // 0 is gone: passed over; 1 is taken.
        match q.take_alone(|_| true) {
            Alone::Taken(pos, d) => {
                assert_eq!((pos, d.n), (1, 1));
                // The head is past it before the job runs: recovery finds the slot below
                // the head, unreleased, if the stand-in dies now.
                assert_eq!(q.head(), 2);
                assert_eq!(q.unreleased().len(), 1);
                q.release(pos);
            }
            other => panic!("{other:?}"),
        }
        // 2 is gone; 3 is declined and stays, with the head on it.
        assert_eq!(q.take_alone(|d| d.n != 3), Alone::Declined);
        assert_eq!(q.head(), 3);
        assert_eq!(q.peek(3).map(|d| d.n), Some(3));
        // Accepted now; then 4, 5 and an empty queue.
        for want in 3..6 {
            match q.take_alone(|_| true) {
                Alone::Taken(pos, d) => {
                    assert_eq!((pos, d.n), (want, want));
                    q.release(pos);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(q.take_alone(|_| true), Alone::Empty);
        assert_eq!(q.head(), 6);
        // The usual consumers, resuming from 0, find every position taken.
        assert!((0..6).all(|p| q.taken_at(p)));
        // Producers reuse the freed slots a lap later; a refilled slot reads as taken for
        // its old position and ready for its new one.
        assert_eq!(q.push_batch(&jobs), 6);
        assert!(q.taken_at(0) && q.peek(8).is_some());
        assert_eq!(q.pop().map(|d| d.n), Some(0));
    }

    #[test]
    fn batches_are_partial_when_nearly_full() {
        let o = owned(8);
        let q = JobQueue::new(&o.hdr, &o.slots);
        let jobs: Vec<_> = (0..12).map(job).collect();
        assert_eq!(q.push_batch(&jobs), 8);
        let mut out = [JobDesc::default(); 5];
        assert_eq!(q.pop_batch(&mut out), 5);
        assert_eq!(
            out.iter().map(|d| d.n).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
        assert_eq!(q.push_batch(&jobs[8..]), 4);
        let mut rest = [JobDesc::default(); 16];
        assert_eq!(q.pop_batch(&mut rest), 7);
        assert_eq!(
            rest[..7].iter().map(|d| d.n).collect::<Vec<_>>(),
            vec![5, 6, 7, 8, 9, 10, 11]
        );
    }

    #[test]
    fn threads_deliver_every_job_exactly_once() {
        let o = Arc::new(owned(64));
        const PER: u64 = 20_000;
        const PRODUCERS: u64 = 3;
        let mut hs = Vec::new();
        for p in 0..PRODUCERS {
            let o = o.clone();
            hs.push(std::thread::spawn(move || {
                let q = JobQueue::new(&o.hdr, &o.slots);
                let mut i = 0;
                while i < PER {
                    let batch: Vec<_> = (i..(i + 3).min(PER)).map(|k| job(p * PER + k)).collect();
                    let n = q.push_batch(&batch);
                    i += n as u64;
                    if n == 0 {
                        std::thread::yield_now();
                    }
                }
            }));
        }
        let taken = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut cs = Vec::new();
        for _ in 0..2 {
            let o = o.clone();
            let taken = taken.clone();
            cs.push(std::thread::spawn(move || {
                let q = JobQueue::new(&o.hdr, &o.slots);
                let mut seen = Vec::new();
                let mut buf = [JobDesc::default(); 4];
                while taken.load(std::sync::atomic::Ordering::Relaxed) < PER * PRODUCERS {
                    let n = q.pop_batch(&mut buf);
                    if n == 0 {
                        std::thread::yield_now();
                    } else {
                        taken.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                        seen.extend(buf[..n].iter().map(|d| d.n));
                    }
                }
                seen
            }));
        }
        for h in hs {
            h.join().unwrap();
        }
        let mut all: Vec<u64> = cs.into_iter().flat_map(|c| c.join().unwrap()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..PER * PRODUCERS).collect::<Vec<_>>());
    }
}
