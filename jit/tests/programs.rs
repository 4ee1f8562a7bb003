//! Every C test program (`tests/programs/*.bpf.c`), built with clang, goes through the JIT
//! and the PTX assembles with ptxas (all in one ptxas run).

mod common;

use jit::{JitOptions, MapBinding};

const PROGRAMS: &[(&str, &[&str])] = &[
    ("add", &["add"]),
    ("calls", &["calls", "calls2"]),
    ("counter", &["counter"]),
    // on_launch reads a stack argument with bpf_probe_read_user: host only.
    ("cuda_uprobe", &["on_htod", "on_htod_ret"]),
    ("filter", &["filter"]),
    ("frame_slots", &["frame_slots"]),
    ("globals", &["globals"]),
    ("gpu_helpers", &["gpu_probe"]),
    ("job_counter", &["job_counter"]),
    ("kprobe_all", &["all_entry", "all_exit"]),
    ("kprobe_reject", &["read_past_ctx"]),
    ("legacy_map", &["legacy"]),
    ("loop", &["loop"]),
    ("mem_claim", &["mem_claim", "entry_ticket"]),
    (
        "mem_claim_relaxed",
        &["mem_claim_relaxed", "entry_ticket_relaxed"],
    ),
    ("mem_exact", &["mem_exact"]),
    ("mem_gated", &["mem_gated"]),
    ("memprobe_all", &["mem_all"]),
    ("minimal", &["minimal"]),
    (
        "multi",
        &[
            "on_entry", "on_exit", "on_foo", "xdp_pass", "pair_a", "pair_b",
        ],
    ),
    ("pairs", &["write_pair"]),
    ("printk", &["printk"]),
    ("reject_unchecked", &["unchecked_read"]),
    ("ringbuf", &["ringbuf"]),
    ("thread_count", &["thread_count"]),
    ("uprobe_corr", &["launch_corr"]),
    // on_add reads a stack argument with bpf_probe_read_user: host only.
    (
        "uprobe_sym",
        &["on_add_ret", "on_mul", "on_mul_ret", "on_fake_sync"],
    ),
    ("vec_add", &["vec_add"]),
    ("void_call", &["void_call"]),
];

#[test]
fn every_c_program_compiles_and_assembles() {
    // Every file of tests/programs is listed above.
    let dir = bpftime_tests::repo_root().join("tests/programs");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            n.strip_suffix(".bpf.c").map(str::to_string)
        })
        .collect();
    on_disk.sort();
    let listed: Vec<String> = PROGRAMS.iter().map(|(f, _)| f.to_string()).collect();
    assert_eq!(on_disk, listed, "tests/programs changed: update PROGRAMS");

    let mut modules = Vec::new();
    for (file, progs) in PROGRAMS {
        let Some((path, bytes)) = bpftime_tests::compile_bytes(file) else {
            return;
        };
        let fname = path.file_name().unwrap().to_string_lossy().into_owned();
        for prog in *progs {
            let p = ebpf::elf::load(&bytes, &fname, Some(prog))
                .unwrap_or_else(|e| panic!("{file}/{prog}: {e}"));
            let opts = JitOptions {
                maps: p
                    .maps
                    .iter()
                    .enumerate()
                    .map(|(i, d)| {
                        MapBinding::for_def(d, 0x7f00_0000_0000 + 0x100_0000 * i as u64, 64)
                    })
                    .collect(),
                trace_buf: 0x7e00_0000_0000,
                lock_pid: 4242,
                ..JitOptions::default()
            };
            let m = jit::compile(&p, &opts).unwrap_or_else(|e| panic!("{file}/{prog}: {e}"));
            let text = m.text();
            assert!(text.contains(m.prog_func()));
            modules.push(text);
            // Again with the frame slots the verifier allows in registers, as probes are
            // compiled (programs for a job's ctx; the others keep their frame).
            let Ok(v) = ebpf::verifier::verify(&p, &ebpf::verifier::VerifyOptions::default())
            else {
                continue;
            };
            let mut q = p.clone();
            q.name = format!("{}_regs", p.name);
            let regs = JitOptions {
                stack_regs: Some(v.stack_registers()),
                ..opts
            };
            let m = jit::compile(&q, &regs).unwrap_or_else(|e| panic!("{file}/{prog} (regs): {e}"));
            let locals = |t: &str| t.matches("ld.local.").count() + t.matches("st.local.").count();
            if *file == "frame_slots" {
                assert!(
                    locals(&m.text()) * 2 < locals(&modules[modules.len() - 1]),
                    "frame_slots keeps most of its spills in registers"
                );
            }
            modules.push(m.text());
        }
    }
    common::assemble(&common::merge(&modules), "c_programs");
}

/// Every accepted-program file of the verifier's test suite (`ebpf/tests/verifier/accept/`),
/// when that directory exists: `.s` files are eBPF assembly (`;` lines are comments), `.o`
/// files ELF objects. Skipped with a message while the directory does not exist.
#[test]
fn verifier_accept_programs_compile_and_assemble() {
    let dir = bpftime_tests::repo_root().join("ebpf/tests/verifier/accept");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("SKIPPING: {} does not exist yet", dir.display());
        return;
    };
    let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut modules = Vec::new();
    for (k, f) in files.iter().enumerate() {
        let ext = f.extension().and_then(|e| e.to_str()).unwrap_or("");
        let name = format!("accept{k}");
        let p = match ext {
            "s" => {
                let mut p = bpftime_tests::corpus::load(f).prog;
                p.name = name;
                p
            }
            "o" => {
                let bytes = std::fs::read(f).unwrap();
                let mut p = ebpf::elf::load(&bytes, &f.display().to_string(), None)
                    .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                p.name = name;
                p
            }
            _ => {
                eprintln!("skipping {} (not .s or .o)", f.display());
                continue;
            }
        };
        let opts = JitOptions {
            maps: p
                .maps
                .iter()
                .enumerate()
                .map(|(i, d)| MapBinding::for_def(d, 0x7f00_0000_0000 + 0x100_0000 * i as u64, 64))
                .collect(),
            ..JitOptions::default()
        };
        let m = jit::compile(&p, &opts).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        modules.push(m.text());
    }
    if !modules.is_empty() {
        common::assemble(&common::merge(&modules), "verifier_accept");
    }
}
