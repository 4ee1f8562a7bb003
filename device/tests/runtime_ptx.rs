//! The persistent runtime compiles (NVRTC) and assembles (ptxas), together with a
//! generation's dispatch and JIT-compiled programs, on a machine with no GPU.
//!
//! NVRTC comes from the `nvidia-cuda-nvrtc-cu12` wheel that `scripts/test` installs (its
//! `lib/` on `LD_LIBRARY_PATH`); ptxas from `scripts/ptxas`. Without them the test says so
//! and passes, unless `BPFTIME_REQUIRE_NVRTC` is set (as `scripts/test` does).

use device::cuda::source;
use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tools_or_skip() -> bool {
    let ptxas = Command::new(repo().join("scripts/ptxas"))
        .arg("--locate")
        .output()
        .is_ok_and(|o| o.status.success());
    let ok = ptxas && source::nvrtc_present();
    if !ok {
        assert!(
            std::env::var_os("BPFTIME_REQUIRE_NVRTC").is_none(),
            "BPFTIME_REQUIRE_NVRTC is set but NVRTC or ptxas is missing (scripts/test installs them)"
        );
        eprintln!("skipped: NVRTC or ptxas missing");
    }
    ok
}

fn ptxas(name: &str, text: &str) {
    ptxas_log(name, text, &[]);
}

/// Assembles `text` with ptxas and `extra` options; returns what ptxas printed.
fn ptxas_log(name: &str, text: &str, extra: &[&str]) -> String {
    let scratch = bpftime_tests::scratch_dir("rt");
    let dir = scratch.path();
    let src = dir.join(format!("{name}.ptx"));
    std::fs::write(&src, text).unwrap();
    let out = Command::new(repo().join("scripts/ptxas"))
        .args(["-arch=sm_90", "-c"])
        .args(extra)
        .arg("-o")
        .arg(dir.join(format!("{name}.o")))
        .arg(&src)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "ptxas rejected {name}:\n{log}");
    log
}

/// Both bare mailbox kernels (row a's baselines) compile and assemble; the one-load poll is
/// one 16-byte acquire load, the probe's two volatile ones.
#[test]
fn mailbox_baselines_compile_and_assemble() {
    use device::cuda::baseline::{MailboxPoll, mailbox_ptx};
    if !tools_or_skip() {
        return;
    }
    let one = mailbox_ptx(MailboxPoll::OneLoad, 90).expect("NVRTC compiles the one-load mailbox");
    assert!(one.contains("ld.acquire.sys.v2.u64"), "{one}");
    ptxas("mailbox_one_load", &one);
    let probe = mailbox_ptx(MailboxPoll::Probe, 90).expect("NVRTC compiles the probe's mailbox");
    assert!(
        !probe.contains("ld.acquire.sys.v2.u64") && probe.contains("ld.volatile"),
        "{probe}"
    );
    ptxas("mailbox_probe", &probe);
}

#[test]
fn runtime_compiles_and_assembles() {
    if !tools_or_skip() {
        return;
    }
    let ptx = source::compile_runtime(90).expect("NVRTC compiles the runtime");
    assert!(
        ptx.contains(".entry bpft_persistent"),
        "kernel entry missing"
    );
    assert!(
        ptx.contains("fence.acq_rel.sys"),
        "a job seen by the relaxed poll must be acquired with a fence"
    );
    assert!(
        ptx.contains("st.release.sys"),
        "completions are published with release"
    );
    ptxas("runtime", &ptx);
    let a = source::NativeFuncs {
        prog: "bpf_prog_a".into(),
        chunk_loop: "bpf_loop_a".into(),
        one: "bpf_one_a".into(),
    };
    let dispatch = source::dispatch_ptx(&[a], (8, 0), 90);
    // The dispatch declares an extern function: assemble it as relocatable code.
    ptxas("dispatch", &dispatch);
}

