//! The image module against hand-built fixtures (`common`): every kind, every storage
//! method, every error path.

mod common;

use attach::image::{
    CubinInfo, EntryKind, ImageError, ImageKind, Unpacked, best_ptx, classify, cubin_info,
    host_elf_fatbins, image_bytes, image_len, parse_fatbin, parse_wrapper, unpack, wrapper_fatbin,
    wrapper_prelinked,
};
use common::{ELF, PTX, Sec, Store, container, cubin, entry, host_elf, ptx, sample_fatbin};

#[test]
fn classify_every_kind() {
    let p = ptx(80, "k");
    assert_eq!(classify(p.as_bytes()), Some(ImageKind::Ptx));
    assert_eq!(
        classify(b"  \n/* block */ // line\n.version 7.0\n.target sm_70\n\0garbage"),
        Some(ImageKind::Ptx)
    );
    assert_eq!(classify(b".version\t8.5\0"), Some(ImageKind::Ptx));
    assert_eq!(classify(b"// just a comment\n"), None);
    assert_eq!(classify(b".versionX"), None);
    assert_eq!(classify(b"/* unterminated .version 8.0"), None);
    assert_eq!(classify(b"hello"), None);
    assert_eq!(classify(b""), None);
    assert_eq!(
        classify(&sample_fatbin(Store::Plain)),
        Some(ImageKind::Fatbin)
    );
    assert_eq!(
        classify(&cubin(80, 7, &["k"], &[], true)),
        Some(ImageKind::Cubin)
    );
    assert_eq!(classify(&host_elf(vec![])), Some(ImageKind::HostElf));
    let mut w = 0x4662_43B1u32.to_le_bytes().to_vec();
    w.extend_from_slice(&[0; 20]);
    assert_eq!(classify(&w), Some(ImageKind::FatbinWrapper));
    assert_eq!(classify(&w[..8]), None);
}

fn check_sample(entries: &[attach::image::FatbinEntry], compressed: bool) {
    assert_eq!(entries.len(), 4);
    let kinds: Vec<_> = entries.iter().map(|e| (e.kind, e.sm)).collect();
    assert_eq!(
        kinds,
        [
            (EntryKind::Cubin, 80),
            (EntryKind::Cubin, 90),
            (EntryKind::Ptx, 70),
            (EntryKind::Ptx, 80)
        ]
    );
    assert!(entries.iter().all(|e| e.compressed == compressed));
    assert_eq!(entries[0].offset, 16);
    assert_eq!(entries[0].payload, cubin(80, 7, &["_Z4kernPf"], &[], true));
    assert_eq!(
        entries[1].payload,
        cubin(90, 8, &["_Z4kernPf"], &["_Z3devv"], true)
    );
    assert_eq!(entries[2].payload, ptx(70, "_Z4kernPf").as_bytes());
    assert_eq!(entries[0].identifier.as_deref(), Some("a.cu"));
    assert_eq!(entries[1].identifier, None);
    assert_eq!(entries[2].options.as_deref(), Some("-O3"));
    assert_eq!(entries[2].version, (8, 0));
    assert_eq!(entries[0].version, (1, 7));
}

#[test]
fn fatbin_plain_lz4_zstd() {
    check_sample(&parse_fatbin(&sample_fatbin(Store::Plain)).unwrap(), false);
    let lz4 = parse_fatbin(&sample_fatbin(Store::Lz4)).unwrap();
    check_sample(&lz4, true);
    assert!(lz4.iter().all(|e| e.flags & 0x2000 != 0));
    let zstd = parse_fatbin(&sample_fatbin(Store::Zstd)).unwrap();
    check_sample(&zstd, true);
    assert!(zstd.iter().all(|e| e.flags & 0x8000 != 0));
}

