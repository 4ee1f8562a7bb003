//! Replays the `control` fuzz campaign's kept corpus (`fuzz/replay/control/`) and its
//! seeds (`fuzz/seeds_control/`) through the target's body (`host::service::fuzz::control`)
//! on stable: any bytes on the control socket get replies, and the service stays up.

#[test]
fn the_control_corpus_replays_and_the_service_stays_up() {
    let root = bpftime_tests::repo_root().join("fuzz");
    let all = bpftime_tests::fuzz_inputs(&["replay/control", "seeds_control"]);
    assert!(all.len() >= 6, "{} control inputs", all.len());
    for (p, data) in &all {
        let r = std::panic::catch_unwind(|| host::service::fuzz::control(data));
        assert!(r.is_ok(), "{} breaks the control plane", p.display());
    }
    // The seeds exercise what they mean to: a load with maps, then a dump of them.
    let out = host::service::fuzz::control(
        &std::fs::read(root.join("seeds_control/load_counter_maps")).unwrap(),
    );
    let text = String::from_utf8(out).unwrap();
    let replies: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(replies.len(), 5, "{text}");
    assert!(replies.iter().all(|r| r["ok"] == true), "{text}");
}
