//! Golden files: `jit/filetests/lower/*.s` hold `; test ptx`, `; target sm_NN`, eBPF
//! assembly, then the expected PTX as `; ` comment lines. `BPFTIME_BLESS=1` rewrites the
//! expectations; a mismatch prints a diff. The expected PTX also goes through ptxas.

mod common;

use jit::JitOptions;
use std::path::Path;

struct Case {
    header: Vec<String>,
    asm: Vec<String>,
    expected: Vec<String>,
    sm: u32,
}

fn parse(text: &str) -> Case {
    let mut c = Case {
        header: Vec::new(),
        asm: Vec::new(),
        expected: Vec::new(),
        sm: 90,
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(';') {
            let rest = rest.strip_prefix(' ').unwrap_or(rest);
            if c.asm.is_empty()
                && c.expected.is_empty()
                && (rest.starts_with("test ") || rest.starts_with("target "))
            {
                if let Some(t) = rest.strip_prefix("target sm_") {
                    c.sm = t.trim().parse().expect("target sm_NN");
                }
                c.header.push(line.to_string());
            } else {
                c.expected.push(rest.to_string());
            }
        } else if !line.trim().is_empty() || !c.asm.is_empty() {
            c.asm.push(line.to_string());
        }
    }
    while c.asm.last().is_some_and(|l| l.trim().is_empty()) {
        c.asm.pop();
    }
    c
}

/// A unified-ish diff: the lines that differ, with line numbers.
fn diff(expected: &[String], actual: &[String]) -> String {
    let mut out = String::new();
    let n = expected.len().max(actual.len());
    for i in 0..n {
        match (expected.get(i), actual.get(i)) {
            (Some(e), Some(a)) if e == a => {}
            (e, a) => {
                if let Some(e) = e {
                    out.push_str(&format!("-{:4} {e}\n", i + 1));
                }
                if let Some(a) = a {
                    out.push_str(&format!("+{:4} {a}\n", i + 1));
                }
            }
        }
    }
    out
}

fn run_file(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).unwrap();
    let c = parse(&text);
    assert!(
        c.header.iter().any(|h| h.contains("test ptx")),
        "{}: missing `; test ptx`",
        path.display()
    );
    let insns = ebpf::asm::assemble(&c.asm.join("\n"))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = path.file_stem().unwrap().to_string_lossy().into_owned();
    let prog = ebpf::program::Program::from_insns(&name, insns);
    let opts = JitOptions {
        sm: c.sm,
        entry: false,
        ..JitOptions::default()
    };
    let ptx = jit::compile(&prog, &opts)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .text();
    let actual: Vec<String> = ptx.lines().map(str::to_string).collect();
    common::assemble(&ptx, &format!("filetest_{name}"));
    if actual == c.expected {
        return Ok(());
    }
    if std::env::var_os("BPFTIME_BLESS").is_some() {
        let mut out = c.header.join("\n");
        out.push('\n');
        out.push_str(&c.asm.join("\n"));
        out.push('\n');
        for l in &actual {
            if l.is_empty() {
                out.push_str(";\n");
            } else {
                out.push_str(&format!("; {l}\n"));
            }
        }
        std::fs::write(path, out).unwrap();
        return Ok(());
    }
    Err(format!(
        "{}: PTX differs from the expectation (BPFTIME_BLESS=1 rewrites it):\n{}",
        path.display(),
        diff(&c.expected, &actual)
    ))
}

#[test]
fn lower_golden_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("filetests/lower");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "s"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 4,
        "expected golden files in {}",
        dir.display()
    );
    let errors: Vec<String> = files.iter().filter_map(|f| run_file(f).err()).collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}
