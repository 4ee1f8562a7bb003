//! The committed trace in tests/data/ parses, with the totals its README states.

use llm_cache::sim::Workload;
use llm_cache::trace::{Direction, Trace};
use std::path::PathBuf;

fn small_csv() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/llm_offload_small.csv")
}

#[test]
fn committed_trace_totals() {
    let t = Trace::read(&small_csv()).unwrap();
    assert_eq!(t.accesses.len(), 494);
    assert_eq!(t.objects.len(), 30, "18 weight tensors and 12 KV blocks");
    let tot = t.totals();
    assert_eq!(tot.h2d_accesses, 482);
    assert_eq!(tot.d2h_accesses, 12);
    assert_eq!(tot.h2d_bytes, 2_452_619_264);
    assert_eq!(tot.d2h_bytes, 393_216);
    assert_eq!(tot.distinct_objects, 26);
    assert_eq!(tot.distinct_bytes, 134_479_872);
    let gbps = tot.measured_gbps().unwrap();
    assert!((19.0..21.0).contains(&gbps), "{gbps}");
    assert!(t.accesses.windows(2).all(|p| p[0].time_ns <= p[1].time_ns));
    let w = Workload::from_trace(&t).unwrap();
    assert_eq!(w.len(), 482);
    assert_eq!(w.working_set_bytes, 134_479_872);
    // Every device-to-host row is a KV block.
    assert!(
        t.accesses
            .iter()
            .filter(|a| a.dir == Direction::DeviceToHost)
            .all(|a| t.objects[a.object as usize].name.starts_with("kv."))
    );
}

/// A trace from a real run: `examples/offload_llama.py` (a 1.1 B-parameter Llama, fp16,
/// accelerate CPU offload under a 1 GiB GPU budget, 8 generated tokens) observed on an H200
/// with `llm-cache observe --names` (`bench/results/llm_cache.md`).
#[test]
fn the_real_offload_trace_holds_what_the_framework_moved() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/llama_offload_h200.trace");
    let t = Trace::read(&p).unwrap();
    let tot = t.totals();
    assert_eq!((tot.h2d_accesses, tot.d2h_accesses), (1038, 18));
    // The 10 GPU-resident layers and the embeddings once (923,869,184 bytes), the 119
    // offloaded tensors (1,276,227,584 bytes) at each of 8 forwards, and 272 bytes of
    // buffers and token ids.
    assert_eq!(tot.h2d_bytes, 923_869_184 + 8 * 1_276_227_584 + 272);
    assert_eq!(t.objects.len(), 205);
    let named = |n: &str| t.objects.iter().find(|o| o.name == n);
    let lm = named("lm_head.weight").expect("the offloaded lm_head is named");
    assert_eq!(lm.bytes, 32000 * 2048 * 2);
    let id = t
        .objects
        .iter()
        .position(|o| o.name == "lm_head.weight")
        .unwrap() as u32;
    assert_eq!(
        t.accesses.iter().filter(|a| a.object == id).count(),
        8,
        "once per forward"
    );
    let w = Workload::from_trace(&t).unwrap();
    assert_eq!(w.len(), 1038);
}