/// The measured alternatives kept as knobs still compile and assemble: several dispatcher
/// warps, the per-lane strong slot read after the fence, the warp's cooperative read with `.cv`
/// loads, and the sequentially consistent completion fence. The cooperative read's loads
/// (the default's, `ld_slot_v2`) are there with the right flavour, or absent.
#[test]
fn the_runtime_knobs_compile_and_assemble() {
    if !tools_or_skip() {
        return;
    }
    // The instruction of each `ld_slot_v2` (its inline asm loads from its own register slot_g).
    let slot_loads = |ptx: &str| -> Vec<String> {
        ptx.lines()
            .filter(|l| l.contains("[slot_g]"))
            .filter_map(|l| l.split(';').find(|i| i.contains("[slot_g]")))
            .map(|i| i.split_whitespace().next().unwrap_or("").to_string())
            .collect()
    };
    let default = source::compile_runtime_with(90, "").expect("NVRTC compiles the runtime");
    let loads = slot_loads(&default);
    assert!(
        !loads.is_empty() && loads.iter().all(|l| l == "ld.global.v2.u64"),
        "the default reads few slots together with plain loads: {loads:?}"
    );
    // Program entries: four 16-byte loads from L2 (BPFT_ENTRY_STRONG 1: eight strong ones).
    assert!(default.contains("ld.global.cg.v2.u64"), "entries from L2");
    for (name, pre, flavour) in [
        (
            "one_dispatcher",
            "#define BPFT_DISPATCHERS 1",
            Some("ld.global.v2.u64"),
        ),
        (
            "poll_acquire",
            "#define BPFT_POLL_ACQUIRE 1",
            Some("ld.global.v2.u64"),
        ),
        (
            "poll_narrow",
            "#define BPFT_POLL_WHOLE 0",
            Some("ld.global.v2.u64"),
        ),
        (
            "eight_dispatchers",
            "#define BPFT_POLL_WHOLE 1\n#define BPFT_DISPATCHERS 8",
            Some("ld.global.v2.u64"),
        ),
        (
            "dispatchers_too_many",
            "#define BPFT_DISPATCHERS 64",
            Some("ld.global.v2.u64"),
        ),
        ("per_lane", "#define BPFT_TWO_PHASE 1", None),
        (
            "coop_read_cv",
            "#define BPFT_SLOT_LD \"ld.global.cv\"",
            Some("ld.global.cv.v2.u64"),
        ),
        (
            "hop_split",
            "#define BPFT_HOP_SPLIT 1",
            Some("ld.global.v2.u64"),
        ),
        (
            "hop_split_2",
            "#define BPFT_HOP_SPLIT 2",
            Some("ld.global.v2.u64"),
        ),
        (
            "head_after_batch",
            "#define BPFT_HEAD_SHADOW 0",
            Some("ld.global.v2.u64"),
        ),
        (
            "dispatchers_from_block_2",
            "#define BPFT_FIRST_BLOCK 2",
            Some("ld.global.v2.u64"),
        ),
        (
            "input_copied",
            "#define BPFT_SHARED_INPUT 0",
            Some("ld.global.v2.u64"),
        ),
        (
            "head_and_stop_every_poll",
            "#define BPFT_HEAD_EVERY 1\n#define BPFT_STOP_EVERY 1",
            Some("ld.global.v2.u64"),
        ),
        (
            "hop_split_3",
            "#define BPFT_HOP_SPLIT 3",
            Some("ld.global.v2.u64"),
        ),
        (
            "hop_split_4",
            "#define BPFT_HOP_SPLIT 4",
            Some("ld.global.v2.u64"),
        ),
        (
            "entry_strong",
            "#define BPFT_ENTRY_STRONG 1",
            Some("ld.global.v2.u64"),
        ),
        (
            "prefetch_tma",
            "#define BPFT_PREFETCH 1",
            Some("ld.global.v2.u64"),
        ),
        (
            "prefetch_lines",
            "#define BPFT_PREFETCH 2\n#define BPFT_SUB 128",
            Some("ld.global.v2.u64"),
        ),
        (
            "warp_chunks",
            "#define BPFT_WARP_CHUNKS 8",
            Some("ld.global.v2.u64"),
        ),
        (
            "fence_first_done_last",
            "#define BPFT_LAZY_FENCE 0\n#define BPFT_DONE_EARLY 0",
            Some("ld.global.v2.u64"),
        ),
        (
            "late_index",
            "#define BPFT_EARLY_INDEX 0",
            Some("ld.global.v2.u64"),
        ),
        (
            "no_entry_cache",
            "#define BPFT_ENTRY_CACHE 0",
            Some("ld.global.v2.u64"),
        ),
        (
            "lane_slot_check",
            "#define BPFT_WHOLE_CHECK 0",
            Some("ld.global.v2.u64"),
        ),
        (
            "sc_fence",
            "#define BPFT_COMPLETION_FENCE \"fence.sc.sys;\"",
            Some("ld.global.v2.u64"),
        ),
        (
            "no_log_warp",
            "#define BPFT_LOG_WARP 0",
            Some("ld.global.v2.u64"),
        ),
        (
            "log_warp_for_batches",
            "#define BPFT_LOG_WARP_MIN 2",
            Some("ld.global.v2.u64"),
        ),
        (
            "fixed_poll_wait",
            "#define BPFT_POLL_UP 0\n#define BPFT_POLL_DOWN 0\n#define BPFT_POLL_AFTER_NS 700",
            Some("ld.global.v2.u64"),
        ),
        (
            "no_poll_wait",
            "#define BPFT_POLL_ADAPT 0",
            Some("ld.global.v2.u64"),
        ),
        (
            "desc_in_registers",
            "#define BPFT_DESC_SHARED 0",
            Some("ld.global.v2.u64"),
        ),
        (
            "worker_acquire",
            "#define BPFT_WORKER_RELAXED 0\n#define BPFT_WORKER_NAP 100000",
            Some("ld.global.v2.u64"),
        ),
        (
            "one_block_an_sm",
            "#define BPFT_MIN_BLOCKS 1",
            Some("ld.global.v2.u64"),
        ),
        (
            "cycle_split_run",
            "#define BPFT_HOP_SPLIT 5",
            Some("ld.global.v2.u64"),
        ),
        (
            "cycle_split_loop",
            "#define BPFT_HOP_SPLIT 6",
            Some("ld.global.v2.u64"),
        ),
        (
            "cycle_split_fine_check",
            "#define BPFT_HOP_SPLIT 7",
            Some("ld.global.v2.u64"),
        ),
        (
            "cycle_split_fine_run",
            "#define BPFT_HOP_SPLIT 8",
            Some("ld.global.v2.u64"),
        ),
        (
            "no_lone_path",
            "#define BPFT_FAST_LONE 0",
            Some("ld.global.v2.u64"),
        ),
        (
            "lone_check_by_warp_reductions",
            "#define BPFT_LONE_REDUX 1",
            Some("ld.global.v2.u64"),
        ),
        (
            "pad_rounds",
            "#define BPFT_PAD_ROUNDS 4",
            Some("ld.global.v2.u64"),
        ),
        (
            "cycle_split_completion",
            "#define BPFT_HOP_SPLIT 9",
            Some("ld.global.v2.u64"),
        ),
        (
            "lone_check_then_terms",
            "#define BPFT_LONE_ORDER 0",
            Some("ld.global.v2.u64"),
        ),
        (
            "no_host_stage",
            "#define BPFT_HOST_STAGE 0",
            Some("ld.global.v2.u64"),
        ),
        (
            "pad_rounds_loop",
            "#define BPFT_PAD_ROUNDS 4\n#define BPFT_PAD_LOOP 1",
            Some("ld.global.v2.u64"),
        ),
    ] {
        let ptx = source::compile_runtime_with(90, pre).expect("NVRTC compiles the variant");
        assert!(
            ptx.contains("fence.acq_rel.sys"),
            "{name}: the acquire fence"
        );
        let loads = slot_loads(&ptx);
        match flavour {
            None => assert!(loads.is_empty(), "{name}: {loads:?}"),
            Some(f) => assert!(
                !loads.is_empty() && loads.iter().all(|l| l == f),
                "{name}: {loads:?}"
            ),
        }
        // The log warp's hand-off: a release at CTA scope, only where there is a log warp.
        assert_eq!(
            ptx.contains("st.release.cta"),
            name != "no_log_warp",
            "{name}: the log ring's release"
        );
        assert_eq!(
            ptx.contains("%clock64"),
            name.starts_with("cycle_split") || name.starts_with("pad_rounds"),
            "{name}: the SM clock only in the cycle splits (and the pad's seed)"
        );
        // A worker warp's staging stores (stage_chunk), unless it is turned off.
        assert_eq!(
            ptx.contains("[sg_g]"),
            name != "no_host_stage",
            "{name}: the host input's staging"
        );
        if name == "sc_fence" {
            assert!(ptx.contains("fence.sc.sys"), "{name}");
        }
        if name == "prefetch_tma" {
            assert!(ptx.contains("cp.async.bulk.prefetch.L2.global"), "{name}");
        }
        if name == "prefetch_lines" {
            assert!(ptx.contains("prefetch.global.L2"), "{name}");
        }
        ptxas(name, &ptx);
    }
}

