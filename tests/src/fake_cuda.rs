//! The fake `libcuda.so.1` of the attach tests (`host/tests/fake_cuda/fake_cuda.c`: no GPU
//! needed) and the test apps that reach it, built with `cc` into a folder.

use std::path::Path;
use std::process::Command;

/// Runs `cc` with `args`, panicking with its output when it fails.
pub fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("run cc");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds `dir/libcuda.so.1` (and the `libcuda.so` link), then each app of `apps`
/// (`host/tests/fake_cuda/NAME.c` → `dir/NAME`): `true` links it with `-lcuda`, `false`
/// with `-ldl` (it opens the driver itself).
pub fn build(dir: &Path, apps: &[(&str, bool)]) {
    let src = crate::repo_root().join("host/tests/fake_cuda");
    let d = dir.display().to_string();
    let s = |f: &str| src.join(f).display().to_string();
    cc(&[
        "-shared",
        "-fPIC",
        "-O1",
        "-Wl,-soname,libcuda.so.1",
        "-o",
        &format!("{d}/libcuda.so.1"),
        &s("fake_cuda.c"),
    ]);
    let _ = std::fs::remove_file(dir.join("libcuda.so"));
    std::os::unix::fs::symlink(dir.join("libcuda.so.1"), dir.join("libcuda.so"))
        .expect("link libcuda.so");
    for &(app, link_cuda) in apps {
        let (out, c) = (format!("{d}/{app}"), s(&format!("{app}.c")));
        let lib = format!("-L{d}");
        // -rdynamic: the apps' functions get names in stacks that host probes take.
        if link_cuda {
            cc(&["-O1", "-rdynamic", "-o", &out, &c, &lib, "-lcuda"]);
        } else {
            cc(&["-O1", "-rdynamic", "-o", &out, &c, "-ldl"]);
        }
    }
}
