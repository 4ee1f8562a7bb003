//! End-to-end tests of the `bpftime-super` binary: exit codes, output formats, messages.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bpftime-super"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("spawn bpftime-super")
}

fn run_stdin(args: &[&str], stdin: &str) -> Output {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bpftime-super");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The shipped example, as committed (the README's first command runs it).
fn example() -> String {
    bpftime_tests::repo_root()
        .join("examples/sum.bpf.o")
        .display()
        .to_string()
}

#[test]
fn exec_shipped_example_prints_r0() {
    let o = run(&[
        "exec",
        &example(),
        "--mem",
        "01000000020000000300000004000000",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "0xa\n");
}

#[test]
fn shipped_example_object_matches_its_source() {
    let Some((_, fresh)) = bpftime_tests::compile_bytes("sum") else {
        return;
    };
    let committed = std::fs::read(example()).unwrap();
    let a = ebpf::elf::load(&committed, "sum.bpf.o", None).unwrap();
    let b = ebpf::elf::load(&fresh, "sum.bpf.o", None).unwrap();
    assert_eq!(
        a.insns, b.insns,
        "examples/sum.bpf.o is stale: rebuild it from examples/sum.bpf.c"
    );
}

#[test]
fn exec_json_reports_r0_and_maps() {
    let o = run(&["exec", &example(), "--mem", "0500000006000000", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["r0"], "0xb");
    assert_eq!(v["r0_u64"], 11);
    assert_eq!(v["verified"], true);
    let calls = v["maps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "calls")
        .expect("map `calls` in the dump");
    // One call: the counter for key 0 is 1 (little-endian u64).
    assert_eq!(calls["entries"][0][1], "0100000000000000");
}

#[test]
fn exec_engines_agree_and_report_themselves() {
    let mut seen = Vec::new();
    for engine in ["jit", "interp"] {
        let o = run(&[
            "exec",
            &example(),
            "--mem",
            "0500000006000000",
            "--engine",
            engine,
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["engine"], engine);
        assert_eq!(v["compile_us"].is_u64(), engine == "jit", "{v}");
        assert!(v.get("fallback").is_none(), "{v}");
        seen.push((v["r0"].clone(), v["maps"].clone()));
    }
    assert_eq!(seen[0], seen[1]);
    // Unverified programs never reach the JIT.
    let o = run(&[
        "exec",
        &example(),
        "--mem",
        "0500000006000000",
        "--no-verify",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["engine"], "interp");
    let o = run(&["exec", &example(), "--engine", "llvm"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("unknown engine `llvm`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn exec_raw_hex_from_stdin() {
    // r0 = 42; exit
    let o = run_stdin(
        &["exec", "-"],
        "b7 00 00 00 2a 00 00 00\n95 00 00 00 00 00 00 00\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "0x2a\n");
}

#[test]
fn exec_rejected_program_names_the_instruction() {
    // r0 = *(u64 *)(r1 + 100); exit — past the end of the 80-byte job ctx.
    let o = run_stdin(
        &["exec", "-"],
        "79 10 64 00 00 00 00 00 95 00 00 00 00 00 00 00",
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("<stdin>:raw: insn 0"), "{e}");
    assert!(e.contains("r0 = *(u64 *)(r1 + 100)"), "{e}");
}

#[test]
fn exec_no_verify_still_faults_cleanly() {
    let o = run_stdin(
        &["exec", "--no-verify", "-"],
        "79 10 64 00 00 00 00 00 95 00 00 00 00 00 00 00",
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("insn 0"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn exec_job_ctx_with_input_and_output() {
    // r2 = ctx->data; r3 = ctx->data_end; r4 = r2; r4 += 8; if r4 > r3 goto fail;
    // r4 = ctx->out; r5 = ctx->out_end; r6 = r4; r6 += 8; if r6 > r5 goto fail;
    // r0 = *(u64 *)(r2 + 0); *(u64 *)(r4 + 0) = r0; exit; fail: r0 = 0; exit
    let prog = ebpf::asm::assemble(
        "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr4 = r2\nr4 += 8\nif r4 > r3 goto fail\n\
         r4 = *(u64 *)(r1 + 16)\nr5 = *(u64 *)(r1 + 24)\nr6 = r4\nr6 += 8\nif r6 > r5 goto fail\n\
         r0 = *(u64 *)(r2 + 0)\n*(u64 *)(r4 + 0) = r0\nexit\nfail:\nr0 = 0\nexit\n",
    )
    .unwrap();
    let dir = bpftime_tests::scratch_dir("cli");
    let path = dir.path().join("copy.bin");
    std::fs::write(&path, ebpf::isa::insns_to_bytes(&prog)).unwrap();
    let o = run(&[
        "exec",
        path.to_str().unwrap(),
        "--input",
        "0807060504030201",
        "--out-size",
        "8",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["r0"], "0x102030405060708");
    assert_eq!(v["out"], "0807060504030201");
}

#[test]
fn verify_rejects_unchecked_read_with_location() {
    let Some(obj) = bpftime_tests::compile("reject_unchecked") else {
        return;
    };
    let o = run(&["verify", obj.to_str().unwrap()]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("reject_unchecked.bpf.o:offload: insn 1"),
        "message names file:section: insn N: {e}"
    );
    assert!(
        e.contains("= *(u32 *)(r1 + 0)"),
        "message shows the instruction: {e}"
    );
}

#[test]
fn verify_accepts_example_and_reports_json() {
    let o = run(&["verify", &example(), "--mem-len", "16", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["ok"], true);
    assert_eq!(v[0]["program"], "sum_words");
    assert!(v[0]["insns_processed"].as_u64().unwrap() > 0);
}

#[test]
fn inspect_lists_programs_maps_sections() {
    let o = run(&["inspect", &example(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["format"], "elf");
    assert_eq!(v["license"], "Dual MIT/GPL");
    assert_eq!(v["programs"][0]["name"], "sum_words");
    assert_eq!(v["programs"][0]["section"], "offload/sum");
    let map = &v["maps"][0];
    assert_eq!(map["name"], "calls");
    assert_eq!(map["kind"], "array");
    assert_eq!(map["value_size"], 8);
    assert!(
        v["sections"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "offload/sum")
    );
    let text = run(&["inspect", &example()]);
    assert!(stdout(&text).contains("sum_words"));
}

#[test]
fn disasm_prints_every_instruction() {
    let o = run_stdin(
        &["disasm", "-"],
        "b7 00 00 00 2a 00 00 00 95 00 00 00 00 00 00 00",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("0: r0 = 42"), "{out}");
    assert!(out.contains("1: exit"), "{out}");
}

#[test]
fn bad_inputs_fail_with_a_message_not_a_panic() {
    let cases: &[(&[&str], &str)] = &[
        (&["exec", "/nonexistent.o"], "cannot read /nonexistent.o"),
        (&["exec", "-"], ""),
    ];
    for (args, expect) in cases {
        let o = run_stdin(args, "b7 00 00");
        assert!(!o.status.success(), "{args:?}");
        let e = stderr(&o);
        assert!(e.contains(expect), "{args:?}: {e}");
        assert!(!e.contains("panicked"), "{args:?}: {e}");
    }
    let o = run(&["exec", &example(), "--mem", "0g"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--mem"));
    let o = run(&["exec", &example(), "--prog", "nope"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("nope"));
    // An output placement without an output, refused before any service is asked.
    let input = std::env::temp_dir().join(format!("bpftime-cli-{}.bin", std::process::id()));
    std::fs::write(&input, [0u8; 16]).unwrap();
    let o = run(&[
        "submit",
        "--name",
        "no-such-service",
        "--prog",
        "p",
        "--input",
        input.to_str().unwrap(),
        "--record-size",
        "8",
        "--output-placement",
        "cxl:100",
    ]);
    let _ = std::fs::remove_file(&input);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--output-placement needs an output"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn jit_emits_ptx_that_ptxas_accepts() {
    let vec_add = bpftime_tests::repo_root().join("examples/vec_add.bpf.o");
    let o = run(&["jit", vec_add.to_str().unwrap(), "--arch", "sm_90"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let ptx = stdout(&o);
    assert!(ptx.contains(".target sm_90"), "{ptx}");
    assert!(ptx.contains(".version 8.0"));
    assert!(ptx.contains("bpf_prog_vec_add"));
    assert!(ptx.contains(".entry bpf_entry_vec_add"));
    let root = bpftime_tests::repo_root();
    let ptxas = root.join("scripts/ptxas");
    let found = Command::new(&ptxas).arg("--locate").output().unwrap();
    if !found.status.success() {
        assert!(
            std::env::var_os("BPFTIME_REQUIRE_PTXAS").is_none(),
            "ptxas is required but missing"
        );
        eprintln!("SKIPPING the ptxas half: no ptxas");
        return;
    }
    let scratch = bpftime_tests::scratch_dir("jit");
    let dir = scratch.path();
    let file = dir.join("sum.ptx");
    std::fs::write(&file, &ptx).unwrap();
    let st = Command::new(&ptxas)
        .args(["-arch=sm_90", "-o"])
        .arg(dir.join("sum.cubin"))
        .arg(&file)
        .status()
        .unwrap();
    assert!(st.success(), "ptxas rejected the JIT's PTX");
}

#[test]
fn jit_cubin_without_a_driver_is_a_clear_error() {
    if std::path::Path::new("/dev/nvidiactl").exists() {
        return;
    }
    let out = std::env::temp_dir().join(format!("bpftime-{}.cubin", std::process::id()));
    let vec_add = bpftime_tests::repo_root().join("examples/vec_add.bpf.o");
    let o = run(&[
        "jit",
        vec_add.to_str().unwrap(),
        "--emit",
        "cubin",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("no CUDA driver"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}
