//! git-style extensions: `bpftime-super NAME ARGS…` runs `bpftime-super-NAME ARGS…`.
//!
//! The program is looked up next to the running `bpftime-super` first (a workspace build
//! puts every binary in one `target/` folder), then on `PATH`. It replaces this process
//! (`exec`), so its output, exit status and signals are its own. Host never depends on
//! an extension (such as the `llm-cache` crate's `bpftime-super-llm-cache`).

use anyhow::{Context, Result, bail};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Where `bpftime-super-<name>` is: in `exe_dir`, else in a `path` entry (`PATH` syntax).
pub fn locate(name: &str, exe_dir: Option<&Path>, path: Option<&OsStr>) -> Option<PathBuf> {
    let file = format!("bpftime-super-{name}");
    let beside = exe_dir.map(|d| d.join(&file));
    let on_path = path
        .map(|p| {
            std::env::split_paths(p)
                .map(|d| d.join(&file))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    beside.into_iter().chain(on_path).find(|p| executable(p))
}

fn executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The command `args` (`[name, arg…]`) stands for, looked up beside the running binary
/// and on `PATH`.
pub fn command(args: &[String]) -> Result<std::process::Command> {
    let exe = std::env::current_exe().ok();
    let path = std::env::var_os("PATH");
    command_in(args, exe.as_deref().and_then(Path::parent), path.as_deref())
}

fn command_in(
    args: &[String],
    exe_dir: Option<&Path>,
    path: Option<&OsStr>,
) -> Result<std::process::Command> {
    let Some((name, rest)) = args.split_first() else {
        bail!("no command given; see `bpftime-super --help`");
    };
    let Some(prog) = locate(name, exe_dir, path) else {
        let beside = exe_dir.map_or("the bpftime-super binary's folder".into(), |d| {
            d.display().to_string()
        });
        bail!(
            "unknown command `{name}`: not a built-in command, and no executable `bpftime-super-{name}` in {beside} or on PATH; see `bpftime-super --help`"
        );
    };
    let mut c = std::process::Command::new(prog);
    c.args(rest);
    Ok(c)
}

/// Replaces this process with the extension; returns only if that fails.
pub fn run(args: &[String]) -> Result<std::process::ExitCode> {
    use std::os::unix::process::CommandExt;
    let mut c = command(args)?;
    let err = c.exec();
    Err(err).with_context(|| format!("cannot run {}", c.get_program().to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn looks_beside_the_binary_then_on_path() {
        let root = std::env::temp_dir().join(format!("bpftime-ext-{}", std::process::id()));
        let (beside, on_path, other) = (root.join("bin"), root.join("path"), root.join("other"));
        for d in [&beside, &on_path, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        let script = |dir: &Path, name: &str, body: &str| {
            let p = dir.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let a = script(&on_path, "bpftime-super-demo", "echo path \"$@\"; exit 7");
        let path = std::env::join_paths([&other, &on_path]).unwrap();
        assert_eq!(locate("demo", Some(&beside), Some(&path)), Some(a));
        let b = script(&beside, "bpftime-super-demo", "echo beside \"$@\"; exit 7");
        assert_eq!(locate("demo", Some(&beside), Some(&path)), Some(b.clone()));
        assert_eq!(locate("nope", Some(&beside), Some(&path)), None);
        // A file that is not executable does not count.
        std::fs::write(other.join("bpftime-super-plain"), "x").unwrap();
        assert_eq!(locate("plain", None, Some(&path)), None);

        // The arguments go through and the exit status comes back (spawned here; `run`
        // execs the same command).
        let args: Vec<String> = ["demo", "simulate", "--json"].map(String::from).to_vec();
        let out = command_in(&args, Some(&beside), Some(&path))
            .unwrap()
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "beside simulate --json\n"
        );
        assert_eq!(out.status.code(), Some(7));
        let e = command_in(&["nope".into()], Some(&beside), Some(&path)).unwrap_err();
        assert!(
            format!("{e:#}").contains(&beside.display().to_string()),
            "{e:#}"
        );
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn unknown_commands_say_what_was_looked_for() {
        let e = command(&["no-such-extension-xyz".into()]).unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("unknown command `no-such-extension-xyz`"),
            "{msg}"
        );
        assert!(msg.contains("bpftime-super-no-such-extension-xyz"), "{msg}");
        assert!(command(&[]).is_err());
    }
}
