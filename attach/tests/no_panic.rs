//! Truncations and byte flips of every fixture and corpus file: the safe entry points
//! return, `Ok` or `Err`, and never panic.

mod common;

use attach::image::{classify, cubin_info, host_elf_fatbins, parse_fatbin, parse_wrapper, unpack};
use common::{ELF, PTX, Sec, Store, container, cubin, entry, host_elf, ptx, sample_fatbin};
use proptest::prelude::*;
use std::sync::OnceLock;

/// The fixtures, then every file under `tests/corpus` (when it exists).
fn inputs() -> &'static [Vec<u8>] {
    static INPUTS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    INPUTS.get_or_init(|| {
        let mut v = vec![
            sample_fatbin(Store::Plain),
            sample_fatbin(Store::Lz4),
            sample_fatbin(Store::Zstd),
            cubin(80, 7, &["a", "b"], &["d"], true),
            cubin(100, 8, &["a"], &["d"], false),
            ptx(80, "k").into_bytes(),
            host_elf(vec![
                Sec::progbits(".nv_fatbin", sample_fatbin(Store::Lz4)),
                Sec::progbits(
                    "__nv_relfatbin",
                    container(&[
                        entry(PTX, 60, ptx(60, "r").as_bytes(), Store::Zstd, None, None),
                        entry(
                            ELF,
                            60,
                            &cubin(60, 7, &["r"], &[], true),
                            Store::Plain,
                            None,
                            None,
                        ),
                    ]),
                ),
            ]),
        ];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
        if let Ok(rd) = std::fs::read_dir(dir) {
            let mut paths: Vec<_> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            paths.sort();
            for p in paths {
                let is_listing = p.to_string_lossy().ends_with(".txt");
                if let (false, Ok(bytes)) = (is_listing, std::fs::read(&p)) {
                    v.push(bytes);
                }
            }
        }
        v
    })
}

fn exercise(bytes: &[u8]) {
    let _ = classify(bytes);
    let _ = unpack(bytes);
    let _ = parse_fatbin(bytes);
    let _ = cubin_info(bytes);
    let _ = host_elf_fatbins(bytes);
    let _ = parse_wrapper(bytes);
}

proptest! {
    // PROPTEST_CASES raises the count for a longer run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(512),
        ..ProptestConfig::default()
    })]

    #[test]
    fn truncations_never_panic(pick in any::<prop::sample::Index>(), cut in any::<prop::sample::Index>()) {
        let all = inputs();
        let input = &all[pick.index(all.len())];
        exercise(&input[..cut.index(input.len() + 1)]);
    }

    #[test]
    fn byte_flips_never_panic(
        pick in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..8),
        // Half the time the flips land in the first 128 bytes, where the headers are.
        in_header in any::<bool>(),
    ) {
        let all = inputs();
        let mut bytes = all[pick.index(all.len())].clone();
        for (at, x) in flips {
            let span = if in_header { bytes.len().min(128) } else { bytes.len() };
            if span > 0 {
                bytes[at.index(span)] ^= x;
            }
        }
        exercise(&bytes);
    }
}

#[test]
fn every_prefix_of_the_fixtures() {
    for input in inputs().iter().take(7) {
        for n in 0..=input.len() {
            exercise(&input[..n]);
        }
    }
}
