//! Replays the `ptx` fuzz campaign's kept corpus (`fuzz/replay/ptx/`) and the PTX corpus
//! through the fuzz target's body (`jit::passes::fuzz::ptx`), on stable: the parser and both
//! instrumentation passes must return on each, and the splice's output must parse.

mod common;

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

/// The `ptx_jit` corpus (`fuzz/replay/ptx_jit/`), the loader's corpus and the seeds: every
/// verified program lowers to PTX that ptxas accepts. Modules are assembled 64 at a time,
/// each one's symbols renamed apart.
#[test]
fn every_verified_program_of_the_corpora_assembles() {
    let all = bpftime_tests::fuzz_inputs(&["replay/ptx_jit", "replay/load_and_verify", "seeds"]);
    let mut modules = Vec::new();
    for (p, data) in &all {
        match std::panic::catch_unwind(|| jit::fuzz::ptx_jit(data)) {
            Ok(m) => modules.extend(m.into_iter().map(|m| (p.clone(), m))),
            Err(_) => panic!("{} panics the loader, verifier or JIT", p.display()),
        }
    }
    assert!(
        modules.len() > 50,
        "only {} verified programs compiled",
        modules.len()
    );
    for chunk in modules.chunks(64) {
        let mut text = String::new();
        for (k, (_, m)) in chunk.iter().enumerate() {
            let body: Vec<&str> = m
                .lines()
                .filter(|l| {
                    k == 0
                        || !(l.starts_with(".version")
                            || l.starts_with(".target")
                            || l.starts_with(".address_size"))
                })
                .collect();
            text.push_str(&body.join("\n").replace("bpf_", &format!("m{k}_bpf_")));
            text.push('\n');
        }
        if let Some(Err(e)) = common::try_assemble_for(&text, "fuzz_ptx_jit", "sm_90") {
            // Find the module to blame.
            for (p, m) in chunk {
                if let Some(Err(e)) = common::try_assemble_for(m, "fuzz_ptx_jit_one", "sm_90") {
                    panic!("{}: {e}", p.display());
                }
            }
            panic!("a batch fails but no module alone does: {e}");
        }
    }
}
