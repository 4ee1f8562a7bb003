//! The device code of the bench's GPU probes (`bench/gpu/poll_*.cu`, run with nvcc on the
//! GPU machine) compiles with NVRTC and assembles with ptxas here, so a probe that would
//! not build on the device machine fails CI instead of a device call. The device code of
//! each probe, and of the header they share (`poll_probe.cuh`), lies between its
//! `// ---- device code` and `// ---- host code ----` lines.

use std::path::Path;
use std::process::Command;

/// The probes (each defines the kernel `dispatcher`).
const PROBES: [&str; 3] = ["poll_shape", "poll_ring", "poll_overlap"];

fn device_part(text: &str, name: &str) -> String {
    let from = text
        .find("// ---- device code")
        .unwrap_or_else(|| panic!("{name}: no device-code marker"));
    let to = text
        .find("// ---- host code ----")
        .unwrap_or_else(|| panic!("{name}: no host-code marker"));
    assert!(from < to, "{name}: the markers are out of order");
    text[from..to].to_string()
}

#[test]
fn probe_device_code_compiles_and_assembles() {
    let require = std::env::var_os("BPFTIME_REQUIRE_NVRTC").is_some();
    if !device::cuda::source::nvrtc_present() {
        assert!(
            !require,
            "BPFTIME_REQUIRE_NVRTC is set but NVRTC is missing"
        );
        eprintln!("skipped: no NVRTC");
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("gpu");
    let scratch = bpftime_tests::scratch_dir("probes");
    let header = std::fs::read_to_string(dir.join("poll_probe.cuh")).unwrap();
    let common = device_part(&header, "poll_probe.cuh");
    for name in PROBES {
        let text = std::fs::read_to_string(dir.join(format!("{name}.cu"))).unwrap();
        assert!(
            text.contains("#include \"poll_probe.cuh\""),
            "{name}: the shared header"
        );
        let src = format!("{common}{}", device_part(&text, name));
        let ptx = device::cuda::source::compile_cuda(&src, name, 90)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            ptx.lines()
                .any(|l| l.contains(".entry") && l.contains("dispatcher")),
            "{name}: no dispatcher kernel"
        );
        // Every poll is a strong system-scope 16-byte load.
        assert!(
            ptx.contains("ld.relaxed.sys.global.v2.u64"),
            "{name}: the poll's load"
        );
        let Some(ptxas) = bpftime_tests::ptxas() else {
            assert!(
                std::env::var_os("BPFTIME_REQUIRE_PTXAS").is_none(),
                "BPFTIME_REQUIRE_PTXAS is set but ptxas is missing"
            );
            continue;
        };
        let src = scratch.path().join(format!("{name}.ptx"));
        std::fs::write(&src, &ptx).unwrap();
        let out = Command::new(&ptxas)
            .args(["-arch=sm_90", "-o"])
            .arg(scratch.path().join(format!("{name}.cubin")))
            .arg(&src)
            .output()
            .expect("run ptxas");
        assert!(
            out.status.success(),
            "ptxas rejected {name}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_probe_without_its_markers_is_caught() {
    let r = std::panic::catch_unwind(|| device_part("__global__ void k() {}", "bare"));
    assert!(r.is_err(), "a probe without markers must fail");
}
