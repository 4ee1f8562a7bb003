//! The two lock words every shared map uses, both robust against a process that dies
//! while holding them, and the `/proc` liveness check they rely on.
//!
//! | word            | free / idle         | held                     | taken by                  | released by            |
//! |-----------------|---------------------|--------------------------|---------------------------|------------------------|
//! | [`PidLock`] u32 | `0`                 | holder's pid             | CAS `0 → pid` (acquire)   | store `0` (release)    |
//! | [`SeqLock`] u64 | `seq` even, pid `0` | `seq` odd, pid in bits 32..64 | CAS `even → odd\|pid` (acquire) + release fence | store `seq + 1` (release) |
//!
//! A waiter spins briefly, then yields; every [`CHECK_EVERY`] yields it reads
//! `/proc/<holder>/stat`. A holder that is gone (no such process, or a zombie) is
//! *dead*: a [`PidLock`] waiter steals the word with a CAS from the dead pid to its own, and a
//! [`SeqLock`] writer steals an odd word the same way (a reader instead closes the dead
//! write, making the sequence even again; the value the dead writer left may be torn, and
//! there is no better value to offer). Whatever the dead holder was protecting is in the
//! state it left it; each map documents what that means for it.
//!
//! A [`SeqLock`] reader completes only between two writes: under a continuous stream of
//! writes to one value it retries until the writers pause (writers never wait for readers).
//!
//! Limits: liveness is by pid only, so a pid reused by a new process between the death and
//! the check keeps the word held until that process exits. Threads of one process share
//! a pid: a thread that panics while holding a word is not detected (its process is alive).

use crate::sync::{AtomicU32, AtomicU64, Ordering, fence, spin};

/// Busy-wait iterations before a waiter starts yielding.
const SPINS: u32 = 64;
/// Yields between two liveness checks of the holder.
pub const CHECK_EVERY: u32 = 256;

/// This process's id, as stored in lock words.
pub fn my_pid() -> u32 {
    std::process::id()
}

pub use crate::region::pid_alive;

/// A waiting loop: spins, then yields, and says when to check the holder's liveness.
struct Backoff {
    n: u32,
}

impl Backoff {
    fn new() -> Self {
        Backoff { n: 0 }
    }

    /// Waits a little; returns true when the caller should check the holder.
    fn wait(&mut self) -> bool {
        self.n = self.n.wrapping_add(1);
        if self.n < SPINS {
            spin();
            false
        } else {
            std::thread::yield_now();
            (self.n - SPINS) % CHECK_EVERY == CHECK_EVERY - 1
        }
    }
}

/// A spin lock whose word (a `u32` in shared memory) holds the holder's pid.
pub struct PidLock<'a> {
    word: &'a AtomicU32,
}

/// Holds a [`PidLock`]; dropping it releases the lock.
pub struct PidGuard<'a> {
    word: &'a AtomicU32,
    /// Whether the lock was taken from a dead holder.
    pub stolen: bool,
}

impl<'a> PidLock<'a> {
    /// Wraps a lock word.
    pub fn new(word: &'a AtomicU32) -> Self {
        PidLock { word }
    }

    /// Takes the lock, stealing it from a dead holder.
    pub fn lock(&self) -> PidGuard<'a> {
        let me = my_pid();
        let mut backoff = Backoff::new();
        loop {
            let cur = self.word.load(Ordering::Relaxed);
            if cur == 0 {
                // ORDERING: acquire pairs with the release store of 0 in `PidGuard::drop`
                // (or the release CAS of a stealer's unlock), so the previous holder's writes
                // to the protected data are visible.
                if self
                    .word
                    .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return PidGuard {
                        word: self.word,
                        stolen: false,
                    };
                }
                continue;
            }
            if backoff.wait() && !pid_alive(cur) {
                // ORDERING: acquire, as above; the dead holder published nothing, but a
                // previous clean holder did, through the same word.
                if self
                    .word
                    .compare_exchange(cur, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    tracing::warn!(dead_pid = cur, "took a map lock from a dead process");
                    return PidGuard {
                        word: self.word,
                        stolen: true,
                    };
                }
            }
        }
    }

    /// Takes the lock and never releases it (for tests that kill the holder).
    pub fn lock_forever(&self) {
        std::mem::forget(self.lock());
    }
}

impl Drop for PidGuard<'_> {
    fn drop(&mut self) {
        // ORDERING: release publishes the protected writes; pairs with the acquire CAS in
        // `PidLock::lock` of the next holder.
        self.word.store(0, Ordering::Release);
    }
}

/// Sequence numbers in the low 32 bits; the writer's pid in the high 32 bits while odd.
const SEQ_MASK: u64 = 0xffff_ffff;

/// A sequence lock over one value: one writer at a time, readers retry.
pub struct SeqLock<'a> {
    word: &'a AtomicU64,
}

/// Holds a [`SeqLock`] for writing; dropping it ends the write.
pub struct SeqWriteGuard<'a> {
    word: &'a AtomicU64,
    seq: u64,
}

fn next_seq(seq: u64) -> u64 {
    (seq + 1) & SEQ_MASK
}

impl<'a> SeqLock<'a> {
    /// Wraps a sequence word.
    pub fn new(word: &'a AtomicU64) -> Self {
        SeqLock { word }
    }

