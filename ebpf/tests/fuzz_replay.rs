//! Replays the fuzz campaigns' kept corpora (`fuzz/replay/<target>/`, minimised after each
//! campaign) and the seeds through the fuzz targets' bodies (`ebpf::fuzz`), on stable: every
//! input that once found new coverage must still load (or fail to) without a panic.

/// The kept corpus of `target` and the seeds.
fn inputs(target: &str) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    bpftime_tests::fuzz_inputs(&[&format!("replay/{target}"), "seeds"])
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
    // Both kept corpora and the seeds, each file once.
    let all =
        bpftime_tests::fuzz_inputs(&["replay/load_and_verify", "replay/verify_exec", "seeds"]);
    for (p, data) in &all {
        let r = std::panic::catch_unwind(|| ebpf::fuzz::verify_exec(data));
        assert!(
            r.is_ok(),
            "{}: a verified program faults in the interpreter",
            p.display()
        );
    }
}
