//! Replays the fuzz campaigns' kept corpora (`fuzz/replay/<target>/`, minimised after each
//! campaign) and the seeds through the fuzz targets' bodies (`ebpf::fuzz`), on stable: every
//! input that once found new coverage must still load (or fail to) without a panic.

use std::path::PathBuf;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut out = Vec::new();
    for dir in [root.join("replay").join(target), root.join("seeds")] {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            if e.path().is_file() {
                out.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_load_and_verify_corpus_replays_without_a_panic() {
    let all = inputs("load_and_verify");
    assert!(
        all.len() > 100,
        "fuzz/replay/load_and_verify holds {} inputs",
        all.len()
    );
    for (p, data) in &all {
        let r = std::panic::catch_unwind(|| ebpf::fuzz::load_and_verify(data));
        assert!(
            r.is_ok(),
            "{} panics the loader or the verifier",
            p.display()
        );
    }
}

#[test]
fn verified_programs_of_the_corpora_never_fault_in_the_interpreter() {
    let mut all = inputs("load_and_verify");
    all.extend(inputs("verify_exec"));
    for (p, data) in &all {
        let r = std::panic::catch_unwind(|| ebpf::fuzz::verify_exec(data));
        assert!(
            r.is_ok(),
            "{}: a verified program faults in the interpreter",
            p.display()
        );
    }
}
