//! `cargo bench -p bench --bench cpu_jit`: our native JIT (`jit::cpu`) vs our interpreter
//! vs rbpf 0.4.1's x86-64 JIT, same programs, same run; and the JIT's compile time on a
//! 4096-instruction program. Prints a table and writes `bench/results/cpu_jit.{json,md}`.

use bench::{Ours, OursJit, TheirsJit, big_program, cmd, measure_all, programs, reset_rbpf_table};
use ebpf::interp::Vm;
use ebpf::program::Program;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

#[derive(Serialize)]
struct Row {
    program: String,
    interp_ns: f64,
    /// The service's configuration: verified (no bounds checks), budget metered.
    jit_ns: f64,
    /// Every access checked (`CpuJitOptions::default`, for unverified programs).
    jit_checked_ns: f64,
    /// Verified, budget not metered.
    jit_unmetered_ns: f64,
    rbpf_jit_ns: f64,
    /// interp / jit: how many times faster the JIT is than our interpreter.
    jit_vs_interp: f64,
    /// rbpf JIT / our JIT: above 1 when ours is faster.
    jit_vs_rbpf_jit: f64,
    /// Whether rbpf's JIT returned the interpreter's r0.
    rbpf_jit_correct: bool,
}

#[derive(Serialize)]
struct Report {
    date: String,
    commit: String,
    host: String,
    cpu: String,
    rows: Vec<Row>,
    compile_insns: usize,
    compile_us_median: f64,
    compile_us_min: f64,
    /// `None`: rbpf's JIT could not compile the program (its code buffer is fixed-size).
    rbpf_compile_us_median: Option<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // RUST_LOG=bpftime::jit=trace prints the machine code of every compiled function.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let batches = std::env::var("BENCH_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(21);
    let date = cmd(&["date", "-u", "+%Y-%m-%dT%H:%M:%SZ"]);
    let commit = cmd(&["git", "rev-parse", "--short", "HEAD"]);
    let host = "2-core dev machine".to_string();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    println!(
        "{:<12} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>12}",
        "program",
        "interp ns",
        "jit ns",
        "checked ns",
        "unmeter ns",
        "rbpf-jit ns",
        "interp/jit",
        "rbpf-jit/jit"
    );
    let mut rows = Vec::new();
    for p in programs() {
        if filter
            .as_ref()
            .is_some_and(|f| !p.name.contains(f.as_str()))
        {
            continue;
        }
        reset_rbpf_table();
        let mut interp = Ours::new(&p);
        let mut jit = OursJit::new(&p);
        let mut checked = OursJit::with_options(&p, &jit::cpu::CpuJitOptions::default());
        let mut unmetered = OursJit::with_options(
            &p,
            &jit::cpu::CpuJitOptions {
                meter_budget: false,
                ..jit::cpu::CpuJitOptions::verified()
            },
        );
        let mut rbpf = TheirsJit::new(&p);
        let want = interp.run();
        assert_eq!(jit.run(), want, "{}: results differ", p.name);
        assert_eq!(checked.run(), want, "{}: results differ", p.name);
        assert_eq!(unmetered.run(), want, "{}: results differ", p.name);
        // rbpf 0.4.1's JIT gets some 32-bit ALU forms wrong (alu_line); timed anyway.
        let rbpf_r0 = rbpf.run();
        reset_rbpf_table();
        let (mut a, mut b, mut c) = (|| interp.run(), || jit.run(), || rbpf.run());
        let (mut d, mut e) = (|| checked.run(), || unmetered.run());
        let t = measure_all(&mut [&mut a, &mut b, &mut c, &mut d, &mut e], batches);
        let row = Row {
            program: p.name.to_string(),
            interp_ns: t[0],
            jit_ns: t[1],
            jit_checked_ns: t[3],
            jit_unmetered_ns: t[4],
            rbpf_jit_ns: t[2],
            jit_vs_interp: t[0] / t[1],
            jit_vs_rbpf_jit: t[2] / t[1],
            rbpf_jit_correct: rbpf_r0 == want,
        };
        println!(
            "{:<12} {:>11.1} {:>11.1} {:>11.1} {:>11.1} {:>11.1} {:>10.2}x {:>11.2}x",
            row.program,
            row.interp_ns,
            row.jit_ns,
            row.jit_checked_ns,
            row.jit_unmetered_ns,
            row.rbpf_jit_ns,
            row.jit_vs_interp,
            row.jit_vs_rbpf_jit
        );
        rows.push(row);
    }

