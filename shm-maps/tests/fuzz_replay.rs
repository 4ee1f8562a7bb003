//! Replays the `region` fuzz campaign's kept corpus (`fuzz/replay/region/`) and its seeds
//! (`fuzz/seeds_region/`) through the target's body (`shm_maps::fuzz::region`), on
//! stable, plus a deterministic sweep of single-field corruptions of the header and the
//! directory: a corrupt region must give an error, never a crash.

#[test]
fn the_region_corpus_replays_without_a_panic() {
    let all = bpftime_tests::fuzz_inputs(&["replay/region", "seeds_region"]);
    assert!(!all.is_empty(), "no region inputs");
    assert!(shm_maps::fuzz::region(&[]), "the unpatched template opens");
    for (p, data) in &all {
        let r = std::panic::catch_unwind(|| shm_maps::fuzz::region(data));
        assert!(r.is_ok(), "{} crashes a client of the region", p.display());
    }
}

#[test]
fn every_header_and_directory_word_set_to_extremes_gives_an_error_or_works() {
    // Area 0 is the header, 1 the directory: every 8-byte word to 0, all ones, and a
    // large odd value.
    let mut opened = 0;
    for area in [0u8, 1] {
        for off in (0u16..512).step_by(8) {
            for v in [0u64, u64::MAX, 0x7fff_ffff_0000_1001] {
                let mut input = vec![area];
                input.extend_from_slice(&off.to_le_bytes());
                input.push(8);
                input.extend_from_slice(&v.to_le_bytes());
                opened += shm_maps::fuzz::region(&input) as u32;
            }
        }
    }
    // Words the layout does not depend on (counters, names) leave it usable.
    assert!(opened > 100, "only {opened} corrupted regions opened");
}