#[test]
fn containers_follow_each_other() {
    let a = container(&[entry(PTX, 52, b".version 7.0\n", Store::Plain, None, None)]);
    let b = sample_fatbin(Store::Lz4);
    let mut bytes = a.clone();
    bytes.extend_from_slice(&[0; 8]); // section alignment padding
    bytes.extend_from_slice(&b);
    bytes.extend_from_slice(&[0; 16]);
    let entries = parse_fatbin(&bytes).unwrap();
    assert_eq!(entries.len(), 5);
    assert_eq!(entries[1].offset, a.len() + 8 + 16);
    assert_eq!(entries[0].payload, b".version 7.0\n");
}

#[test]
fn cubin_kernels_and_arch() {
    let c = cubin(80, 7, &["_Z1aPi", "_Z1bv"], &["_Z3devi"], true);
    assert_eq!(
        cubin_info(&c).unwrap(),
        CubinInfo {
            sm: 80,
            kernels: vec!["_Z1aPi".into(), "_Z1bv".into()],
            device_functions: vec!["_Z3devi".into()],
        }
    );
    // Without STO_CUDA_ENTRY, `.nv.info.<name>` marks the kernels.
    let c = cubin(120, 8, &["k1"], &["d1"], false);
    let info = cubin_info(&c).unwrap();
    assert_eq!(info.sm, 120);
    assert_eq!(info.kernels, ["k1"]);
    assert_eq!(info.device_functions, ["d1"]);
    // New-ABI flags for a pre-Blackwell arch.
    assert_eq!(cubin_info(&cubin(90, 8, &["k"], &[], true)).unwrap().sm, 90);
}

#[test]
fn cubin_errors() {
    let host = host_elf(vec![]);
    assert!(matches!(
        cubin_info(&host),
        Err(ImageError::NotCubin { off: 0, .. })
    ));
    assert!(matches!(
        cubin_info(b"\x7fELF"),
        Err(ImageError::Truncated { off: 0, .. })
    ));
    let mut c = cubin(80, 7, &["k"], &[], true);
    let n = c.len();
    c.truncate(n - 10); // cuts the section header table
    assert!(matches!(cubin_info(&c), Err(ImageError::Elf { .. })));
}

