//! Loads the C programs of `tests/programs/` (compiled with clang here) and checks what the
//! ELF loader made of them against hand-read `llvm-objdump` output of the same sources.

use ebpf::asm::{assemble, disasm_insn};
use ebpf::elf::{self, ElfError, Object};
use ebpf::isa::Insn;
use ebpf::{MapKind, MapOrigin, ProgKind, Program};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `tests/programs/*.bpf.c` compiled, by stem (`add`, `calls`, ...); `None` when clang
/// is missing and not required.
fn objects() -> Option<&'static HashMap<String, Vec<u8>>> {
    static OBJS: OnceLock<Option<HashMap<String, Vec<u8>>>> = OnceLock::new();
    OBJS.get_or_init(|| {
        let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
        if Command::new(&clang).arg("--version").output().is_err() {
            if std::env::var_os("BPFTIME_REQUIRE_CLANG").is_some() {
                panic!("clang (`{clang}`) not found and BPFTIME_REQUIRE_CLANG is set");
            }
            // Straight to the stderr handle: the test harness does not capture it.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!(
                    "\n!!!!!!!! SKIPPING ELF LOADER TESTS: clang (`{clang}`) not found; set BPFTIME_REQUIRE_CLANG to make this fatal !!!!!!!!\n"
                )
                .as_bytes(),
            );
            return None;
        }
        let out = std::env::temp_dir().join(format!("bpftime-elf-tests-{}", std::process::id()));
        std::fs::create_dir_all(&out).expect("create temp dir");
        let mut objs = HashMap::new();
        let dir = repo().join("tests/programs");
        for e in std::fs::read_dir(&dir).expect("tests/programs") {
            let path = e.expect("dir entry").path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(stem) = name.strip_suffix(".bpf.c") else {
                continue;
            };
            let obj = out.join(format!("{stem}.bpf.o"));
            let st = Command::new(&clang)
                .args(["-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu"])
                .arg(format!("-I{}", repo().join("include").display()))
                .arg("-c")
                .arg(&path)
                .arg("-o")
                .arg(&obj)
                .output()
                .expect("run clang");
            assert!(
                st.status.success(),
                "clang failed on {name}:\n{}",
                String::from_utf8_lossy(&st.stderr)
            );
            objs.insert(stem.to_string(), std::fs::read(&obj).expect("read object"));
        }
        let _ = std::fs::remove_dir_all(&out);
        Some(objs)
    })
    .as_ref()
}

macro_rules! obj {
    ($name:literal) => {{
        let Some(objs) = objects() else { return };
        let bytes = objs.get($name).expect(concat!($name, ".bpf.c compiled"));
        (
            bytes,
            Object::parse(bytes, concat!($name, ".bpf.o")).expect("parse"),
        )
    }};
}

/// `(pc, src, imm, second-slot imm)` of every `ld_imm64` in the program.
fn ld_imm64s(p: &Program) -> Vec<(usize, u8, i32, i32)> {
    let mut v = Vec::new();
    let mut pc = 0;
    while pc < p.insns.len() {
        let i = p.insns[pc];
        if i.code == 0x18 {
            v.push((pc, i.src, i.imm, p.insns.get(pc + 1).map_or(0, |n| n.imm)));
            pc += 2;
        } else {
            pc += 1;
        }
    }
    v
}

/// `(pc, target pc)` of every bpf-to-bpf call.
fn local_calls(p: &Program) -> Vec<(usize, usize)> {
    p.insns
        .iter()
        .enumerate()
        .filter(|(_, i)| i.code == 0x85 && i.src == 1)
        .map(|(pc, i)| (pc, (pc as i64 + i.imm as i64 + 1) as usize))
        .collect()
}

/// Helper ids called, in order.
fn helper_calls(p: &Program) -> Vec<i32> {
    p.insns
        .iter()
        .filter(|i| i.code == 0x85 && i.src == 0)
        .map(|i| i.imm)
        .collect()
}

fn asm(text: &str) -> Vec<Insn> {
    assemble(text).expect("assemble")
}

fn cstr_at(bytes: &[u8], off: usize) -> &str {
    let rest = &bytes[off..];
    let end = rest.iter().position(|&b| b == 0).expect("NUL");
    std::str::from_utf8(&rest[..end]).expect("utf8")
}

