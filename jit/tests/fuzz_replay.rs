//! Replays the `ptx` fuzz campaign's kept corpus (`fuzz/replay/ptx/`) and the PTX corpus
//! through the fuzz target's body (`jit::passes::fuzz::ptx`), on stable: the parser and both
//! instrumentation passes must return on each, and the splice's output must parse.

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
fn the_ptx_corpus_replays_without_a_panic() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut all = Vec::new();
    files(&root.join("fuzz/replay/ptx"), &mut all);
    let kept = all.len();
    files(&root.join("jit/tests/ptx_corpus"), &mut all);
    all.sort();
    assert!(kept > 100, "fuzz/replay/ptx holds {kept} inputs");
    for p in &all {
        let data = std::fs::read(p).unwrap();
        let r = std::panic::catch_unwind(|| jit::passes::fuzz::ptx(&data));
        assert!(r.is_ok(), "{} panics the PTX parser or a pass", p.display());
    }
}