#[test]
fn fatbin_errors_name_offsets() {
    let good = sample_fatbin(Store::Lz4);

    let mut bad = good.clone();
    bad[0] ^= 1;
    assert!(matches!(
        parse_fatbin(&bad),
        Err(ImageError::BadMagic { off: 0, .. })
    ));

    assert!(matches!(
        parse_fatbin(&good[..10]),
        Err(ImageError::Truncated {
            off: 0,
            need: 16,
            have: 10,
            ..
        })
    ));
    assert!(matches!(
        parse_fatbin(&good[..good.len() - 1]),
        Err(ImageError::PastEnd { off: 0, .. })
    ));

    // The first entry's payload size, grown past the container's end.
    let mut bad = good.clone();
    bad[16 + 8..16 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        parse_fatbin(&bad),
        Err(ImageError::PastEnd {
            what: "fatbin entry payload",
            ..
        })
    ));

    // Entry header size below 64.
    let mut bad = good.clone();
    bad[16 + 4..16 + 8].copy_from_slice(&8u32.to_le_bytes());
    assert!(matches!(
        parse_fatbin(&bad),
        Err(ImageError::BadField { off: 20, .. })
    ));

    // Container version.
    let mut bad = good.clone();
    bad[4] = 2;
    assert!(matches!(
        parse_fatbin(&bad),
        Err(ImageError::BadField { off: 4, .. })
    ));

    // Broken LZ4 stream: a match offset of zero.
    let bad_lz4 = container(&[raw_compressed(0x2000, &[0x00, 0x00, 0x00], 100)]);
    assert!(matches!(
        parse_fatbin(&bad_lz4),
        Err(ImageError::Lz4 { off: 16, .. })
    ));

    // Decompressed size in the header disagrees with the stream.
    let c = lz4_flex::block::compress(b".version 8.0\n.target sm_80\n");
    let wrong = container(&[raw_compressed(0x2000, &c, 5)]);
    assert!(matches!(
        parse_fatbin(&wrong),
        Err(ImageError::Lz4 { off: 16, .. } | ImageError::SizeMismatch { off: 16, .. })
    ));
    let short = container(&[raw_compressed(0x2000, &c, 1000)]);
    assert!(matches!(
        parse_fatbin(&short),
        Err(ImageError::SizeMismatch {
            off: 16,
            found: 27,
            expected: 1000
        })
    ));

    // An absurd decompressed size is refused before allocating it.
    let huge = container(&[raw_compressed(0x2000, &c, 1 << 40)]);
    assert!(matches!(
        parse_fatbin(&huge),
        Err(ImageError::BadField { off: 72, .. })
    ));

    // ZSTD garbage, and a ZSTD frame that is longer than announced.
    let bad_zstd = container(&[raw_compressed(0x8000, &[1, 2, 3, 4, 5, 6, 7, 8], 10)]);
    assert!(matches!(
        parse_fatbin(&bad_zstd),
        Err(ImageError::Zstd { off: 16, .. })
    ));
    let z = ruzstd::encoding::compress_to_vec(
        &[7u8; 4096][..],
        ruzstd::encoding::CompressionLevel::Fastest,
    );
    let long = container(&[raw_compressed(0x8000, &z, 100)]);
    assert!(matches!(
        parse_fatbin(&long),
        Err(ImageError::SizeMismatch {
            off: 16,
            found: 101,
            expected: 100
        })
    ));

    // Compressed size larger than the payload.
    let mut bad = container(&[raw_compressed(0x2000, &c, 27)]);
    bad[16 + 16..16 + 20].copy_from_slice(&4096u32.to_le_bytes());
    assert!(matches!(
        parse_fatbin(&bad),
        Err(ImageError::PastEnd {
            what: "fatbin entry compressed payload",
            off: 80,
            ..
        })
    ));

    // The old compression bit with no method.
    let old = container(&[raw_compressed(0x1000, &c, 27)]);
    assert!(matches!(
        parse_fatbin(&old),
        Err(ImageError::UnknownCompression { off: 16, .. })
    ));
}

/// A PTX entry whose stored payload is `stream` with the given compression flag and
/// announced decompressed size.
fn raw_compressed(flag: u64, stream: &[u8], decompressed: u64) -> Vec<u8> {
    let mut e = entry(PTX, 80, stream, Store::Plain, None, None);
    e[16..20].copy_from_slice(&(stream.len() as u32).to_le_bytes());
    let flags = u64::from_le_bytes(e[40..48].try_into().unwrap()) | flag;
    e[40..48].copy_from_slice(&flags.to_le_bytes());
    e[56..64].copy_from_slice(&decompressed.to_le_bytes());
    e
}

#[test]
fn unpack_every_kind() {
    let u = unpack(&sample_fatbin(Store::Zstd)).unwrap();
    assert_eq!(
        u.ptx,
        [(70, ptx(70, "_Z4kernPf")), (80, ptx(80, "_Z4kernPf"))]
    );
    assert_eq!(u.cubins.len(), 2);
    assert_eq!(u.cubins[1].0, 90);
    assert_eq!(u.cubins[1].1.kernels, ["_Z4kernPf"]);

    let mut text = ptx(75, "k").into_bytes();
    text.push(0);
    let u = unpack(&text).unwrap();
    assert_eq!(u.ptx, [(75, ptx(75, "k"))]);
    assert!(u.cubins.is_empty());

    let u = unpack(&cubin(86, 7, &["k"], &[], true)).unwrap();
    assert_eq!(u.cubins[0].0, 86);
    assert!(u.ptx.is_empty());

    let mut w = 0x4662_43B1u32.to_le_bytes().to_vec();
    w.extend_from_slice(&[1, 0, 0, 0]);
    w.extend_from_slice(&[0; 16]);
    assert!(matches!(unpack(&w), Err(ImageError::Wrapper)));
    assert!(matches!(
        unpack(b"\x01\x02\x03"),
        Err(ImageError::Unrecognized { .. })
    ));
}