fn role<'a>(o: &'a Object, name: &str) -> (&'a str, u64) {
    let s = o
        .sections
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("section {name} listed"));
    (s.role.as_str(), s.size)
}

#[test]
fn add_returns_a_constant() {
    let (bytes, o) = obj!("add");
    assert_eq!(o.programs.len(), 1);
    let info = &o.programs[0];
    assert_eq!(
        (
            info.name.as_str(),
            info.section.as_str(),
            &info.kind,
            info.insn_count
        ),
        ("add", "offload", &ProgKind::Offload, 2)
    );
    let p = o.program(None).expect("the only program");
    assert_eq!(p.insns, asm("r0 = 42\nexit"));
    assert_eq!(p.license.as_deref(), Some("GPL"));
    assert!(p.maps.is_empty());
    assert_eq!(
        (p.file.as_str(), p.section.as_str()),
        ("add.bpf.o", "offload")
    );
    // Same through the auto-detecting entry point, by function and by section name.
    for name in [None, Some("add"), Some("offload")] {
        let q = elf::load(bytes, "add.bpf.o", name).expect("load");
        assert_eq!(q.insns, p.insns);
        assert_eq!(q.name, "add");
    }
    assert_eq!(role(&o, "offload"), ("program", 16));
    assert_eq!(role(&o, "license"), ("license", 4));
    assert_eq!(role(&o, ".BTF").0, "btf");
    assert_eq!(role(&o, ".symtab").0, "symtab");
    assert_eq!(role(&o, ".strtab").0, "strtab");
    assert_eq!(role(&o, ".text"), ("text", 0));
    assert_eq!(role(&o, ".debug_info").0, "debug");
    assert_eq!(role(&o, ".rel.debug_info").0, "reloc");
}

#[test]
fn vec_add_reads_ctx_fields_and_has_no_maps() {
    let (_, o) = obj!("vec_add");
    let p = o.program(Some("vec_add")).expect("vec_add");
    assert_eq!(p.kind, ProgKind::Offload);
    assert!(p.maps.is_empty());
    assert!(ld_imm64s(&p).is_empty());
    assert_eq!(p.insns.last(), asm("exit").first());
    // data, data_end, out, out_end are all loaded from r1 (u64 loads at 0, 8, 16, 24).
    let mut offs: Vec<i16> = p
        .insns
        .iter()
        .filter(|i| i.code == 0x79 && i.src == 1)
        .map(|i| i.off)
        .collect();
    offs.sort();
    assert_eq!(offs, vec![0, 8, 16, 24]);
    assert_eq!(o.programs[0].insn_count, p.insns.len());
}

#[test]
fn filter_is_the_only_offload_program() {
    let (_, o) = obj!("filter");
    let p = o.program(None).expect("only program");
    assert_eq!(
        (p.name.as_str(), p.section.as_str()),
        ("filter", "offload/filter")
    );
    assert_eq!(p.kind, ProgKind::Offload);
    // Reads the key at +0 and the flag byte at +8 of the record.
    assert!(p.insns.iter().any(|i| i.code == 0x71 && i.off == 8));
    assert!(
        p.insns
            .iter()
            .any(|i| i.code == 0x79 && i.off == 48 && i.src == 1)
    ); // args[0]
}