#[test]
fn a_layout_the_kernel_disagrees_with_does_not_compile() {
    if !tools_or_skip() {
        return;
    }
    // Shrink the generated JobDesc: the runtime's static_asserts must reject the source.
    let bad = source::runtime_source().replace("    unsigned long long tag;\n", "");
    assert_ne!(bad, source::runtime_source(), "the tag field is gone");
    let r = cudarc::nvrtc::compile_ptx_with_opts(
        bad,
        cudarc::nvrtc::CompileOptions {
            arch: Some("compute_90"),
            options: vec!["-rdc=true".into(), "-std=c++17".into()],
            ..Default::default()
        },
    );
    let e = format!("{:?}", r.expect_err("a wrong layout must not compile"));
    assert!(e.contains("JobDesc size"), "{e}");
}

/// ptxas's spill stores for the persistent kernel (`-v`), in bytes.
fn spill_stores(name: &str, text: &str) -> u64 {
    let log = ptxas_log(name, text, &["-v"]);
    let at = log
        .find("Function properties for bpft_persistent")
        .unwrap_or_else(|| panic!("{name}: no properties for the kernel in\n{log}"));
    let line = log[at..].lines().nth(1).unwrap_or_default();
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words
        .iter()
        .position(|w| *w == "spill")
        .unwrap_or_else(|| panic!("{name}: {line}"));
    words[i - 2]
        .parse()
        .unwrap_or_else(|_| panic!("{name}: {line}"))
}

