//! Shared test support: running ptxas on generated PTX.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The ptxas to use ([`bpftime_tests::ptxas`]).
pub fn ptxas() -> Option<PathBuf> {
    bpftime_tests::ptxas()
}

/// Assembles `ptx` for sm_90; panics with ptxas's message and the numbered PTX on failure.
pub fn assemble(ptx: &str, what: &str) {
    assemble_for(ptx, what, "sm_90");
}

/// Assembles `ptx` for `arch` (`sm_80`, `sm_90a`); panics with ptxas's message and the
/// numbered PTX on failure.
pub fn assemble_for(ptx: &str, what: &str, arch: &str) {
    if let Some(Err(e)) = try_assemble_for(ptx, what, arch) {
        panic!("{e}");
    }
}

/// Assembles `ptx` for `arch`: `None` when there is no ptxas, else ptxas's verdict (the
/// error holds ptxas's message and the numbered PTX).
pub fn try_assemble_for(ptx: &str, what: &str, arch: &str) -> Option<Result<(), String>> {
    let p = ptxas()?;
    let scratch = bpftime_tests::scratch_dir("jit");
    let dir = scratch.path();
    let name: String = what
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let src = dir.join(format!("{name}.ptx"));
    std::fs::write(&src, ptx).unwrap();
    let out = Command::new(p)
        .arg(format!("-arch={arch}"))
        .arg("-o")
        .arg(dir.join(format!("{name}.cubin")))
        .arg(&src)
        .output()
        .expect("run ptxas");
    if out.status.success() {
        return Some(Ok(()));
    }
    let numbered: String = ptx
        .lines()
        .enumerate()
        .map(|(i, l)| format!("{:5} {l}\n", i + 1))
        .collect();
    Some(Err(format!(
        "ptxas rejected {what}:\n{}\n{numbered}",
        String::from_utf8_lossy(&out.stderr)
    )))
}

/// Assembles a module for its own `.target` (with its `a`/`f` suffix; sm_90 when it names
/// none), its `.version` lowered when the ptxas in use is older than the file.
pub fn assemble_declared(text: &str, what: &str) {
    let mut t = text.to_string();
    let directive = |name: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
    };
    if let (Some(max), Some(v)) = (ptxas_max_isa(), directive(".version")) {
        let parsed = v
            .split_once('.')
            .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
        if parsed.is_some_and(|v| v > max) {
            t = t.replacen(
                &format!(".version {v}"),
                &format!(".version {}.{}", max.0, max.1),
                1,
            );
        }
    }
    let arch = directive(".target")
        .and_then(|t| {
            t.split(',')
                .map(str::trim)
                .find(|x| x.starts_with("sm_"))
                .map(String::from)
        })
        .unwrap_or_else(|| "sm_90".into());
    assemble_for(&t, what, &arch);
}

/// The newest PTX ISA version the ptxas in use accepts (from `ptxas --version`'s
/// `release X.Y`), if known.
pub fn ptxas_max_isa() -> Option<(u32, u32)> {
    static MAX: std::sync::OnceLock<Option<(u32, u32)>> = std::sync::OnceLock::new();
    *MAX.get_or_init(query_max_isa)
}

fn query_max_isa() -> Option<(u32, u32)> {
    let p = ptxas()?;
    let out = Command::new(p).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rel = text.split("release ").nth(1)?;
    let (maj, rest) = rel.split_once('.')?;
    let min: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let (maj, min): (u32, u32) = (maj.trim().parse().ok()?, min.parse().ok()?);
    // CUDA 12.x ships PTX ISA 8.x (12.6: 8.5, 12.7 skipped, 12.8: 8.7, 12.9: 8.8);
    // 13.x ships 9.x.
    Some(match (maj, min) {
        (12, m) if m <= 5 => (8, m),
        (12, 6) => (8, 5),
        (12, m) => (8, m - 1),
        (13, m) => (9, m),
        (m, _) if m < 12 => (7, 8),
        _ => (u32::MAX, 0),
    })
}

/// Merges several modules into one PTX text (one ptxas run): keeps the first header, and
/// renames each module's prelude symbols apart (`bpf_h…`, `bpf_prandom_state`). The
/// programs' own names must differ.
pub fn merge(modules: &[String]) -> String {
    let mut out = String::new();
    for (k, m) in modules.iter().enumerate() {
        let body = if k == 0 {
            m.clone()
        } else {
            m.lines()
                .filter(|l| {
                    !(l.starts_with(".version")
                        || l.starts_with(".target")
                        || l.starts_with(".address_size"))
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        out.push_str(
            &body
                .replace("bpf_h", &format!("m{k}_bpf_h"))
                .replace("bpf_prandom_state", &format!("m{k}_bpf_prandom_state")),
        );
        out.push('\n');
    }
    out
}
