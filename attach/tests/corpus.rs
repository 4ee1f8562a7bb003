//! The image module against the real files in `tests/corpus` (nvcc 13.0, see its README).
//!
//! | what is checked                              | independent reference                                    |
//! |----------------------------------------------|----------------------------------------------------------|
//! | kinds, archs, order and count of entries     | `<file>.cuobjdump.txt` (`cuobjdump --list-elf --list-ptx`) |
//! | kernel names of every cubin and PTX entry    | `.entry` names of `nvcc -ptx` output in `jit/tests/ptx_corpus/nvcc/` |
//! | PTX text of each fat binary                  | the same `nvcc -ptx` output, comments and whitespace aside |
//! | decompressed entries of the compressed fatbin| the entries of the uncompressed one                      |
//! | cubin bytes cut out of a fat binary          | the `nvcc -cubin` file built from the same source        |
//! | `image_len` through a pointer                | the file's length                                        |

use attach::image::{
    EntryKind, FatbinEntry, ImageKind, best_ptx, classify, host_elf_fatbins, image_bytes,
    image_len, parse_fatbin, unpack,
};
use std::path::{Path, PathBuf};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn read(name: &str) -> Vec<u8> {
    let p = corpus().join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `(kind, sm)` of every line of a cuobjdump listing, in its order: `ELF file    1:
/// vecadd_multi.1.sm_80.cubin` is `(Cubin, 80)`.
fn listing(name: &str) -> Vec<(EntryKind, u32)> {
    let text = String::from_utf8(read(&format!("{name}.cuobjdump.txt"))).unwrap();
    text.lines()
        .filter_map(|l| {
            let kind = if l.starts_with("ELF file") {
                EntryKind::Cubin
            } else if l.starts_with("PTX file") {
                EntryKind::Ptx
            } else {
                return None;
            };
            let file = l.rsplit(' ').next()?;
            let sm = file.rsplit_once(".sm_")?.1.split('.').next()?;
            let digits: String = sm.chars().take_while(char::is_ascii_digit).collect();
            Some((kind, digits.parse().ok()?))
        })
        .collect()
}

/// The `.entry` names of an `nvcc -ptx` file of `jit/tests/ptx_corpus/nvcc/`.
fn nvcc_ptx(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../jit/tests/ptx_corpus/nvcc")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn entry_names(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix(".visible .entry ")?;
            Some(rest.split('(').next()?.trim().to_string())
        })
        .collect()
}

/// PTX tokens, comments dropped: the fatbin keeps PTX without comments or indentation.
fn tokens(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .flat_map(str::split_whitespace)
        .collect()
}

fn kinds(entries: &[FatbinEntry]) -> Vec<(EntryKind, u32)> {
    entries.iter().map(|e| (e.kind, e.sm)).collect()
}

/// The app a corpus file was built from, and its kernels according to `nvcc -ptx`.
fn kernels_of(file: &str) -> Vec<String> {
    let app = file.split('_').next().unwrap();
    entry_names(&nvcc_ptx(&format!("{app}_sm80.ptx")))
}

/// Every cubin and PTX entry has exactly the app's kernels; cubins `allow_empty` may have
/// none (the kernel-less cubins that the cudart link step adds to executables).
fn check_kernels(file: &str, entries: &[FatbinEntry], allow_empty: bool) {
    let want = kernels_of(file);
    assert!(!want.is_empty());
    for e in entries {
        let got = match e.kind {
            EntryKind::Cubin => attach::image::cubin_info(&e.payload).unwrap().kernels,
            EntryKind::Ptx => entry_names(std::str::from_utf8(&e.payload).unwrap()),
            EntryKind::Other(_) => continue,
        };
        if !(allow_empty && got.is_empty()) {
            assert_eq!(got, want, "{file}: entry at {}", e.offset);
        }
    }
}

#[test]
fn fatbins_match_cuobjdump() {
    for name in [
        "vecadd_multi.fatbin",
        "vecadd_multi_compressed.fatbin",
        "vecadd_sass_only.fatbin",
        "sgemm_ptx_only.fatbin",
    ] {
        let bytes = read(name);
        assert_eq!(classify(&bytes), Some(ImageKind::Fatbin), "{name}");
        let entries = parse_fatbin(&bytes).unwrap();
        assert_eq!(kinds(&entries), listing(name), "{name}");
        check_kernels(name, &entries, false);
        // Unpacking keeps every PTX and cubin entry, with the listing's archs.
        let u = unpack(&bytes).unwrap();
        let want = listing(name);
        let ptx: Vec<u32> = want
            .iter()
            .filter(|k| k.0 == EntryKind::Ptx)
            .map(|k| k.1)
            .collect();
        let sass: Vec<u32> = want
            .iter()
            .filter(|k| k.0 == EntryKind::Cubin)
            .map(|k| k.1)
            .collect();
        assert_eq!(u.ptx.iter().map(|p| p.0).collect::<Vec<_>>(), ptx, "{name}");
        assert_eq!(
            u.cubins.iter().map(|c| c.0).collect::<Vec<_>>(),
            sass,
            "{name}"
        );
        assert!(u.cubins.iter().all(|(sm, info)| info.sm == *sm), "{name}");
    }
}

#[test]
fn cubins_match_cuobjdump() {
    for name in ["vecadd_sm90.cubin", "sgemm_sm80.cubin"] {
        let bytes = read(name);
        assert_eq!(classify(&bytes), Some(ImageKind::Cubin), "{name}");
        let u = unpack(&bytes).unwrap();
        assert!(u.ptx.is_empty());
        let got: Vec<_> = u.cubins.iter().map(|c| (EntryKind::Cubin, c.0)).collect();
        assert_eq!(got, listing(name), "{name}");
        assert_eq!(u.cubins[0].1.kernels, kernels_of(name), "{name}");
        assert!(u.cubins[0].1.device_functions.is_empty());
    }
}

