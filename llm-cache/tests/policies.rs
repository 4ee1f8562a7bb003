//! The policies against naive reference implementations, known answers, and properties.

use llm_cache::policy::{PolicyKind, pin_set};
use llm_cache::sim::{SimConfig, Workload, simulate, simulate_one};
use llm_cache::synth;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------
// Reference implementations: obviously correct, O(n·C) or worse. Each returns, per lookup,
// whether it hit, under the rules of `llm_cache::policy`'s module doc.

fn ref_lru(sizes: &[u64], seq: &[u32], cap: u64) -> Vec<bool> {
    let mut order: Vec<u32> = Vec::new(); // most recent first
    let mut out = Vec::new();
    for &o in seq {
        if let Some(p) = order.iter().position(|&x| x == o) {
            order.remove(p);
            order.insert(0, o);
            out.push(true);
            continue;
        }
        out.push(false);
        let s = sizes[o as usize];
        if s > cap {
            continue;
        }
        while order.iter().map(|&x| sizes[x as usize]).sum::<u64>() + s > cap {
            order.pop();
        }
        order.insert(0, o);
    }
    out
}

fn ref_lfu(sizes: &[u64], seq: &[u32], cap: u64) -> Vec<bool> {
    let mut count = vec![0u64; sizes.len()];
    let mut last = vec![0usize; sizes.len()];
    let mut cached: Vec<u32> = Vec::new();
    let mut out = Vec::new();
    for (t, &o) in seq.iter().enumerate() {
        count[o as usize] += 1;
        last[o as usize] = t;
        if cached.contains(&o) {
            out.push(true);
            continue;
        }
        out.push(false);
        let s = sizes[o as usize];
        if s > cap {
            continue;
        }
        while cached.iter().map(|&x| sizes[x as usize]).sum::<u64>() + s > cap {
            let victim = *cached
                .iter()
                .min_by_key(|&&x| (count[x as usize], last[x as usize]))
                .unwrap();
            cached.retain(|&x| x != victim);
        }
        cached.push(o);
    }
    out
}

/// The pinned set, picked one at a time: the best-ranked object that still fits.
fn ref_pins(sizes: &[u64], seq: &[u32], budget: u64) -> Vec<u32> {
    let count = |o: u32| seq.iter().filter(|&&x| x == o).count() as u64;
    let mut chosen: Vec<u32> = Vec::new();
    let mut left = budget;
    loop {
        let best = (0..sizes.len() as u32)
            .filter(|o| !chosen.contains(o) && count(*o) > 0 && sizes[*o as usize] <= left)
            .max_by(|&a, &b| {
                let key = |o: u32| (count(o), count(o) as u128 * sizes[o as usize] as u128);
                key(a).cmp(&key(b)).then(b.cmp(&a))
            });
        match best {
            Some(o) => {
                left -= sizes[o as usize];
                chosen.push(o);
            }
            None => return chosen,
        }
    }
}

fn ref_static(sizes: &[u64], seq: &[u32], cap: u64) -> Vec<bool> {
    let pins = ref_pins(sizes, seq, cap);
    let mut seen = Vec::new();
    seq.iter()
        .map(|&o| {
            if !pins.contains(&o) {
                return false;
            }
            if seen.contains(&o) {
                return true;
            }
            seen.push(o);
            false
        })
        .collect()
}

fn ref_hybrid(sizes: &[u64], seq: &[u32], cap: u64, fraction: f64) -> Vec<bool> {
    let budget = (cap as f64 * fraction).floor() as u64;
    let pins = ref_pins(sizes, seq, budget);
    let pinned_bytes: u64 = pins.iter().map(|&o| sizes[o as usize]).sum();
    // The rest: LRU over the other objects' lookups, with what the pins leave.
    let rest: Vec<u32> = seq.iter().copied().filter(|o| !pins.contains(o)).collect();
    let mut lru = ref_lru(sizes, &rest, cap - pinned_bytes).into_iter();
    let mut seen = Vec::new();
    seq.iter()
        .map(|&o| {
            if pins.contains(&o) {
                if seen.contains(&o) {
                    true
                } else {
                    seen.push(o);
                    false
                }
            } else {
                lru.next().unwrap()
            }
        })
        .collect()
}

