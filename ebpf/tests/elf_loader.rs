//! Loads the C programs of `tests/programs/` (compiled with clang here) and checks what the
//! ELF loader made of them against hand-read `llvm-objdump` output of the same sources.

use ebpf::asm::{assemble, disasm};
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
            eprintln!(
                "\n!!!!!!!! SKIPPING ELF LOADER TESTS: clang (`{clang}`) not found; set BPFTIME_REQUIRE_CLANG to make this fatal !!!!!!!!\n"
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

#[test]
fn dump_all() {
    let Some(objs) = objects() else { return };
    let mut names: Vec<_> = objs.keys().collect();
    names.sort();
    for n in names {
        let o = Object::parse(&objs[n], n).unwrap();
        eprintln!(
            "== {n}: {:?}\n maps {:?}\n license {:?}",
            o.programs, o.maps, o.license
        );
        for p in &o.programs {
            let prog = o.program(Some(&p.name)).unwrap();
            eprintln!("-- {}\n{}", p.name, disasm(&prog.insns));
        }
    }
}
