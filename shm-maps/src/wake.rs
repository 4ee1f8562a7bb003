//! Parking idle consumers and waking them, across processes, on the region's futex word.
//!
//! | step (consumer, [`park`])             | step (producer, [`wake`])            |
//! |---------------------------------------|--------------------------------------|
//! | `w = wake` ; `sleepers += 1` (SeqCst) | push job (release)                   |
//! | re-check the queue                    | fence(SeqCst); read `sleepers`       |
//! | `futex_wait(wake, w, timeout)`        | if > 0: `wake += 1`; `futex_wake`    |
//! | `sleepers -= 1`                       |                                      |
//!
//! Either the consumer's re-check sees the job, or the producer sees the sleeper and
//! changes `wake`, which makes the wait return at once: no wake-up is lost. The futex is
//! not process-private, so a client process wakes the service's workers directly.

use crate::layout::RegionHeader;
use crate::sync::{Ordering, fence};
use std::time::Duration;

/// Parks the caller until woken or `timeout` passes, unless `still_idle` (checked after
/// announcing the sleeper) says there is work.
pub fn park(hdr: &RegionHeader, timeout: Duration, still_idle: impl FnOnce() -> bool) {
    let w = hdr.wake.load(Ordering::Acquire);
    // ORDERING: SeqCst pairs with the producer's SeqCst fence in `wake`.
    hdr.sleepers.fetch_add(1, Ordering::SeqCst);
    if still_idle() {
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs() as _,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        // An error (EAGAIN: `wake` changed; EINTR; ETIMEDOUT) just means: look again.
        let _ = rustix::thread::futex::wait(
            &hdr.wake,
            rustix::thread::futex::Flags::empty(),
            w,
            Some(&ts),
        );
    }
    hdr.sleepers.fetch_sub(1, Ordering::SeqCst);
}

/// Wakes parked consumers after queueing work; one relaxed load when none sleeps.
pub fn wake(hdr: &RegionHeader, all: bool) {
    // ORDERING: pairs with the consumer's SeqCst increment of `sleepers` in `park`.
    fence(Ordering::SeqCst);
    if hdr.sleepers.load(Ordering::Relaxed) > 0 {
        // ORDERING: release so a woken consumer's acquire load of `wake` sees the jobs.
        hdr.wake.fetch_add(1, Ordering::Release);
        let _ = rustix::thread::futex::wake(
            &hdr.wake,
            rustix::thread::futex::Flags::empty(),
            if all { u32::MAX } else { 1 },
        );
    }
}