#[test]
fn host_elf_sections() {
    let a = sample_fatbin(Store::Plain);
    let b = container(&[entry(
        ELF,
        75,
        &cubin(75, 7, &["k"], &[], true),
        Store::Lz4,
        None,
        None,
    )]);
    let mut nv = a.clone();
    nv.extend_from_slice(&b);
    let rel = container(&[entry(
        PTX,
        60,
        ptx(60, "r").as_bytes(),
        Store::Plain,
        None,
        None,
    )]);
    let elf = host_elf(vec![
        Sec::progbits(".nv_fatbin", nv),
        Sec::progbits("__nv_relfatbin", rel),
    ]);
    let fatbins = host_elf_fatbins(&elf).unwrap();
    assert_eq!(fatbins.len(), 3);
    assert_eq!(fatbins.iter().map(Vec::len).collect::<Vec<_>>(), [4, 1, 1]);
    // Offsets are file offsets: the entry header really is there.
    let e = &fatbins[1][0];
    assert_eq!(elf[e.offset..e.offset + 2], ELF.to_le_bytes());
    let u = unpack(&elf).unwrap();
    assert_eq!(u.ptx.len(), 3);
    assert_eq!(u.cubins.len(), 3);
    assert!(host_elf_fatbins(&host_elf(vec![])).unwrap().is_empty());
}

#[test]
fn best_ptx_picks_highest_not_above() {
    let u = Unpacked {
        ptx: vec![
            (52, "a".into()),
            (80, "c".into()),
            (70, "b".into()),
            (80, "d".into()),
        ],
        cubins: vec![],
    };
    assert_eq!(best_ptx(&u, 90), Some("c"));
    assert_eq!(best_ptx(&u, 75), Some("b"));
    assert_eq!(best_ptx(&u, 52), Some("a"));
    assert_eq!(best_ptx(&u, 50), None);
}

#[test]
fn pointers_ptx_fatbin_cubin() {
    let mut text = ptx(80, "k").into_bytes();
    let n = text.len();
    text.push(0);
    text.extend_from_slice(b"trailing bytes the driver never reads");
    // SAFETY: `text` is a NUL-terminated PTX image.
    assert_eq!(unsafe { image_len(text.as_ptr()) }, Some(n + 1));

    let mut fb = sample_fatbin(Store::Lz4);
    let len = fb.len();
    fb.extend_from_slice(&[0xEE; 32]);
    // SAFETY: `fb` starts with a complete container.
    let (kind, bytes) = unsafe { image_bytes(fb.as_ptr()) }.unwrap();
    assert_eq!((kind, bytes.len()), (ImageKind::Fatbin, len));

    let mut c = cubin(90, 8, &["k"], &[], true);
    let len = c.len();
    c.extend_from_slice(&[0xEE; 32]);
    // SAFETY: `c` starts with a complete cubin.
    assert_eq!(unsafe { image_len(c.as_ptr()) }, Some(len));

    // SAFETY: null is allowed.
    assert_eq!(unsafe { image_len(std::ptr::null()) }, None);
}