#[test]
fn counter_btf_maps_and_map_relocations() {
    let (_, o) = obj!("counter");
    let names: Vec<&str> = o.maps.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["counts", "seen", "per_thread"]);
    let shape: Vec<_> = o
        .maps
        .iter()
        .map(|m| {
            (
                m.kind,
                m.key_size,
                m.value_size,
                m.max_entries,
                m.flags,
                m.origin,
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (MapKind::Array, 4, 8, 16, 0, MapOrigin::Btf),
            (MapKind::Hash, 8, 16, 1024, 1, MapOrigin::Btf),
            (MapKind::PerThreadArray, 4, 8, 4, 0, MapOrigin::Btf),
        ]
    );
    assert!(o.maps.iter().all(|m| m.init.is_none()));
    assert_eq!(o.license.as_deref(), Some("Dual MIT/GPL"));
    assert_eq!(role(&o, ".maps").0, "maps");

    let p = o.program(None).expect("counter");
    assert_eq!(p.maps, o.maps);
    // Map references: counts, seen (lookup), seen (update), per_thread; each a map_idx with
    // a zero second slot, each followed (before the next ld_imm64) by a map helper call.
    let refs: Vec<_> = ld_imm64s(&p)
        .into_iter()
        .filter(|&(_, src, _, _)| src != 0)
        .collect();
    let idx: Vec<(u8, i32, i32)> = refs.iter().map(|&(_, s, i, n)| (s, i, n)).collect();
    assert_eq!(idx, [(5, 0, 0), (5, 1, 0), (5, 1, 0), (5, 2, 0)]);
    for &(pc, _, imm, _) in &refs {
        assert_eq!(
            p.insns[pc].dst,
            1,
            "map pointer goes to r1: {}",
            disasm_insn(&p.insns, pc)
        );
        let call = p.insns[pc + 2..]
            .iter()
            .find(|i| i.code == 0x85)
            .expect("a call follows");
        assert!(
            [1, 2].contains(&call.imm),
            "map {imm} is passed to lookup or update"
        );
    }
    assert_eq!(helper_calls(&p), [1, 1, 2, 1]);
}