#[test]
fn executables_match_cuobjdump() {
    let stat = read("vecadd_static.exe");
    assert_eq!(classify(&stat), Some(ImageKind::HostElf));
    let containers = host_elf_fatbins(&stat).unwrap();
    let all: Vec<FatbinEntry> = containers.into_iter().flatten().collect();
    assert_eq!(kinds(&all), listing("vecadd_static.exe"));
    check_kernels("vecadd_static.exe", &all, true);
    // The app's own container is the one vecadd_multi.fatbin holds (same gencode flags).
    let multi = parse_fatbin(&read("vecadd_multi.fatbin")).unwrap();
    let tail = &all[all.len() - multi.len()..];
    for (a, b) in tail.iter().zip(&multi) {
        assert_eq!(a.payload, b.payload);
    }

    // No listing for the shared-cudart build: the same app, so the same entries.
    let shared = read("vecadd_shared.exe");
    let s: Vec<FatbinEntry> = host_elf_fatbins(&shared)
        .unwrap()
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(kinds(&s), listing("vecadd_static.exe"));
    check_kernels("vecadd_shared.exe", &s, true);
    assert_eq!(unpack(&shared).unwrap(), unpack(&stat).unwrap());
}

#[test]
fn compressed_equals_uncompressed() {
    let plain = parse_fatbin(&read("vecadd_multi.fatbin")).unwrap();
    let packed = parse_fatbin(&read("vecadd_multi_compressed.fatbin")).unwrap();
    assert!(packed.iter().all(|e| e.compressed));
    assert!(
        plain
            .iter()
            .filter(|e| e.kind == EntryKind::Cubin)
            .all(|e| !e.compressed)
    );
    assert_eq!(kinds(&plain), kinds(&packed));
    for (a, b) in plain.iter().zip(&packed) {
        assert_eq!(a.payload, b.payload, "entry {:?} sm {}", a.kind, a.sm);
    }
    let pa = unpack(&read("vecadd_multi.fatbin")).unwrap();
    let pb = unpack(&read("vecadd_multi_compressed.fatbin")).unwrap();
    assert_eq!(pa.ptx, pb.ptx);
    assert_eq!(pa, pb);
}

#[test]
fn ptx_and_cubin_bytes_match_nvcc_outputs() {
    let multi = parse_fatbin(&read("vecadd_multi.fatbin")).unwrap();
    // The sm_90 cubin, cut to its ELF extent, is the file `nvcc -cubin -arch=sm_90` wrote.
    let sm90 = multi
        .iter()
        .find(|e| e.kind == EntryKind::Cubin && e.sm == 90)
        .unwrap();
    assert_eq!(sm90.payload, read("vecadd_sm90.cubin"));

    for (fatbin, ptx_file) in [
        ("vecadd_multi.fatbin", "vecadd_sm90.ptx"),
        ("vecadd_multi_compressed.fatbin", "vecadd_sm90.ptx"),
        ("sgemm_ptx_only.fatbin", "sgemm_sm75.ptx"),
    ] {
        let u = unpack(&read(fatbin)).unwrap();
        let nvcc = nvcc_ptx(ptx_file);
        assert_eq!(u.ptx.len(), 1);
        assert_eq!(tokens(&u.ptx[0].1), tokens(&nvcc), "{fatbin} vs {ptx_file}");
    }
}

#[test]
fn best_ptx_for_the_corpus_gpus() {
    let u = unpack(&read("vecadd_multi.fatbin")).unwrap();
    assert!(best_ptx(&u, 90).is_some_and(|p| p.contains(".target sm_90")));
    assert!(best_ptx(&u, 100).is_some());
    assert_eq!(best_ptx(&u, 80), None);
    let u = unpack(&read("sgemm_ptx_only.fatbin")).unwrap();
    assert!(best_ptx(&u, 90).is_some_and(|p| p.contains(".target sm_75")));
    assert_eq!(best_ptx(&u, 70), None);
    assert_eq!(
        best_ptx(&unpack(&read("vecadd_sass_only.fatbin")).unwrap(), 90),
        None
    );
}

#[test]
fn lengths_through_pointers() {
    for name in [
        "vecadd_multi.fatbin",
        "vecadd_multi_compressed.fatbin",
        "vecadd_sass_only.fatbin",
        "sgemm_ptx_only.fatbin",
        "vecadd_sm90.cubin",
        "sgemm_sm80.cubin",
    ] {
        let mut bytes = read(name);
        let n = bytes.len();
        bytes.extend_from_slice(&[0xEE; 64]); // whatever follows in memory
        // SAFETY: `bytes` starts with a complete image, alive for the call.
        assert_eq!(unsafe { image_len(bytes.as_ptr()) }, Some(n), "{name}");
    }
    let mut ptx = nvcc_ptx("vecadd_sm90.ptx").into_bytes();
    let n = ptx.len();
    ptx.push(0);
    // SAFETY: NUL-terminated PTX.
    let (kind, bytes) = unsafe { image_bytes(ptx.as_ptr()) }.unwrap();
    assert_eq!((kind, bytes.len()), (ImageKind::Ptx, n + 1));
    let u = unpack(bytes).unwrap();
    assert_eq!(u.ptx[0].0, 90);
    assert_eq!(entry_names(&u.ptx[0].1), kernels_of("vecadd"));
}
