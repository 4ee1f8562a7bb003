//! The performance target: a 10 M-lookup Zipf trace through 5 policies × 8 capacities.
//!
//! ```sh
//! cargo run --release -p llm-cache --example bench              # 10 M lookups, 100 k objects
//! cargo run --release -p llm-cache --example bench -- 1000000 10000   # LOOKUPS OBJECTS
//! ```
//!
//! Prints, from one run: the baseline (LRU at one capacity, one thread), the full 40-run
//! simulation on every core, and their ratio; then each policy alone at one capacity.
//! Generating the trace is not timed.

use llm_cache::sim::{SimConfig, Workload, simulate, simulate_one};
use llm_cache::{PolicyKind, synth, units::format_bytes};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let lookups: usize = args.first().map_or(Ok(10_000_000), |s| s.parse())?;
    let objects: usize = args.get(1).map_or(Ok(100_000), |s| s.parse())?;
    let t = Instant::now();
    let sizes = synth::log_uniform_sizes(objects, 64 << 10, 16 << 20, 2);
    let seq = synth::zipf_sequence(objects, lookups, 0.9, 3);
    let w = Workload::from_sequence(sizes, seq)?;
    println!(
        "trace: {lookups} Zipf(0.9) lookups over {objects} objects of 64 KiB..16 MiB (log-uniform); {} distinct, working set {}; generated in {:.2} s (not counted)",
        w.distinct_objects,
        format_bytes(w.working_set_bytes),
        t.elapsed().as_secs_f64()
    );
    let ws = w.working_set_bytes;
    let capacities: Vec<u64> = [0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.7, 1.0]
        .iter()
        .map(|f| ((ws as f64 * f) as u64).max(1))
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());

    let t = Instant::now();
    let base = simulate_one(&w, PolicyKind::Lru, capacities[3], 0.5)?;
    let baseline = t.elapsed().as_secs_f64();
    println!(
        "baseline: lru at {} (1 run, 1 thread): {baseline:.3} s, hit rate {:.2}%",
        format_bytes(capacities[3]),
        base.hit_rate * 100.0
    );

    let cfg = SimConfig {
        policies: PolicyKind::ALL.to_vec(),
        capacities: capacities.clone(),
        hybrid_pinned: 0.5,
        threads: None,
    };
    let t = Instant::now();
    let results = simulate(&w, &cfg)?;
    let full = t.elapsed().as_secs_f64();
    println!(
        "full: {} policies x {} capacities = {} runs on {threads} threads: {full:.3} s ({:.1}x the baseline)",
        cfg.policies.len(),
        capacities.len(),
        results.len(),
        full / baseline
    );
    for k in PolicyKind::ALL {
        let t = Instant::now();
        let r = simulate_one(&w, k, capacities[3], 0.5)?;
        println!(
            "  {:<6} at {}: {:.3} s, hit rate {:.2}%",
            k.name(),
            format_bytes(capacities[3]),
            t.elapsed().as_secs_f64(),
            r.hit_rate * 100.0
        );
    }
    Ok(())
}