#[test]
fn legacy_maps() {
    let (_, o) = obj!("legacy_map");
    let shape: Vec<_> = o
        .maps
        .iter()
        .map(|m| {
            (
                m.name.as_str(),
                m.kind,
                m.key_size,
                m.value_size,
                m.max_entries,
                m.flags,
                m.origin,
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (
                "legacy_array",
                MapKind::Array,
                4,
                8,
                8,
                0,
                MapOrigin::Legacy
            ),
            ("legacy_hash", MapKind::Hash, 4, 4, 64, 0, MapOrigin::Legacy),
        ]
    );
    assert_eq!(role(&o, "maps"), ("maps", 40));
    let p = o.program(None).expect("legacy");
    let idx: Vec<_> = ld_imm64s(&p)
        .into_iter()
        .filter(|&(_, src, _, _)| src != 0)
        .map(|(_, s, i, n)| (s, i, n))
        .collect();
    assert_eq!(idx, [(5, 0, 0), (5, 1, 0)]);
    assert_eq!(helper_calls(&p), [1, 2]);
}

#[test]
fn globals_become_one_entry_arrays() {
    let (_, o) = obj!("globals");
    let table: Vec<u8> = [3u32, 5, 7, 11]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let shape: Vec<_> = o
        .maps
        .iter()
        .map(|m| {
            (
                m.name.as_str(),
                m.kind,
                m.key_size,
                m.value_size,
                m.max_entries,
                m.origin,
                m.init.clone(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (
                ".rodata",
                MapKind::Array,
                4,
                16,
                1,
                MapOrigin::GlobalData { writable: false },
                Some(table)
            ),
            (
                ".data",
                MapKind::Array,
                4,
                8,
                1,
                MapOrigin::GlobalData { writable: true },
                Some(100u64.to_le_bytes().to_vec())
            ),
            (
                ".bss",
                MapKind::Array,
                4,
                8,
                1,
                MapOrigin::GlobalData { writable: true },
                Some(vec![0; 8])
            ),
        ]
    );
    assert!(!o.maps[0].writable_by_prog());
    assert!(o.maps[1].writable_by_prog());
    for s in [".rodata", ".data", ".bss"] {
        assert_eq!(role(&o, s).0, "data");
    }
    assert_eq!(role(&o, ".bss").1, 8);
    let p = o.program(None).expect("globals");
    assert_eq!(o.programs[0].insn_count, 19); // 152-byte section
    let mut refs: Vec<_> = ld_imm64s(&p)
        .into_iter()
        .map(|(_, s, i, n)| (s, i, n))
        .collect();
    refs.sort();
    // table (.rodata), calls (.data), total (.bss): map_idx_value, offset 0 each.
    assert_eq!(refs, [(6, 0, 0), (6, 1, 0), (6, 2, 0)]);
}

#[test]
fn printk_format_strings_are_rodata_offsets() {
    let (_, o) = obj!("printk");
    assert_eq!(o.maps.len(), 1);
    let ro = &o.maps[0];
    assert_eq!((ro.name.as_str(), ro.value_size), (".rodata", 45));
    let init = ro.init.as_ref().expect("rodata bytes");
    let p = o.program(None).expect("printk");
    let refs = ld_imm64s(&p);
    let fmts: Vec<&str> = refs
        .iter()
        .map(|&(_, src, imm, off)| {
            assert_eq!((src, imm), (6, 0));
            cstr_at(init, off as usize)
        })
        .collect();
    assert_eq!(fmts, ["hello", "index %llu of %llu", "args %llu %llu %llu"]);
    // r2 = sizeof(fmt) before each trace_printk call.
    for &(pc, _, _, off) in &refs {
        let len = p.insns[pc + 2..]
            .iter()
            .find(|i| i.code == 0xb7 && i.dst == 2)
            .expect("r2 = len")
            .imm;
        assert_eq!(len as usize, cstr_at(init, off as usize).len() + 1);
    }
    assert_eq!(helper_calls(&p), [6, 6, 6]);
}

#[test]
fn gpu_helpers_and_string_literal() {
    let (_, o) = obj!("gpu_helpers");
    let p = o.program(None).expect("gpu_probe");
    assert_eq!(p.kind, ProgKind::Kprobe("vecadd".into()));
    let mut ids = helper_calls(&p);
    ids.sort();
    ids.dedup();
    assert_eq!(ids, (501..=511).collect::<Vec<_>>());
    assert_eq!(o.maps.len(), 1);
    assert_eq!(o.maps[0].name, ".rodata.str1.1");
    assert_eq!(o.maps[0].origin, MapOrigin::GlobalData { writable: false });
    let refs = ld_imm64s(&p);
    assert_eq!(refs.len(), 1);
    let (pc, src, imm, off) = refs[0];
    assert_eq!((src, imm, p.insns[pc].dst), (6, 0, 1));
    assert_eq!(
        cstr_at(o.maps[0].init.as_ref().unwrap(), off as usize),
        "hello from the gpu"
    );
    // puts (501) is the next call after the string load.
    assert_eq!(p.insns[pc + 2].imm, 501);
}

#[test]
fn void_subprograms_verify_and_run() {
    // clang leaves r0 unset in `static void __noinline` functions (see
    // tests/programs/void_call.bpf.c); Linux checks r0 only at the main program's exit.
    let (_, o) = obj!("void_call");
    let p = o.program(Some("void_call")).expect("void_call");
    let first_sub = local_calls(&p)
        .iter()
        .map(|&(_, t)| t)
        .min()
        .expect("the program makes local calls");
    // LD, LDX, ALU and ALU64 write their dst.
    let writes_r0 = |i: &Insn| i.dst == 0 && matches!(i.code & 7, 0 | 1 | 4 | 7);
    assert!(
        !p.insns[first_sub..].iter().any(writes_r0),
        "the callees are expected never to set r0:\n{}",
        ebpf::asm::disasm(&p.insns)
    );
    let v = ebpf::verifier::verify(&p, &ebpf::verifier::VerifyOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{}", e.log));
    assert!(v.stack_depths.len() >= 4, "{:?}", v.stack_depths);
    let vm = ebpf::interp::Vm::new(&p, vec![]).expect("decodes");
    let mut env = ebpf::interp::Env::new(0);
    let mut out = [0u8; 8];
    let r0 = vm
        .run_job(&[], &mut out, 0, 1, [10, 3, 0, 0], &mut env)
        .expect("runs");
    // (10 + 5) * 2 + 3 + 1
    assert_eq!(r0, 34);
    assert_eq!(u64::from_le_bytes(out), 34);
}

#[test]
fn calls_link_callees_once() {
    let (_, o) = obj!("calls");
    assert_eq!(role(&o, ".text"), ("text", 14 * 8));
    let names: Vec<&str> = o.programs.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["calls", "calls2"],
        ".text functions are not programs"
    );
    match o.program(None) {
        Err(ElfError::NoProgram { candidates, .. }) => {
            assert_eq!(candidates, ["calls (offload)", "calls2 (offload/cube)"])
        }
        other => panic!("expected NoProgram, got {other:?}"),
    }
    let square = asm("r0 = r1\nr0 *= r0\nexit");

    // calls -> square, sum_sq -> square: 12 + 3 + 7 slots, square once, cube absent.
    let p = o.program(Some("calls")).expect("calls");
    assert_eq!(p.insns.len(), 12 + 3 + 7);
    let calls = local_calls(&p);
    assert_eq!(calls.len(), 4);
    let targets: Vec<usize> = calls.iter().map(|&(_, t)| t).collect();
    // Program calls square (placed first, at 12) and sum_sq (at 15); sum_sq calls square
    // twice.
    assert_eq!(targets, [12, 15, 12, 12]);
    assert_eq!(&p.insns[12..15], &square[..]);
    assert_eq!(p.insns[15], asm("r6 = r2")[0]);
    assert_eq!(
        p.insns.windows(3).filter(|w| *w == &square[..]).count(),
        1,
        "square appended once"
    );
    // Every call lands inside the program.
    for (pc, t) in calls {
        assert!(t < p.insns.len(), "call at {pc} targets {t}");
    }

    // calls2 -> cube -> square: 4 + 4 + 3 slots.
    let p2 = o
        .program(Some("offload/cube"))
        .expect("calls2 by section name");
    assert_eq!(p2.name, "calls2");
    assert_eq!(p2.insns.len(), 4 + 4 + 3);
    let targets: Vec<usize> = local_calls(&p2).iter().map(|&(_, t)| t).collect();
    assert_eq!(targets, [4, 8]);
    assert_eq!(&p2.insns[8..11], &square[..]);
    assert_eq!(p2.insns[4], asm("r6 = r1")[0]);
}

#[test]
fn multi_programs_kinds_and_choice() {
    let (_, o) = obj!("multi");
    let progs: Vec<_> = o
        .programs
        .iter()
        .map(|p| {
            (
                p.name.as_str(),
                p.section.as_str(),
                p.kind.clone(),
                p.insn_count,
            )
        })
        .collect();
    assert_eq!(
        progs,
        [
            (
                "on_entry",
                "kprobe/vecadd",
                ProgKind::Kprobe("vecadd".into()),
                2
            ),
            (
                "on_exit",
                "kretprobe/vecadd",
                ProgKind::Kretprobe("vecadd".into()),
                2
            ),
            ("on_foo", "uprobe/foo", ProgKind::Uprobe("foo".into()), 2),
            ("xdp_pass", "xdp", ProgKind::Other("xdp".into()), 2),
            ("pair_a", "offload/pair", ProgKind::Offload, 3),
            ("pair_b", "offload/pair", ProgKind::Offload, 6),
        ]
    );
    assert!(
        matches!(o.program(None), Err(ElfError::NoProgram { ref candidates, .. }) if candidates.len() == 6)
    );
    let by = |n: &str| o.program(Some(n)).expect(n);
    assert_eq!(by("xdp").name, "xdp_pass");
    assert_eq!(by("xdp").insns, asm("r0 = 2\nexit"));
    assert_eq!(by("kretprobe/vecadd").name, "on_exit");
    assert_eq!(by("on_exit").insns, asm("r0 = 2\nexit"));
    assert_eq!(by("kprobe/vecadd").insns, asm("r0 = 1\nexit"));
    assert_eq!(by("uprobe/foo").insns, asm("r0 = 3\nexit"));
    // Two functions in one section are split at the symbol boundary.
    assert_eq!(
        by("pair_a").insns,
        asm("r0 = *(u64 *)(r1 + 48)\nr0 += 10\nexit")
    );
    // pair_b calls pair_a (R_BPF_64_32 against the global symbol, imm -1): pair_a is
    // appended after pair_b's 6 slots and the call lands on its first slot.
    let pb = by("pair_b");
    let pair_a = asm("r0 = *(u64 *)(r1 + 48)\nr0 += 10\nexit");
    assert_eq!(pb.insns.len(), 6 + 3);
    assert_eq!(local_calls(&pb), [(1, 6)]);
    assert_eq!(&pb.insns[6..], &pair_a[..]);
    assert_eq!(pb.insns[0], asm("r6 = *(u64 *)(r1 + 56)")[0]);
    match o.program(Some("offload/pair")) {
        Err(ElfError::Ambiguous {
            name, candidates, ..
        }) => {
            assert_eq!(name, "offload/pair");
            assert_eq!(candidates, ["pair_a", "pair_b"]);
        }
        other => panic!("expected Ambiguous, got {other:?}"),
    }
    let e = o.program(Some("nope")).unwrap_err();
    assert!(matches!(e, ElfError::UnknownProgram { .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("`nope`") && msg.contains("on_foo (uprobe/foo)"),
        "{msg}"
    );
}

#[test]
fn ringbuf_map_and_calls() {
    let (_, o) = obj!("ringbuf");
    assert_eq!(o.maps.len(), 1);
    let m = &o.maps[0];
    assert_eq!(
        (
            m.name.as_str(),
            m.kind,
            m.key_size,
            m.value_size,
            m.max_entries,
            m.origin
        ),
        ("events", MapKind::RingBuf, 0, 0, 4096, MapOrigin::Btf)
    );
    let p = o.program(None).expect("ringbuf");
    let refs: Vec<_> = ld_imm64s(&p)
        .into_iter()
        .map(|(_, s, i, n)| (s, i, n))
        .collect();
    assert_eq!(refs, [(5, 0, 0), (5, 0, 0)]);
    assert_eq!(helper_calls(&p), [131, 133, 132, 130]);
}

#[test]
fn loop_is_not_unrolled() {
    let (_, o) = obj!("loop");
    let p = o.program(None).expect("loop");
    let back_edges = p
        .insns
        .iter()
        .filter(|i| (i.code & 0x07) == 0x05 && i.code != 0x85 && i.code != 0x95 && i.off < 0)
        .count();
    assert!(back_edges >= 2, "two loops, found {back_edges} back edges");
    assert!(p.insns.len() < 40, "not unrolled: {} slots", p.insns.len());
}

#[test]
fn every_program_of_every_object_links() {
    let Some(objs) = objects() else { return };
    assert!(objs.len() >= 12, "{} objects", objs.len());
    for (name, bytes) in objs {
        let o = Object::parse(bytes, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            o.license.as_deref().map(|l| !l.is_empty()),
            Some(true),
            "{name}"
        );
        assert!(!o.programs.is_empty(), "{name}");
        for info in &o.programs {
            let p = o
                .program(Some(&info.name))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(p.insns.len() >= info.insn_count);
            // No ELF-style references survive: every ld_imm64 is a constant or index form.
            for (pc, src, imm, _) in ld_imm64s(&p) {
                assert!([0, 5, 6].contains(&src), "{name}:{pc} src {src}");
                if src != 0 {
                    assert!((imm as usize) < p.maps.len(), "{name}:{pc} map {imm}");
                }
            }
            for (pc, t) in local_calls(&p) {
                assert!(t < p.insns.len(), "{name}:{pc} calls {t}");
            }
        }
    }
}

#[test]
fn raw_hex_and_binary() {
    let want = asm("r0 = 42\nexit");
    let hex = "# comment line\nb7 00 00 00 2a 00 00 00  # r0 = 42\n0x95,0x00,0x00,0x00 00000000\n";
    let p = elf::load_raw(hex.as_bytes(), "prog.hex").expect("hex");
    assert_eq!(p.insns, want);
    assert_eq!(
        (p.name.as_str(), p.file.as_str(), p.section.as_str()),
        ("prog", "prog.hex", "raw")
    );
    let bin = ebpf::isa::insns_to_bytes(&want);
    let q = elf::load(&bin, "dir/prog.bin", None).expect("binary");
    assert_eq!(q.insns, want);
    assert_eq!(q.file, "dir/prog.bin");
    assert_eq!(
        elf::load(&bin, "x.bin", Some("named")).unwrap().name,
        "named"
    );
}

#[test]
fn header_alone_provides_sec_and_gpu_helpers() {
    let (_, o) = obj!("minimal");
    assert_eq!(o.license.as_deref(), Some("MIT"));
    let p = o.program(None).expect("minimal");
    assert_eq!(
        (p.name.as_str(), p.section.as_str()),
        ("minimal", "offload/minimal")
    );
    assert_eq!(helper_calls(&p), [511]);
    // ctx->n is at offset 40 of struct bpftime_job_ctx.
    assert!(
        p.insns
            .iter()
            .any(|i| i.code == 0x79 && i.off == ebpf::JobCtx::N as i16)
    );
}
