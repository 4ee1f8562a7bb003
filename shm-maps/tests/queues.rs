//! A region with several job queues (one per GPU of a `run --devices` service): each queue
//! is its own ring, counts its own load, and a header that claims an impossible number of
//! queues is refused by name.

use shm_maps::layout::{MAX_QUEUES, job_flags};
use shm_maps::region::OnStale;
use shm_maps::{JobDesc, RegionConfig, ShmRegion};

/// A ready region; with `keep_name` false its name is unlinked at once (the mapping stays),
/// so a test leaves nothing in /dev/shm.
fn region_named(tag: &str, queues: u32, keep_name: bool) -> ShmRegion {
    let r = ShmRegion::create(
        &format!("bpftime-q-{}-{tag}", std::process::id()),
        &RegionConfig {
            queue_capacity: 8,
            max_clients: 2,
            completions_per_client: 8,
            arena_size: 1 << 20,
            queues,
            ..RegionConfig::default()
        },
        0o600,
        OnStale::Replace,
    )
    .expect("region");
    r.set_ready();
    if !keep_name {
        let _ = r.unlink();
    }
    r
}

fn region(tag: &str, queues: u32) -> ShmRegion {
    region_named(tag, queues, false)
}

fn job(tag: u64) -> JobDesc {
    JobDesc {
        prog_id: 1,
        n: 1,
        tag,
        ..Default::default()
    }
}

#[test]
fn each_queue_is_its_own_ring_with_its_own_load() {
    let r = region("own", 3);
    assert_eq!(r.queue_count(), 3);
    assert!(r.queue_at(3).is_none());
    let stride = r.header().queue_stride();
    assert_eq!(stride, 384 + 8 * 256);
    for i in 0..3 {
        assert_eq!(r.queue_off(i), r.header().queue_off + i as u64 * stride);
    }
    let (q0, q2) = (r.queue_at(0).unwrap(), r.queue_at(2).unwrap());
    assert_eq!(q2.push_batch(&[job(1), job(2)]), 2);
    assert_eq!(q0.push_batch(&[job(3)]), 1);
    assert_eq!(
        (q0.len(), r.queue_at(1).unwrap().len(), q2.len()),
        (1, 0, 2)
    );
    let mut out = [JobDesc::default(); 4];
    assert_eq!(q2.pop_batch(&mut out), 2);
    assert_eq!((out[0].tag, out[1].tag), (1, 2), "queue 2's jobs, in order");
    assert_eq!(q0.pop_batch(&mut out), 1);
    assert_eq!(out[0].tag, 3);
    // Taken is not finished: the load falls only when the service counts a job done.
    assert_eq!((q0.load(), q2.load()), (1, 2));
    r.count_done(2, 1);
    assert_eq!((q0.load(), q2.load(), q2.finished()), (1, 1, 1));
    // A completion remembers its queue.
    r.begin_completion_on(3, 9, 0, 2).unwrap();
    assert_eq!(r.completion_queue(3), 2);
    r.begin_completion(4, 9, 0).unwrap();
    assert_eq!(r.completion_queue(4), 0);
}

#[test]
fn one_queue_is_the_default_and_the_count_is_capped() {
    assert_eq!(region("one", 1).queue_count(), 1);
    assert_eq!(region("zero", 0).queue_count(), 1, "0 means one queue");
    assert_eq!(region("many", 99).queue_count(), MAX_QUEUES);
}

#[test]
fn a_header_with_an_impossible_queue_count_is_refused() {
    for bad in [0u32, MAX_QUEUES + 1, 1000] {
        let r = region_named(&format!("bad{bad}"), 2, true);
        let h = r.header() as *const _ as *mut shm_maps::layout::RegionHeader;
        // SAFETY: test-only scribble on a region nobody else uses.
        unsafe { std::ptr::addr_of_mut!((*h).queue_count).write(bad) };
        match ShmRegion::open(r.name()) {
            Err(e) => assert!(e.to_string().contains("job queues"), "{bad}: {e}"),
            Ok(_) => panic!("a header claiming {bad} queues was accepted"),
        }
        r.unlink().ok();
    }
}

#[test]
fn the_device_bits_round_trip_and_leave_other_flags_alone() {
    let f = job_flags::on_device(job_flags::RESULTS | job_flags::INLINE, 3);
    assert_eq!(job_flags::device_of(f), Some(3));
    assert_eq!(
        f & !job_flags::DEVICE_MASK,
        job_flags::RESULTS | job_flags::INLINE
    );
    assert_eq!(job_flags::device_of(job_flags::RESULTS), None);
    assert_eq!(
        job_flags::device_of(job_flags::on_device(f, 0)),
        Some(0),
        "re-targeting replaces the device"
    );
    // Indices no service has stay out of range instead of wrapping to another GPU.
    for big in [255, 300, u32::MAX] {
        assert_eq!(
            job_flags::device_of(job_flags::on_device(0, big)),
            Some(254)
        );
    }
}
