//! Model checking of the job queue's protocol with loom.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p shm-maps --test
//! loom_queue --release` (the test command does). Loom explores the interleavings of the
//! producers' and consumers' atomic operations and checks that every job is delivered once.
#![cfg(loom)]

use loom::sync::Arc;
use shm_maps::layout::{JobDesc, QueueHeader, QueueSlot};
use shm_maps::queue::JobQueue;

struct Owned {
    hdr: QueueHeader,
    slots: Vec<QueueSlot>,
}

fn owned(cap: usize) -> Arc<Owned> {
    Arc::new(Owned {
        hdr: QueueHeader::new(),
        slots: (0..cap).map(|i| QueueSlot::new(i as u64)).collect(),
    })
}

fn job(n: u64) -> JobDesc {
    JobDesc {
        n,
        ..Default::default()
    }
}

#[test]
fn two_producers_one_consumer_deliver_each_job_once() {
    loom::model(|| {
        let q = owned(2);
        let producers: Vec<_> = (0..2u64)
            .map(|p| {
                let q = q.clone();
                loom::thread::spawn(move || {
                    let jq = JobQueue::new(&q.hdr, &q.slots);
                    while jq.push(job(p + 1)).is_err() {
                        loom::thread::yield_now();
                    }
                })
            })
            .collect();
        let jq = JobQueue::new(&q.hdr, &q.slots);
        let mut got = Vec::new();
        while got.len() < 2 {
            match jq.pop() {
                Some(d) => got.push(d.n),
                None => loom::thread::yield_now(),
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        got.sort_unstable();
        assert_eq!(got, vec![1, 2]);
        assert!(jq.pop().is_none());
    });
}

#[test]
fn wraparound_with_a_full_queue_loses_nothing() {
    loom::model(|| {
        let q = owned(2);
        let q2 = q.clone();
        let producer = loom::thread::spawn(move || {
            let jq = JobQueue::new(&q2.hdr, &q2.slots);
            for i in 1..=3 {
                while jq.push(job(i)).is_err() {
                    loom::thread::yield_now();
                }
            }
        });
        let jq = JobQueue::new(&q.hdr, &q.slots);
        let mut got = Vec::new();
        while got.len() < 3 {
            let mut buf = [JobDesc::default(); 2];
            let n = jq.pop_batch(&mut buf);
            if n == 0 {
                loom::thread::yield_now();
            }
            got.extend(buf[..n].iter().map(|d| d.n));
        }
        producer.join().unwrap();
        assert_eq!(got, vec![1, 2, 3], "FIFO with one producer");
    });
}