/// The lone fast path (BPFT_FAST_LONE) is a call site of the native programs of its own,
/// beside the general short path's and the worker's, and calls only through `bpft_one_fn`
/// (BPFT_ONE_CALL: one indirect call, the ctx in registers, no `bpft_native` fallback);
/// the GPU-time splits 1-4, which time the general path, turn it off. Without
/// BPFT_ONE_CALL no call goes through the table.
#[test]
fn the_lone_path_is_a_second_short_path() {
    if !tools_or_skip() {
        return;
    }
    // (bpft_native's call sites, indirect calls through bpft_one_fn)
    let calls = |pre: &str| {
        let ptx = source::compile_runtime_with(90, pre).expect("NVRTC compiles the runtime");
        (
            ptx.matches("bpft_native,").count(),
            ptx.matches(".callprototype").count(),
        )
    };
    let (on, off, split, two) = (
        calls(""),
        calls("#define BPFT_FAST_LONE 0"),
        calls("#define BPFT_HOP_SPLIT 3"),
        calls("#define BPFT_ONE_CALL 0"),
    );
    assert_eq!((on.0, on.1), (off.0, off.1 + 1), "native call sites");
    assert_eq!(split, off, "native call sites with split 3");
    assert!(
        off.1 >= 1,
        "the general short path calls through bpft_one_fn"
    );
    assert_eq!(
        two,
        (on.0 + 1, 0),
        "native call sites without BPFT_ONE_CALL"
    );
}

/// The dispatcher keeps its job's descriptor, inline words and program entry in shared
/// memory (BPFT_DESC_SHARED), so the kernel fits its 128 registers with little spilling;
/// held in registers they spilled about 800 bytes to local memory, on the dispatcher's path.
/// (In shared memory about 120: 80 before the lone fast path, whose call site keeps more
/// live across it; up to 200 while it was being written.)
#[test]
fn the_dispatcher_state_fits_in_registers() {
    if !tools_or_skip() {
        return;
    }
    let shared = spill_stores(
        "desc_shared",
        &source::compile_runtime_with(90, "").expect("NVRTC compiles the runtime"),
    );
    let regs = spill_stores(
        "desc_registers",
        &source::compile_runtime_with(90, "#define BPFT_DESC_SHARED 0")
            .expect("NVRTC compiles the variant"),
    );
    assert!(
        shared <= 256 && shared * 3 < regs,
        "spill stores: {shared} bytes with the descriptor in shared memory, {regs} in registers"
    );
}