    // Compile time of a 4096-instruction program (no cache).
    let insns = big_program(4096);
    let n = insns.len();
    let prog = Program::from_insns("big", insns.clone());
    let vm = Vm::new(&prog, vec![]).expect("big program decodes");
    let opts = jit::cpu::CpuJitOptions::default();
    let mut times = Vec::new();
    for _ in 0..21 {
        let t = Instant::now();
        let p = jit::cpu::compile(&vm, &opts).expect("big program compiles");
        times.push(t.elapsed().as_secs_f64() * 1e6);
        drop(p);
    }
    let compile_us_min = times.iter().copied().fold(f64::INFINITY, f64::min);
    let compile_us_median = median(times);
    let bytes: &'static [u8] = Box::leak(ebpf::isa::insns_to_bytes(&insns).into_boxed_slice());
    // rbpf 0.4.1's JIT has a fixed-size code buffer and panics on programs this large.
    let rbpf_compile_us_median = std::panic::catch_unwind(|| {
        let mut rtimes = Vec::new();
        for _ in 0..21 {
            let mut vm = rbpf::EbpfVmRaw::new(Some(bytes)).expect("rbpf accepts the program");
            let t = Instant::now();
            vm.jit_compile().expect("rbpf compiles");
            rtimes.push(t.elapsed().as_secs_f64() * 1e6);
        }
        median(rtimes)
    })
    .ok();
    println!(
        "compile time, {n} insns: median {compile_us_median:.0} us (min {compile_us_min:.0} us); rbpf JIT {rbpf_compile_us_median:?} us"
    );
    if filter.is_some() {
        return;
    }
    let report = Report {
        date,
        commit,
        host,
        cpu,
        rows,
        compile_insns: n,
        compile_us_median,
        compile_us_min,
        rbpf_compile_us_median,
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    std::fs::create_dir_all(&dir).expect("create bench/results");
    let json = serde_json::to_string_pretty(&report).expect("serialize");
    std::fs::write(dir.join("cpu_jit.json"), json + "\n").expect("write json");
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into());
    let mut md = format!(
        "# CPU JIT vs interpreter vs rbpf 0.4.1's x86-64 JIT\n\n\
         `cargo bench -p bench --bench cpu_jit`, release build, {} ({}), {}, commit {}.\n\
         Median ns per program run over alternating batches of the five configurations (load average\n\
         at the end: {load}). Programs and helpers as in `interp_vs_rbpf.md` (`bench/src/lib.rs`).\n\
         \"JIT\" is the configuration the service and `exec` use: the program verified, so no bounds\n\
         checks (`CpuJitOptions::verified`), and the instruction budget metered exactly as the\n\
         interpreter meters it. \"checked\": every access the interpreter checks is checked too (for\n\
         unverified programs). \"unmetered\": verified, no budget. rbpf's JIT checks nothing and has\n\
         no budget. The ratios are for \"JIT\".\n\n\
         | program | interp ns/run | JIT ns/run | JIT checked | JIT unmetered | rbpf JIT ns/run | JIT vs interp (target ≥ 5×) | JIT vs rbpf JIT (target > 1×) | unmetered vs rbpf JIT | rbpf JIT r0 correct |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
        report.host, report.cpu, report.date, report.commit
    );
    for r in &report.rows {
        md.push_str(&format!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}× | {:.2}× | {:.2}× | {} |\n",
            r.program,
            r.interp_ns,
            r.jit_ns,
            r.jit_checked_ns,
            r.jit_unmetered_ns,
            r.rbpf_jit_ns,
            r.jit_vs_interp,
            r.jit_vs_rbpf_jit,
            r.rbpf_jit_ns / r.jit_unmetered_ns,
            if r.rbpf_jit_correct { "yes" } else { "no" }
        ));
    }
    md.push_str(&format!(
        "\nCompile time of a {n}-instruction program (`bench::big_program`: ALU, stack, branches), \
         21 compiles without the cache: median {:.0} µs, min {:.0} µs (target ≤ 1 ms). \
         rbpf's JIT on the same program: {}.\n",
        report.compile_us_median,
        report.compile_us_min,
        match report.rbpf_compile_us_median {
            Some(us) => format!("median {us:.0} µs"),
            None => "fails (its fixed-size code buffer overflows)".to_string(),
        }
    ));
    std::fs::write(dir.join("cpu_jit.md"), md).expect("write md");
}
