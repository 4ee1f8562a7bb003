//! The completion check word: the GPU publishes a one-record job's DONE together with its
//! fields, unordered, so a client takes a DONE completion only once every field it read
//! matches the check word; a client that reuses the slot clears the word, so the last job's
//! fields cannot pass for the new one's.

use shm_maps::layout::{Completion, completion_state};
use shm_maps::region::{CompletionData, OnStale};
use shm_maps::sync::Ordering;
use shm_maps::{RegionConfig, ShmRegion};
use std::mem::offset_of;

/// A ready region of its own (the tests run in parallel threads of one process).
fn region(tag: &str) -> ShmRegion {
    let r = ShmRegion::create(
        &format!("bpftime-c-{}-{tag}", std::process::id()),
        &RegionConfig {
            queue_capacity: 8,
            max_clients: 1,
            completions_per_client: 4,
            arena_size: 1 << 16,
            ..RegionConfig::default()
        },
        0o600,
        OnStale::Replace,
    )
    .expect("region");
    let _ = r.unlink();
    r
}

/// Writes the field at byte `off` of slot `i` as the GPU does: a plain store.
fn gpu_writes<T>(r: &ShmRegion, i: u32, off: usize, v: T) {
    let p = r.completion(i).unwrap() as *const Completion as *mut u8;
    // SAFETY: `off` is the offset of a field of type T inside slot `i` of the mapped table
    // (callers pass `offset_of!`); this single-threaded test is the only writer.
    unsafe { p.add(off).cast::<T>().write(v) }
}

fn outcome() -> CompletionData {
    CompletionData {
        prog_id: 3,
        prog_version: 2,
        records_done: 1,
        r0: 42,
        started_ns: 1_000,
        finished_ns: 2_500,
        gpu_hops: [700, 300],
        ..Default::default()
    }
}

#[test]
fn done_counts_only_once_every_field_matches_the_check() {
    let r = region("fields");
    r.begin_completion(0, 7, 100).unwrap();
    let want = outcome();
    // DONE arrives first, then the check, then the fields one by one; every read before the
    // last field lands sees no completion.
    r.completion(0)
        .unwrap()
        .state
        .store(completion_state::DONE_CHECKED, Ordering::Relaxed);
    assert!(r.read_completion(0).is_none(), "DONE without its check");
    gpu_writes(&r, 0, offset_of!(Completion, check), want.check());
    assert!(
        r.read_completion(0).is_none(),
        "the check before the fields"
    );
    let steps: [&dyn Fn(); 6] = [
        &|| gpu_writes(&r, 0, offset_of!(Completion, prog_id), want.prog_id),
        &|| {
            gpu_writes(
                &r,
                0,
                offset_of!(Completion, prog_version),
                want.prog_version,
            )
        },
        &|| {
            gpu_writes(
                &r,
                0,
                offset_of!(Completion, records_done),
                want.records_done,
            )
        },
        &|| gpu_writes(&r, 0, offset_of!(Completion, r0), want.r0),
        &|| gpu_writes(&r, 0, offset_of!(Completion, started_ns), want.started_ns),
        &|| gpu_writes(&r, 0, offset_of!(Completion, gpu_hops), want.gpu_hops),
    ];
    for (k, step) in steps.iter().enumerate() {
        assert!(r.read_completion(0).is_none(), "{k} of 7 fields arrived");
        step();
    }
    assert!(r.read_completion(0).is_none(), "finished_ns still missing");
    gpu_writes(&r, 0, offset_of!(Completion, finished_ns), want.finished_ns);
    let got = r.read_completion(0).expect("every field arrived");
    assert_eq!(
        got,
        CompletionData {
            tag: 7,
            submitted_ns: 100,
            ..want
        }
    );
}

#[test]
fn a_reused_slot_does_not_take_the_last_jobs_check() {
    let r = region("reuse");
    r.begin_completion(1, 1, 10).unwrap();
    r.finish_completion(1, &outcome()).unwrap();
    assert_eq!(r.read_completion(1).unwrap().r0, 42);
    // The next job in the slot: the GPU's DONE lands before anything else it writes. The
    // old fields and the old check would agree; the cleared check does not.
    r.begin_completion(1, 2, 20).unwrap();
    r.completion(1)
        .unwrap()
        .state
        .store(completion_state::DONE_CHECKED, Ordering::Relaxed);
    assert!(r.read_completion(1).is_none());
    // The service's own path (the CPU backend) writes the check with the fields.
    let next = CompletionData {
        r0: 43,
        ..outcome()
    };
    r.finish_completion(1, &next).unwrap();
    assert_eq!(r.read_completion(1).unwrap().r0, 43);
}

#[test]
fn the_check_is_never_zero_and_covers_every_word() {
    let base = [0u64; shm_maps::layout::COMPLETION_CHECK_WORDS];
    let h = shm_maps::layout::completion_check(&base);
    assert_ne!(h, 0, "a cleared word never vouches");
    for i in 0..base.len() {
        for bit in [0, 31, 32, 63] {
            let mut w = base;
            w[i] ^= 1 << bit;
            assert_ne!(
                shm_maps::layout::completion_check(&w),
                h,
                "word {i} bit {bit}"
            );
        }
    }
}