fn ref_belady(sizes: &[u64], seq: &[u32], cap: u64) -> Vec<bool> {
    let next = |o: u32, t: usize| -> u64 {
        seq[t + 1..]
            .iter()
            .position(|&x| x == o)
            .map_or(u64::MAX, |p| (t + 1 + p) as u64)
    };
    let mut cached: Vec<u32> = Vec::new();
    let mut out = Vec::new();
    for (t, &o) in seq.iter().enumerate() {
        if cached.contains(&o) {
            out.push(true);
            continue;
        }
        out.push(false);
        let s = sizes[o as usize];
        let used = |c: &Vec<u32>| c.iter().map(|&x| sizes[x as usize]).sum::<u64>();
        if s > cap {
            continue;
        }
        if used(&cached) + s > cap {
            // Furthest next use first; among equals (never used again) the higher id.
            let far = |c: &Vec<u32>| *c.iter().max_by_key(|&&x| (next(x, t), x)).unwrap();
            if next(o, t) >= next(far(&cached), t) {
                continue; // bypass
            }
            while used(&cached) + s > cap {
                let v = far(&cached);
                cached.retain(|&x| x != v);
            }
        }
        cached.push(o);
    }
    out
}

fn reference(kind: PolicyKind, sizes: &[u64], seq: &[u32], cap: u64, fraction: f64) -> Vec<bool> {
    match kind {
        PolicyKind::Lru => ref_lru(sizes, seq, cap),
        PolicyKind::Lfu => ref_lfu(sizes, seq, cap),
        PolicyKind::Static => ref_static(sizes, seq, cap),
        PolicyKind::Hybrid => ref_hybrid(sizes, seq, cap, fraction),
        PolicyKind::Belady => ref_belady(sizes, seq, cap),
    }
}

fn fast(w: &Workload, kind: PolicyKind, cap: u64, fraction: f64) -> Vec<bool> {
    let mut p = w.policy(kind, cap, fraction);
    w.objects
        .iter()
        .enumerate()
        .map(|(t, &o)| p.access(t, o))
        .collect()
}