    /// Starts a write: CAS even → odd with this pid, stealing from a dead writer.
    pub fn write(&self) -> SeqWriteGuard<'a> {
        let me = (my_pid() as u64) << 32;
        let mut backoff = Backoff::new();
        loop {
            let cur = self.word.load(Ordering::Relaxed);
            let seq = cur & SEQ_MASK;
            let steal = if seq & 1 == 0 {
                true
            } else {
                backoff.wait() && !pid_alive((cur >> 32) as u32)
            };
            if !steal {
                continue;
            }
            // From even `s` the write is `s + 1`; from a dead writer's odd `s` it is
            // `s + 2`, so readers that saw `s` retry.
            let odd = if seq & 1 == 0 {
                next_seq(seq)
            } else {
                next_seq(next_seq(seq))
            };
            // ORDERING: acquire pairs with the release store in `SeqWriteGuard::drop` of
            // the previous writer, so its value writes happen before ours.
            if self
                .word
                .compare_exchange(cur, odd | me, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                if seq & 1 == 1 {
                    tracing::warn!(
                        dead_pid = cur >> 32,
                        "took a value seqlock from a dead writer"
                    );
                }
                // ORDERING: release fence orders the odd sequence before the value stores
                // that follow; pairs with the acquire fence in `read`, so a reader that sees
                // any of our value stores also sees the odd sequence on its re-check.
                fence(Ordering::Release);
                return SeqWriteGuard {
                    word: self.word,
                    seq: odd,
                };
            }
            spin();
        }
    }

    /// Sets the word to an odd sequence without a CAS, for a sole owner (per-thread slots).
    pub fn write_owned(&self) -> SeqWriteGuard<'a> {
        let cur = self.word.load(Ordering::Relaxed) & SEQ_MASK;
        let odd = if cur & 1 == 0 { next_seq(cur) } else { cur };
        self.word
            .store(odd | ((my_pid() as u64) << 32), Ordering::Relaxed);
        // ORDERING: as in `write`: orders the odd word before the value stores; pairs with
        // the acquire fence in `read`.
        fence(Ordering::Release);
        SeqWriteGuard {
            word: self.word,
            seq: odd,
        }
    }

    /// Runs `copy` until it ran while no write was in progress, and returns its result.
    /// A write left open by a dead process is closed first.
    pub fn read<T>(&self, mut copy: impl FnMut() -> T) -> T {
        let mut backoff = Backoff::new();
        loop {
            // ORDERING: acquire pairs with the release store that ended the last write, so
            // the copy sees that write's value.
            let before = self.word.load(Ordering::Acquire);
            if before & 1 == 1 {
                if backoff.wait() && !pid_alive((before >> 32) as u32) {
                    let even = next_seq(before & SEQ_MASK);
                    // ORDERING: release, as an ended write; pairs with the acquire loads of
                    // other readers and writers. Failure means someone else moved on.
                    let _ = self.word.compare_exchange(
                        before,
                        even,
                        Ordering::Release,
                        Ordering::Relaxed,
                    );
                }
                continue;
            }
            let v = copy();
            // ORDERING: acquire fence pairs with the writer's release fence in `write`: if
            // the copy saw any store of a newer write, the load below sees its odd word.
            fence(Ordering::Acquire);
            if self.word.load(Ordering::Relaxed) == before {
                return v;
            }
            spin();
        }
    }
}

impl Drop for SeqWriteGuard<'_> {
    fn drop(&mut self) {
        // ORDERING: release publishes the value stores; pairs with the acquire load in
        // `SeqLock::read` and the acquire CAS of the next `SeqLock::write`.
        self.word.store(next_seq(self.seq), Ordering::Release);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A pid that certainly belonged to a process that has exited and been reaped.
    pub(crate) fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        assert!(!pid_alive(pid));
        pid
    }

    #[test]
    fn liveness() {
        assert!(pid_alive(my_pid()));
        assert!(!pid_alive(0));
        assert!(!pid_alive(dead_pid()));
    }

    #[test]
    fn pid_lock_excludes_and_steals_from_the_dead() {
        let w = AtomicU32::new(0);
        let l = PidLock::new(&w);
        {
            let g = l.lock();
            assert!(!g.stolen);
            assert_eq!(w.load(Ordering::Relaxed), my_pid());
        }
        assert_eq!(w.load(Ordering::Relaxed), 0);
        w.store(dead_pid(), Ordering::Relaxed);
        let g = l.lock();
        assert!(g.stolen);
        drop(g);
        assert_eq!(w.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn seqlock_counts_and_recovers() {
        let w = AtomicU64::new(0);
        let s = SeqLock::new(&w);
        drop(s.write());
        assert_eq!(w.load(Ordering::Relaxed), 2);
        // A dead writer left it odd: a writer steals (seq + 2), a reader closes it.
        let dead = (dead_pid() as u64) << 32;
        w.store(3 | dead, Ordering::Relaxed);
        drop(s.write());
        assert_eq!(w.load(Ordering::Relaxed), 6);
        w.store(7 | dead, Ordering::Relaxed);
        assert_eq!(s.read(|| 42), 42);
        assert_eq!(w.load(Ordering::Relaxed), 8);
        drop(s.write_owned());
        assert_eq!(w.load(Ordering::Relaxed), 10);
    }

    #[test]
    fn threads_exclude_each_other() {
        let w = AtomicU32::new(0);
        let counter = std::cell::UnsafeCell::new(0u64);
        struct Shared<'a>(&'a std::cell::UnsafeCell<u64>);
        // SAFETY: access to the cell is serialized by the lock under test.
        unsafe impl Sync for Shared<'_> {}
        let shared = Shared(&counter);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let shared = &shared;
                    for _ in 0..20_000 {
                        let _g = PidLock::new(&w).lock();
                        // SAFETY: the lock is held, so no other thread touches the cell.
                        unsafe { *shared.0.get() += 1 };
                    }
                });
            }
        });
        assert_eq!(counter.into_inner(), 40_000);
    }
}