#[test]
fn pointers_wrapper() {
    let fb = sample_fatbin(Store::Zstd);
    let mut w = Vec::new();
    w.extend_from_slice(&0x4662_43B1u32.to_le_bytes());
    w.extend_from_slice(&1u32.to_le_bytes());
    w.extend_from_slice(&(fb.as_ptr() as u64).to_le_bytes());
    w.extend_from_slice(&0u64.to_le_bytes());
    let parsed = parse_wrapper(&w).unwrap();
    assert_eq!(parsed.version, 1);
    assert_eq!(parsed.data, fb.as_ptr() as u64);
    // SAFETY: `w` is a wrapper whose data points at `fb`, alive for this test.
    let (kind, bytes) = unsafe { image_bytes(w.as_ptr()) }.unwrap();
    assert_eq!(kind, ImageKind::FatbinWrapper);
    assert_eq!(bytes, &fb[..]);
    // SAFETY: as above.
    assert_eq!(unsafe { image_len(w.as_ptr()) }, Some(fb.len()));
    // SAFETY: as above.
    assert_eq!(unsafe { wrapper_fatbin(w.as_ptr()) }, Some(&fb[..]));
    // SAFETY: `fb` is a fat binary, not a wrapper.
    assert_eq!(unsafe { wrapper_fatbin(fb.as_ptr()) }, None);
    assert_eq!(unpack(bytes).unwrap().ptx.len(), 2);

    let mut bad = w.clone();
    bad[4] = 3;
    assert!(matches!(
        parse_wrapper(&bad),
        Err(ImageError::BadField { off: 4, .. })
    ));
}

#[test]
fn pointers_wrapper_version_2() {
    let linked = sample_fatbin(Store::Plain);
    let rel_a = container(&[entry(
        PTX,
        80,
        ptx(80, "a").as_bytes(),
        Store::Zstd,
        None,
        None,
    )]);
    let rel_b = container(&[entry(
        ELF,
        90,
        &cubin(90, 8, &["b"], &[], true),
        Store::Lz4,
        None,
        None,
    )]);
    let list: Vec<u64> = vec![rel_a.as_ptr() as u64, rel_b.as_ptr() as u64, 0];
    let mut w = Vec::new();
    w.extend_from_slice(&0x4662_43B1u32.to_le_bytes());
    w.extend_from_slice(&2u32.to_le_bytes());
    w.extend_from_slice(&(linked.as_ptr() as u64).to_le_bytes());
    w.extend_from_slice(&(list.as_ptr() as u64).to_le_bytes());
    // SAFETY: `w` is a version-2 wrapper whose data and list point at live containers.
    let pre = unsafe { wrapper_prelinked(w.as_ptr()) }.unwrap();
    assert_eq!(pre, [&rel_a[..], &rel_b[..]]);
    // SAFETY: as above.
    assert_eq!(unsafe { wrapper_fatbin(w.as_ptr()) }, Some(&linked[..]));
    assert_eq!(unpack(pre[1]).unwrap().cubins[0].1.kernels, ["b"]);

    // Version 1: no list.
    w[4] = 1;
    // SAFETY: a version-1 wrapper; the list pointer is not read.
    assert_eq!(unsafe { wrapper_prelinked(w.as_ptr()) }, Some(vec![]));

    // A wrapper whose data points at itself is no image (and does not recurse).
    let mut selfref = w.clone();
    let me = selfref.as_ptr() as u64;
    selfref[8..16].copy_from_slice(&me.to_le_bytes());
    // SAFETY: the data pointer points at readable bytes (the wrapper itself).
    assert_eq!(unsafe { image_len(selfref.as_ptr()) }, None);
}

#[test]
fn arch_fields() {
    use attach::image::cubin::sm_from_flags;
    use attach::image::ptx_target_sm;
    // ABI 7: low byte (with the virtual arch in bits 16..24); ABI 8: bits 8..16.
    assert_eq!(sm_from_flags(7, 0x0050_0550), 0x50);
    assert_eq!(sm_from_flags(8, 0x0600_5a04), 90);
    assert_eq!(sm_from_flags(8, 0x0600_6402), 100);
    // Unknown ABI version: the low byte when it is an old-style sm number.
    assert_eq!(sm_from_flags(0, 0x0046_0546), 70);
    assert_eq!(sm_from_flags(0, 0x0000_7802), 120);

    assert_eq!(ptx_target_sm(".version 8.0\n.target sm_90a\n"), Some(90));
    assert_eq!(
        ptx_target_sm("  .target sm_80, texmode_independent\n"),
        Some(80)
    );
    assert_eq!(ptx_target_sm(".target compute_75\n"), Some(75));
    assert_eq!(ptx_target_sm(".version 8.0\n"), None);
}
