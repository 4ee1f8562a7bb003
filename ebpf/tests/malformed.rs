//! Broken inputs to the loaders: every one is an `Err` with a message naming the cause,
//! never a panic. Objects are compiled from `tests/programs/` with clang and then damaged
//! at known places (found with the `object` crate's reader, independently of the loader).

use ebpf::elf::{self, ElfError, Object};
use object::read::elf::ElfFile64;
use object::{LittleEndian, Object as _, ObjectSection as _};
use proptest::prelude::*;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Compiles `tests/programs/{stem}.bpf.c`; `None` when clang is missing and not required.
fn compiled(stem: &str) -> Option<Vec<u8>> {
    static CLANG_OK: OnceLock<bool> = OnceLock::new();
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let ok = *CLANG_OK.get_or_init(|| {
        let found = Command::new(&clang).arg("--version").output().is_ok();
        if !found {
            if std::env::var_os("BPFTIME_REQUIRE_CLANG").is_some() {
                panic!("clang not found and BPFTIME_REQUIRE_CLANG is set");
            }
            // Straight to the stderr handle: the test harness does not capture it.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!(
                    "\n!!!!!!!! SKIPPING MALFORMED-ELF TESTS THAT NEED CLANG: clang (`{clang}`) not found; set BPFTIME_REQUIRE_CLANG to make this fatal !!!!!!!!\n"
                )
                .as_bytes(),
            );
        }
        found
    });
    if !ok {
        return None;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let out = std::env::temp_dir().join(format!(
        "bpftime-malformed-{}-{}-{stem}.o",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let st = Command::new(&clang)
        .args([
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-I/usr/include/x86_64-linux-gnu",
        ])
        .arg(format!("-I{}", repo.join("include").display()))
        .arg("-c")
        .arg(repo.join(format!("tests/programs/{stem}.bpf.c")))
        .arg("-o")
        .arg(&out)
        .output()
        .expect("run clang");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let bytes = std::fs::read(&out).expect("read object");
    let _ = std::fs::remove_file(&out);
    Some(bytes)
}

macro_rules! compiled {
    ($stem:literal) => {
        match compiled($stem) {
            Some(b) => b,
            None => return,
        }
    };
}

/// File range of section `name`.
fn section_range(bytes: &[u8], name: &str) -> std::ops::Range<usize> {
    let f = ElfFile64::<LittleEndian>::parse(bytes).expect("valid elf");
    let s = f
        .section_by_name(name)
        .unwrap_or_else(|| panic!("section {name}"));
    let (off, size) = s.file_range().expect("file range");
    off as usize..(off + size) as usize
}

/// `(r_offset, r_sym, r_type)` of relocation entry `i` of REL section `rel`, and its file
/// offset.
fn rel_entry(bytes: &[u8], rel: &str, i: usize) -> (usize, u64, u32, u32) {
    let r = section_range(bytes, rel);
    let at = r.start + i * 16;
    assert!(at + 16 <= r.end, "{rel} has entry {i}");
    let off = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let info = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap());
    (at, off, (info >> 32) as u32, info as u32)
}

fn set_rel(bytes: &mut [u8], at: usize, off: u64, sym: u32, ty: u32) {
    bytes[at..at + 8].copy_from_slice(&off.to_le_bytes());
    let info = ((sym as u64) << 32) | ty as u64;
    bytes[at + 8..at + 16].copy_from_slice(&info.to_le_bytes());
}

fn parse_err(bytes: &[u8], file: &str) -> ElfError {
    match Object::parse(bytes, file) {
        Ok(o) => panic!("{file}: expected an error, parsed {:?}", o.programs),
        Err(e) => e,
    }
}

#[test]
fn garbage_is_not_elf() {
    let e = parse_err(b"hello, world", "g.o");
    assert!(matches!(e, ElfError::NotElf { .. }), "{e:?}");
    assert!(e.to_string().contains("7f 45 4c 46"), "{e}");
    assert!(matches!(parse_err(b"", "empty.o"), ElfError::NotElf { .. }));
    // Through `load`, non-ELF bytes are raw bytecode: 12 binary bytes are not whole slots.
    let e = elf::load(&[0xff; 12], "g.bin", None).unwrap_err();
    assert!(matches!(e, ElfError::BadBytecode { .. }), "{e:?}");
    assert!(
        e.to_string().contains("12 bytes, not a multiple of 8"),
        "{e}"
    );
}

#[test]
fn elf_magic_with_short_or_foreign_headers() {
    let e = parse_err(b"\x7fELF", "short.o");
    assert!(matches!(e, ElfError::Malformed { .. }), "{e:?}");
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 1; // ELFCLASS32
    h[5] = 1;
    let e = parse_err(&h, "elf32.o");
    assert!(
        matches!(e, ElfError::Unsupported { .. }) && e.to_string().contains("ELF64"),
        "{e}"
    );
    h[4] = 2;
    h[5] = 2; // big-endian
    let e = parse_err(&h, "be.o");
    assert!(e.to_string().contains("little-endian"), "{e}");
}

#[test]
fn wrong_machine() {
    let mut b = compiled!("add");
    b[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    let e = parse_err(&b, "x86.o");
    match &e {
        ElfError::WrongMachine { found, name, .. } => {
            assert_eq!((*found, name.as_str()), (62, "x86-64"))
        }
        other => panic!("expected WrongMachine, got {other:?}"),
    }
    assert_eq!(
        e.to_string(),
        "x86.o: e_machine is 62 (x86-64), expected 247 (EM_BPF)"
    );
    // An executable instead of a relocatable object.
    let mut b = compiled!("add");
    b[16..18].copy_from_slice(&2u16.to_le_bytes());
    assert!(matches!(
        parse_err(&b, "exec.o"),
        ElfError::Unsupported { .. }
    ));
}

#[test]
fn truncated_at_every_cut_point() {
    let b = compiled!("globals");
    for cut in 0..b.len() {
        // Never a panic; the section table is at the end, so every strict prefix fails.
        assert!(
            Object::parse(&b[..cut], "cut.o").is_err(),
            "cut at {cut} parsed"
        );
        let _ = elf::load(&b[..cut], "cut.o", None);
    }
    assert!(Object::parse(&b, "whole.o").is_ok());
}

#[test]
fn relocation_symbol_out_of_range() {
    let mut b = compiled!("globals");
    let (at, off, _sym, ty) = rel_entry(&b, ".reloffload", 0);
    set_rel(&mut b, at, off, 9999, ty);
    let e = parse_err(&b, "globals.o");
    let msg = e.to_string();
    assert!(matches!(e, ElfError::BadRelocation { .. }), "{e:?}");
    assert!(
        msg.starts_with("globals.o:offload: insn 3: r2 = 0x0 ll: "),
        "{msg}"
    );
    assert!(msg.contains("symbol 9999"), "{msg}");
}

#[test]
fn relocation_past_section_end() {
    let mut b = compiled!("globals");
    let (at, _off, sym, ty) = rel_entry(&b, ".reloffload", 1);
    set_rel(&mut b, at, 0x1000, sym, ty);
    let msg = parse_err(&b, "globals.o").to_string();
    assert!(msg.starts_with("globals.o:offload: insn 512: "), "{msg}");
    assert!(
        msg.contains("past the end of the section (19 instructions)"),
        "{msg}"
    );
}

#[test]
fn relocation_on_non_lddw() {
    let mut b = compiled!("globals");
    let (at, _off, sym, ty) = rel_entry(&b, ".reloffload", 0);
    set_rel(&mut b, at, 0, sym, ty); // insn 0: r1 = *(u64 *)(r1 + 32)
    let e = parse_err(&b, "globals.o");
    let ElfError::BadRelocation { loc, insn, msg } = &e else {
        panic!("expected BadRelocation, got {e:?}");
    };
    assert_eq!(loc.pc, 0);
    assert_eq!(insn, "r1 = *(u64 *)(r1 + 32)");
    assert!(
        msg.contains("expects a two-slot ld_imm64") && msg.contains("found opcode 0x79"),
        "{msg}"
    );
}

#[test]
fn relocation_misaligned_and_unknown_type() {
    let mut b = compiled!("globals");
    let (at, off, sym, ty) = rel_entry(&b, ".reloffload", 0);
    set_rel(&mut b, at, off + 3, sym, ty);
    assert!(
        parse_err(&b, "g.o")
            .to_string()
            .contains("not on an instruction boundary")
    );
    set_rel(&mut b, at, off, sym, 3);
    let msg = parse_err(&b, "g.o").to_string();
    assert!(msg.contains("unsupported relocation type 3"), "{msg}");
    // A call relocation on an ld_imm64.
    set_rel(&mut b, at, off, sym, 10);
    let msg = parse_err(&b, "g.o").to_string();
    assert!(msg.contains("expects a bpf-to-bpf call"), "{msg}");
}

#[test]
fn map_relocation_between_maps() {
    let mut b = compiled!("counter");
    // Make the first map reference point 4 bytes into `counts`.
    let (at, off, _, _) = rel_entry(&b, ".reloffload", 0);
    let insn_at = section_range(&b, "offload").start + off as usize;
    b[insn_at + 4..insn_at + 8].copy_from_slice(&4i32.to_le_bytes());
    let msg = parse_err(&b, "counter.o").to_string();
    assert!(
        msg.contains("byte 4 of a map section, where no map starts"),
        "{msg}"
    );
    let _ = at;
}

#[test]
fn call_into_the_middle_of_a_function() {
    let mut b = compiled!("calls");
    // The call in `calls2` (offload/cube, insn 2) targets .text slot 10 (cube) via
    // imm 9 against the section symbol; imm 10 lands on cube's second slot.
    let r = section_range(&b, "offload/cube");
    let at = r.start + 2 * 8;
    assert_eq!(b[at], 0x85);
    b[at + 4..at + 8].copy_from_slice(&10i32.to_le_bytes());
    let o = Object::parse(&b, "calls.o").expect("parse is fine; linking is not");
    let msg = o.program(Some("calls2")).unwrap_err().to_string();
    assert!(
        msg.starts_with("calls.o:offload/cube: insn 2: call pc+10: "),
        "{msg}"
    );
    assert!(
        msg.contains("slot 11 of `.text`") && msg.contains("first slot of a function"),
        "{msg}"
    );
    // Past the end of .text.
    b[at + 4..at + 8].copy_from_slice(&1000i32.to_le_bytes());
    let o = Object::parse(&b, "calls.o").expect("parse");
    assert!(o.program(Some("calls2")).is_err());
    // `calls` is unaffected.
    assert!(o.program(Some("calls")).is_ok());
}

#[test]
fn bad_btf_and_bad_map_type() {
    let mut b = compiled!("counter");
    let r = section_range(&b, ".BTF");
    b[r.start] ^= 0xff;
    let e = parse_err(&b, "counter.o");
    assert!(
        matches!(e, ElfError::Btf { .. }) && e.to_string().contains("bad magic"),
        "{e}"
    );

    let mut b = compiled!("counter");
    let r = section_range(&b, ".BTF");
    // type_len far past the section.
    b[r.start + 12..r.start + 16].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let e = parse_err(&b, "counter.o");
    assert!(e.to_string().contains("runs past the end of .BTF"), "{e}");

    let mut b = compiled!("legacy_map");
    let r = section_range(&b, "maps");
    b[r.start..r.start + 4].copy_from_slice(&5u32.to_le_bytes());
    let e = parse_err(&b, "legacy.o");
    assert_eq!(
        e.to_string(),
        "map `legacy_array`: unsupported map type 5 (expected 1 hash, 2 array, 6 per-thread array or 27 ring buffer)"
    );
    let mut b = compiled!("legacy_map");
    let r = section_range(&b, "maps");
    b[r.start + 4..r.start + 8].copy_from_slice(&8u32.to_le_bytes()); // array key size 8
    assert!(
        parse_err(&b, "legacy.o")
            .to_string()
            .contains("array key size must be 4, found 8")
    );
}

#[test]
fn bad_hex_and_odd_lengths() {
    let e = elf::load_raw(b"b7 00 00 00 2a 00 00 00\n95 zz", "p.hex").unwrap_err();
    assert_eq!(
        e.to_string(),
        "p.hex: line 2: bad hex token `zz`, expected hex bytes like `b7`, `0xb7` or `b7000000`"
    );
    let e = elf::load_raw(b"b7 0", "p.hex").unwrap_err();
    assert!(e.to_string().contains("odd number of digits"), "{e}");
    let e = elf::load_raw(b"b7 00 00 00 2a 00 00", "p.hex").unwrap_err();
    assert!(
        e.to_string()
            .contains("hex text bytecode is 7 bytes, not a multiple of 8"),
        "{e}"
    );
    let e = elf::load_raw(b"# nothing\n", "p.hex").unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    let e = elf::load_raw(b"", "p.bin").unwrap_err();
    assert!(matches!(e, ElfError::BadBytecode { .. }));
    let e = elf::load_raw(&[0u8; 15], "p.bin").unwrap_err();
    assert!(e.to_string().contains("binary bytecode is 15 bytes"), "{e}");
    let e = elf::load_raw(b"0x", "p.hex").unwrap_err();
    assert!(e.to_string().contains("bad hex token `0x`"), "{e}");
}

fn objects_for_mutation() -> &'static [Vec<u8>] {
    static OBJS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    OBJS.get_or_init(|| {
        ["counter", "calls", "globals", "legacy_map", "printk"]
            .iter()
            .filter_map(|s| compiled(s))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    /// Random byte changes to valid objects: loading returns, never panics.
    #[test]
    fn mutated_objects_never_panic(
        which in 0usize..5,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let objs = objects_for_mutation();
        if objs.is_empty() {
            return Ok(());
        }
        let mut b = objs[which % objs.len()].clone();
        for (idx, v) in edits {
            let i = idx.index(b.len());
            b[i] = v;
        }
        if truncate {
            b.truncate(cut.index(b.len()));
        }
        if let Ok(o) = Object::parse(&b, "m.o") {
            for p in &o.programs {
                let _ = o.program(Some(&p.name));
            }
            let _ = o.program(None);
        }
        let _ = elf::load(&b, "m.o", None);
    }

    /// Arbitrary bytes, with and without the ELF magic, and arbitrary text.
    #[test]
    fn arbitrary_bytes_never_panic(mut b in proptest::collection::vec(any::<u8>(), 0..512), magic in any::<bool>()) {
        if magic && b.len() >= 6 {
            b[..6].copy_from_slice(b"\x7fELF\x02\x01");
        }
        let _ = elf::load(&b, "a.bin", None);
        let _ = elf::load_raw(&b, "a.bin");
    }

    #[test]
    fn arbitrary_hex_text_never_panics(s in "[0-9a-fA-Fx# ,\n\tz]{0,200}") {
        let _ = elf::load_raw(s.as_bytes(), "t.hex");
    }
}