/// Sizes, a lookup sequence over them, and a capacity.
fn small_trace(equal: bool) -> impl Strategy<Value = (Vec<u64>, Vec<u32>, u64)> {
    (1usize..9).prop_flat_map(move |n| {
        let sizes = if equal {
            Just(vec![1u64; n]).boxed()
        } else {
            proptest::collection::vec(0u64..12, n).boxed()
        };
        (
            sizes,
            proptest::collection::vec(0..n as u32, 0..80),
            1u64..40,
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn policies_match_their_references(
        (sizes, seq, cap) in small_trace(false),
        fraction in prop::sample::select(vec![0.0, 0.25, 0.5, 0.8, 1.0]),
    ) {
        let w = Workload::from_sequence(sizes.clone(), seq.clone()).unwrap();
        for kind in PolicyKind::ALL {
            let want = reference(kind, &sizes, &seq, cap, fraction);
            prop_assert_eq!(fast(&w, kind, cap, fraction), want.clone(), "{} at {}", kind, cap);
            // The counting in `sim` agrees with the per-lookup outcomes.
            let r = simulate_one(&w, kind, cap, fraction).unwrap();
            let hits = want.iter().filter(|h| **h).count() as u64;
            prop_assert_eq!(r.hits, hits);
            let hit_bytes: u64 = seq.iter().zip(&want).filter(|(_, h)| **h).map(|(o, _)| sizes[*o as usize]).sum();
            prop_assert_eq!(r.hit_bytes, hit_bytes);
            prop_assert_eq!(r.hit_bytes + r.bytes_moved, w.requested_bytes);
        }
    }

    #[test]
    fn belady_is_best_on_equal_sizes((sizes, seq, _cap) in small_trace(true)) {
        let w = Workload::from_sequence(sizes.clone(), seq).unwrap();
        let cfg = SimConfig {
            capacities: (1..=sizes.len() as u64 + 1).collect(),
            threads: Some(2),
            ..SimConfig::default()
        };
        let results = simulate(&w, &cfg).unwrap();
        for c in &cfg.capacities {
            let at: Vec<_> = results.iter().filter(|r| r.capacity_bytes == *c).collect();
            let best = at.iter().find(|r| r.policy == PolicyKind::Belady).unwrap().hits;
            for r in &at {
                prop_assert!(best >= r.hits, "belady {} < {} {} at {}", best, r.policy, r.hits, c);
            }
        }
    }

    #[test]
    fn stack_policies_are_monotone_in_capacity((sizes, seq, _cap) in small_trace(true)) {
        let w = Workload::from_sequence(sizes.clone(), seq).unwrap();
        for kind in [PolicyKind::Lru, PolicyKind::Belady] {
            let hits: Vec<u64> = (1..=sizes.len() as u64 + 1)
                .map(|c| simulate_one(&w, kind, c, 0.5).unwrap().hits)
                .collect();
            prop_assert!(hits.windows(2).all(|p| p[0] <= p[1]), "{}: {:?}", kind, hits);
        }
    }
}

/// A cyclic scan 0, 1, …, N−1 repeated R times over objects of one size, with room for C
/// of them (C < N):
///
/// * LRU misses every lookup: each object was evicted N−C lookups after its last use.
/// * Belady fills the cache with objects 0..C−1 on the first pass, then bypasses every
///   other object (its next use, N lookups away, is further than every resident's), so the
///   residents hit on each later pass: hits = C·(R−1). (Belady without bypass would keep
///   swapping and get about (C−1)/(N−1) of the post-warmup lookups; bypass does better
///   and is optimal: at most C objects can be held across a whole cycle.)
/// * static pins C objects (all counts tie at R, bytes tie, so ids 0..C−1): hits = C·(R−1).
/// * hybrid pins P = ⌊f·C⌋ objects; its LRU over the other N−P objects with room for C−P
///   is a smaller cyclic scan and never hits: hits = P·(R−1).
///
/// Compulsory misses are the N first touches; every other miss is a capacity miss.
#[test]
fn cyclic_scan_known_answers() {
    for (n, c, r, size) in [
        (10u32, 3u64, 5u64, 1u64),
        (7, 6, 4, 4096),
        (50, 1, 3, 100),
        (9, 4, 2, 7),
    ] {
        let seq: Vec<u32> = (0..r).flat_map(|_| 0..n).collect();
        let w = Workload::from_sequence(vec![size; n as usize], seq).unwrap();
        // A little slack that does not fit another object.
        let cap = c * size + size / 2;
        let hits = |k, f| simulate_one(&w, k, cap, f).unwrap().hits;
        let lookups = r * n as u64;
        assert_eq!(hits(PolicyKind::Lru, 0.5), 0, "lru n={n} c={c}");
        assert_eq!(
            hits(PolicyKind::Belady, 0.5),
            c * (r - 1),
            "belady n={n} c={c}"
        );
        assert_eq!(
            hits(PolicyKind::Static, 0.5),
            c * (r - 1),
            "static n={n} c={c}"
        );
        for f in [0.0, 0.5, 1.0] {
            let p = ((cap as f64 * f).floor() as u64 / size).min(c);
            assert_eq!(
                hits(PolicyKind::Hybrid, f),
                p * (r - 1),
                "hybrid f={f} n={n} c={c}"
            );
        }
        let b = simulate_one(&w, PolicyKind::Belady, cap, 0.5).unwrap();
        assert_eq!(b.bytes_moved, (lookups - c * (r - 1)) * size);
        assert!(!b.exceeds_working_set);
    }
}

/// With room for everything, every policy misses exactly the first touches.
#[test]
fn capacity_above_the_working_set_leaves_only_compulsory_misses() {
    let sizes = synth::log_uniform_sizes(50, 1, 1000, 7);
    let seq = synth::zipf_sequence(50, 5_000, 1.0, 8);
    let w = Workload::from_sequence(sizes, seq).unwrap();
    let cfg = SimConfig {
        capacities: vec![w.working_set_bytes, w.working_set_bytes * 3],
        ..SimConfig::default()
    };
    for r in simulate(&w, &cfg).unwrap() {
        assert_eq!(r.hits, w.len() as u64 - w.distinct_objects, "{}", r.policy);
        assert_eq!(r.bytes_moved, w.working_set_bytes, "{}", r.policy);
        assert!(r.exceeds_working_set);
    }
}

#[test]
fn lfu_beats_lru_on_zipf() {
    let seq = synth::zipf_sequence(2_000, 200_000, 0.9, 11);
    let w = Workload::from_sequence(vec![1; 2_000], seq).unwrap();
    for cap in [20, 100, 400] {
        let lru = simulate_one(&w, PolicyKind::Lru, cap, 0.5).unwrap().hits;
        let lfu = simulate_one(&w, PolicyKind::Lfu, cap, 0.5).unwrap().hits;
        let opt = simulate_one(&w, PolicyKind::Belady, cap, 0.5).unwrap().hits;
        assert!(lfu >= lru, "cap {cap}: lfu {lfu} < lru {lru}");
        assert!(opt >= lfu, "cap {cap}: belady {opt} < lfu {lfu}");
    }
}

#[test]
fn pin_set_matches_the_reference_ranking() {
    let sizes = synth::log_uniform_sizes(40, 1, 64, 3);
    let seq = synth::zipf_sequence(40, 2_000, 0.7, 4);
    let w = Workload::from_sequence(sizes.clone(), seq.clone()).unwrap();
    for budget in [0, 1, 10, 100, 500, 5_000] {
        assert_eq!(
            pin_set(&w.counts, &sizes, budget),
            ref_pins(&sizes, &seq, budget),
            "{budget}"
        );
    }
}

#[test]
fn bad_configurations_are_refused() {
    use llm_cache::sim::SimError;
    let w = Workload::from_sequence(vec![1, 2], vec![0, 1, 0]).unwrap();
    assert_eq!(
        simulate_one(&w, PolicyKind::Lru, 0, 0.5),
        Err(SimError::ZeroCapacity)
    );
    let cfg = |capacities: Vec<u64>, policies: Vec<PolicyKind>, f: f64| SimConfig {
        capacities,
        policies,
        hybrid_pinned: f,
        threads: None,
    };
    assert_eq!(
        simulate(&w, &cfg(vec![4, 0], PolicyKind::ALL.to_vec(), 0.5)),
        Err(SimError::ZeroCapacity)
    );
    assert_eq!(
        simulate(&w, &cfg(vec![], PolicyKind::ALL.to_vec(), 0.5)),
        Err(SimError::NoCapacity)
    );
    assert_eq!(
        simulate(&w, &cfg(vec![4], vec![], 0.5)),
        Err(SimError::NoPolicy)
    );
    assert_eq!(
        simulate(&w, &cfg(vec![4], PolicyKind::ALL.to_vec(), 1.5)),
        Err(SimError::BadFraction(1.5))
    );
    assert!(matches!(
        Workload::from_sequence(vec![1], vec![0, 3]),
        Err(SimError::UnknownObject {
            index: 1,
            object: 3,
            ..
        })
    ));
}

/// The parallel driver returns the same results as one run at a time, in policy-major order.
#[test]
fn parallel_results_equal_sequential_ones() {
    let sizes = synth::log_uniform_sizes(300, 10, 10_000, 5);
    let seq = synth::zipf_sequence(300, 20_000, 0.8, 6);
    let w = Workload::from_sequence(sizes, seq).unwrap();
    let cfg = SimConfig {
        capacities: vec![5_000, 50_000, 500_000],
        threads: Some(3),
        hybrid_pinned: 0.3,
        ..SimConfig::default()
    };
    let par = simulate(&w, &cfg).unwrap();
    let mut k = 0;
    for p in &cfg.policies {
        for c in &cfg.capacities {
            assert_eq!(par[k], simulate_one(&w, *p, *c, 0.3).unwrap());
            k += 1;
        }
    }
    assert_eq!(k, par.len());
}

/// Long sequences with few objects: the lazy heaps of LFU and Belady fill with stale
/// entries and get compacted many times.
#[test]
fn long_sequences_match_references() {
    let sizes = synth::log_uniform_sizes(12, 1, 40, 9);
    let seq = synth::zipf_sequence(12, 1_500, 0.6, 10);
    let w = Workload::from_sequence(sizes.clone(), seq.clone()).unwrap();
    for cap in [10, 45, 90, 200] {
        for kind in PolicyKind::ALL {
            assert_eq!(
                fast(&w, kind, cap, 0.4),
                reference(kind, &sizes, &seq, cap, 0.4),
                "{kind} at {cap}"
            );
        }
    }
}
