//! The verifier corpus format (`ebpf/tests/verifier/{accept,reject}/*.s`), shared by the
//! verifier's corpus test and the JIT's "every accepted program assembles" test.
//!
//! A file is assembly (see `ebpf::asm`) with headers in comment lines anywhere:
//!
//! ```text
//! ; error: <substring>          ; at: <pc>            ; ctx: mem 64        ; max_insns: 500
//! ; map: array key=4 value=16 entries=4 name=counts
//! ; map: hash key=8 value=8 entries=64
//! ; map: ringbuf entries=4096
//! ; map: rodata value=16 init="hello\0"
//! ; map: data value=16          (writable global data)
//! ```

use ebpf::asm::assemble;
use ebpf::program::{MapDef, MapKind, MapOrigin, Program};
use ebpf::verifier::{CtxKind, VerifyOptions};
use std::path::{Path, PathBuf};

/// One corpus file: the program with its maps, the verifier options its headers ask for,
/// and the expected error (reject corpus) with its pc.
pub struct Case {
    /// The assembled program, maps from `; map:` headers.
    pub prog: Program,
    /// `; ctx:` and `; max_insns:` applied; logging on.
    pub opts: VerifyOptions,
    /// `; error:` substring.
    pub error: Option<String>,
    /// `; at:` pc.
    pub at: Option<usize>,
}

fn unescape(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            match b[i + 1] {
                b'0' => out.push(0),
                b'n' => out.push(b'\n'),
                b'\\' => out.push(b'\\'),
                b'"' => out.push(b'"'),
                c => panic!("unknown escape \\{}", c as char),
            }
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Parses the text after `; map:`; `idx` names maps without a `name=`.
pub fn parse_map(spec: &str, idx: usize) -> MapDef {
    let (kind_word, rest) = spec.trim().split_once(' ').unwrap_or((spec.trim(), ""));
    let mut init: Option<Vec<u8>> = None;
    let mut rest = rest.to_string();
    if let Some(p) = rest.find("init=\"") {
        let tail = &rest[p + 6..];
        let end = tail.rfind('"').expect("init string closed");
        init = Some(unescape(&tail[..end]));
        rest = format!("{}{}", &rest[..p], &tail[end + 1..]);
    }
    let mut key = 0u32;
    let mut value = 0u32;
    let mut entries = 1u32;
    let mut name = format!("map{idx}");
    for kv in rest.split_whitespace() {
        let (k, v) = kv
            .split_once('=')
            .unwrap_or_else(|| panic!("bad map field {kv}"));
        match k {
            "key" => key = v.parse().unwrap(),
            "value" => value = v.parse().unwrap(),
            "entries" => entries = v.parse().unwrap(),
            "name" => name = v.to_string(),
            _ => panic!("unknown map field {k}"),
        }
    }
    let (kind, origin) = match kind_word {
        "array" => (MapKind::Array, MapOrigin::Manual),
        "hash" => (MapKind::Hash, MapOrigin::Manual),
        "percpu" => (MapKind::PerThreadArray, MapOrigin::Manual),
        "ringbuf" => (MapKind::RingBuf, MapOrigin::Manual),
        "rodata" => (MapKind::Array, MapOrigin::GlobalData { writable: false }),
        "data" => (MapKind::Array, MapOrigin::GlobalData { writable: true }),
        k => panic!("unknown map kind {k}"),
    };
    if matches!(origin, MapOrigin::GlobalData { .. }) {
        key = 4;
        entries = 1;
        if value == 0 {
            value = init.as_ref().map(|i| i.len() as u32).unwrap_or(0);
        }
        if name.starts_with("map") {
            name = if kind_word == "rodata" {
                ".rodata".into()
            } else {
                ".data".into()
            };
        }
    }
    MapDef {
        name,
        kind,
        key_size: key,
        value_size: value,
        max_entries: entries,
        flags: 0,
        origin,
        init,
    }
}

/// Reads one corpus file.
pub fn load(path: &Path) -> Case {
    let text = std::fs::read_to_string(path).unwrap();
    let mut maps = Vec::new();
    let mut opts = VerifyOptions {
        log: true,
        ..VerifyOptions::default()
    };
    let mut error = None;
    let mut at = None;
    for line in text.lines() {
        let Some(c) = line.trim().strip_prefix(';') else {
            continue;
        };
        let c = c.trim();
        if let Some(v) = c.strip_prefix("error:") {
            error = Some(v.trim().to_string());
        } else if let Some(v) = c.strip_prefix("at:") {
            at = Some(v.trim().parse().unwrap());
        } else if let Some(v) = c.strip_prefix("ctx:") {
            let v = v.trim();
            let len = v
                .strip_prefix("mem")
                .expect("ctx: mem N")
                .trim()
                .parse()
                .unwrap();
            opts.ctx = CtxKind::Mem { len };
        } else if let Some(v) = c.strip_prefix("max_insns:") {
            opts.max_insns = v.trim().parse().unwrap();
        } else if let Some(v) = c.strip_prefix("map:") {
            maps.push(parse_map(v, maps.len()));
        }
    }
    let insns = assemble(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let mut prog = Program::from_insns(&name, insns);
    prog.maps = maps;
    Case {
        prog,
        opts,
        error,
        at,
    }
}

/// The `.s` files of `ebpf/tests/verifier/<dir>`, sorted.
pub fn files(dir: &str) -> Vec<PathBuf> {
    let d = crate::repo_root().join("ebpf/tests/verifier").join(dir);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "s"))
        .collect();
    v.sort();
    v
}
