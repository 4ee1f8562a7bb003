//! The instrumenter over the committed corpus of real images (nvcc at four archs, -lineinfo,
//! -G, Numba, Triton, fat binaries plain and compressed, SASS-only, cubins, executables):
//! every instrumented PTX assembles with ptxas, every kernel gets its entry and every exit,
//! and what cannot be instrumented is left unchanged with a warning that names it.

#[path = "../../jit/tests/common/mod.rs"]
mod common;

use attach::instrument::Outcome;
use attach::{Instrumenter, ProbeSet, SiteKind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn probes(names: &[&str]) -> Option<ProbeSet> {
    let mut paths = Vec::new();
    for n in names {
        paths.push(bpftime_tests::compile(n)?);
    }
    Some(ProbeSet::load(&paths).expect("probes load and verify"))
}

fn instrumenter(p: ProbeSet, sm: u32) -> Instrumenter {
    let b = attach::session::placeholder_bindings(&p, 0x7f00_0000_0000, 1024);
    Instrumenter::new(Arc::new(p), b, sm, 1)
}

fn ptx_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            ptx_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "ptx") {
            out.push(p);
        }
    }
    out.sort();
}

/// ptxas on `text` for its own target, its `.version` lowered when the ptxas in use is
/// older than the file.
fn assemble(text: &str, what: &str) {
    common::assemble_declared(text, what);
}

#[test]
fn every_corpus_ptx_instruments_and_assembles() {
    let Some(p) = probes(&["kprobe_all", "kernel_count", "kernelretsnoop"]) else {
        return;
    };
    let inst = instrumenter(p, 90);
    let mut files = Vec::new();
    ptx_files(&root().join("jit/tests/ptx_corpus"), &mut files);
    assert!(files.len() >= 20, "corpus: {files:?}");
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        let parsed = jit::ptx::parse::parse(&src).unwrap();
        let kernels: Vec<&str> = parsed.kernels().map(|k| k.name).collect();
        let rets: usize = parsed
            .kernels()
            .map(|k| k.statements.iter().filter(|s| s.is_return()).count())
            .sum();
        let o = inst.ptx(&src);
        let Outcome::Instrumented { ptx, report } = &o else {
            panic!("{}: not instrumented: {:?}", f.display(), o.report());
        };
        // Every kernel: 2 entry probes (kprobe_all, kernel_count) and 2 exit probes
        // (kprobe_all, kernelretsnoop) at each of its exits.
        let entries = report
            .attached
            .iter()
            .filter(|a| a.site == SiteKind::Entry)
            .count();
        let exits = report
            .attached
            .iter()
            .filter(|a| a.site == SiteKind::Exit)
            .count();
        assert_eq!(entries, 2 * kernels.len(), "{}", f.display());
        // kprobe_all reads the launch fields: every kernel takes the hidden parameters.
        assert_eq!(report.hidden.len(), kernels.len(), "{}", f.display());
        assert_eq!(
            ptx.matches(".param .u64 __bpftime_corr").count(),
            kernels.len(),
            "{}",
            f.display()
        );
        let blocks = ptx.matches("// bpftime-super: kretprobe").count();
        assert_eq!(exits, 2 * blocks, "{}", f.display());
        assert_eq!(
            ptx.matches("// bpftime-super: kprobe").count(),
            kernels.len()
        );
        // Compiler output ends every kernel in `ret`; the hand-written edge cases also fall
        // off a kernel's closing brace, which the pass treats as one more exit.
        if f.components().any(|c| c.as_os_str() == "hand") {
            assert!(blocks > rets, "{}", f.display());
        } else {
            assert_eq!(blocks, rets, "{}", f.display());
        }
        // The probes are inlined at their sites: no call, the ctx words in registers.
        assert!(!ptx.contains("call.uni (bt_ret)"), "{}", f.display());
        assert!(ptx.contains("%bt_cw"), "{}", f.display());
        assemble(ptx, &f.file_name().unwrap().to_string_lossy());
    }
    // As `trace --jit-linker` compiles them: one `.func` per probe, called at each site
    // with its ctx in local memory (a few files: the same sites as above).
    let Some(p) = probes(&["kprobe_all", "kernel_count", "kernelretsnoop"]) else {
        return;
    };
    let called = instrumenter(p, 90).with_inline_kernel_probes(false);
    for f in files.iter().step_by(10) {
        let src = std::fs::read_to_string(f).unwrap();
        let Outcome::Instrumented { ptx, .. } = called.ptx(&src) else {
            panic!("{}: not instrumented", f.display());
        };
        assert!(ptx.contains("call.uni (bt_ret)"), "{}", f.display());
        assemble(
            &ptx,
            &format!("called-{}", f.file_name().unwrap().to_string_lossy()),
        );
    }
}

#[test]
fn fat_binaries_cubins_and_executables() {
    let Some(p) = probes(&["vecadd_args"]) else {
        return;
    };
    let inst = instrumenter(p, 90);
    let corpus = root().join("attach/tests/corpus");
    let read = |n: &str| std::fs::read(corpus.join(n)).unwrap();
    for n in ["vecadd_multi.fatbin", "vecadd_multi_compressed.fatbin"] {
        let o = inst.image(&read(n));
        let Outcome::Instrumented { ptx, report } = &*o else {
            panic!("{n}: {:?}", o.report());
        };
        assert_eq!(report.attached.len(), 1, "{n}");
        assert_eq!(report.attached[0].kernel, "_Z9vectorAddPKfS0_Pfi");
        assemble(ptx, n);
    }
    // The same PTX inside both: the compressed one decompresses to identical output.
    let (a, b) = (
        inst.image(&read("vecadd_multi.fatbin")),
        inst.image(&read("vecadd_multi_compressed.fatbin")),
    );
    match (&*a, &*b) {
        (Outcome::Instrumented { ptx: x, .. }, Outcome::Instrumented { ptx: y, .. }) => {
            assert_eq!(x, y)
        }
        _ => panic!("both instrumented"),
    }
    for n in ["vecadd_sass_only.fatbin", "vecadd_sm90.cubin"] {
        let o = inst.image(&read(n));
        let Outcome::Unchanged(r) = &*o else {
            panic!("{n}: SASS-only must stay unchanged");
        };
        assert_eq!(r.warnings.len(), 1, "{n}: {r:?}");
        assert!(
            r.warnings[0].contains("vectorAdd(float const*, float const*, float*, int)")
                && r.warnings[0].contains("SASS-only")
                && r.warnings[0].contains("vecadd_entry"),
            "{}",
            r.warnings[0]
        );
    }
    // A kernel no probe wants: unchanged, silent.
    let o = inst.image(&read("sgemm_sm80.cubin"));
    assert!(matches!(&*o, Outcome::Unchanged(r) if r.warnings.is_empty()));
    let o = inst.image(&read("sgemm_ptx_only.fatbin"));
    assert!(matches!(&*o, Outcome::Unchanged(r) if r.warnings.is_empty() && !r.kernels.is_empty()));
}

#[test]
fn unparsable_ptx_is_left_alone_with_a_warning_naming_the_line() {
    let Some(p) = probes(&["vecadd_args"]) else {
        return;
    };
    let inst = instrumenter(p, 90);
    let src = std::fs::read_to_string(root().join("jit/tests/ptx_corpus/nvcc/vecadd_sm90.ptx"))
        .unwrap()
        .replace("ret;", "ret; }}} {{");
    let o = inst.ptx(&src);
    let Outcome::Unchanged(r) = &o else {
        panic!("must stay unchanged")
    };
    assert!(r.warnings[0].contains("does not parse at line"), "{r:?}");
    // And the content cache: the same bytes come back from the cache.
    let a = inst.image(src.as_bytes());
    let b = inst.image(src.as_bytes());
    assert!(Arc::ptr_eq(&a, &b));
}

#[test]
fn rejected_probe_names_the_instruction() {
    let Some(path) = bpftime_tests::compile("kprobe_reject") else {
        return;
    };
    let e = ProbeSet::load(&[path]).unwrap_err();
    let text = attach::shim::hooks::error_chain(&e);
    assert!(
        matches!(e, attach::AttachError::Rejected { .. })
            && text.contains("read_past_ctx")
            && text.contains("insn"),
        "{text}"
    );
}

/// Global and generic accesses of a kernel, counted from the parsed text independently of
/// the pass: `ld`/`ldu`/`st`/`atom`/`red` without `.param`/`.const`/`.shared`/`.local`,
/// and `cp.async` copies other than bulk ones.
fn expected_sites(k: &jit::ptx::parse::PtxFunction<'_>) -> usize {
    k.statements
        .iter()
        .filter(|s| s.kind == jit::ptx::parse::StmtKind::Instruction)
        .filter(|s| {
            let m: Vec<&str> = s.opcode.split('.').collect();
            let copy = m[0] == "cp"
                && m.get(1) == Some(&"async")
                && m.contains(&"global")
                && !m.contains(&"bulk");
            let plain = matches!(m[0], "ld" | "ldu" | "st" | "atom" | "red")
                && !m
                    .iter()
                    .any(|x| matches!(*x, "param" | "const" | "local") || x.starts_with("shared"));
            plain || copy
        })
        .count()
}

#[test]
fn every_corpus_ptx_gets_memory_probes_and_assembles() {
    // hot_pages (a hash map update inlined at every access) assembles in its own test:
    // with every corpus file it would take ptxas a minute.
    let Some(p) = probes(&["memprobe_all", "mem_count", "coalescing", "kernel_count"]) else {
        return;
    };
    let inst = instrumenter(p, 90);
    let mut files = Vec::new();
    ptx_files(&root().join("jit/tests/ptx_corpus"), &mut files);
    let mut total = 0;
    let mut ids = std::collections::BTreeSet::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        let parsed = jit::ptx::parse::parse(&src).unwrap();
        let want: usize = parsed.kernels().map(expected_sites).sum();
        let o = inst.ptx(&src);
        let report = o.report();
        assert_eq!(
            report.sites.len(),
            want,
            "{}: {:?}",
            f.display(),
            report.warnings
        );
        total += want;
        for s in &report.sites {
            assert!(ids.insert(s.id), "site id {} twice", s.id);
        }
        match &o {
            Outcome::Instrumented { ptx, .. } => {
                // Each site calls the four memory probes; each kernel still gets its entry.
                assert_eq!(
                    ptx.matches("// bpftime-super: memprobe").count(),
                    want,
                    "{}",
                    f.display()
                );
                assert_eq!(
                    ptx.matches("// bpftime-super: kprobe").count(),
                    parsed.kernels().count()
                );
                // Its own scratch name: the entry/exit test assembles the same files at once.
                assemble(
                    ptx,
                    &format!("mem-{}", f.file_name().unwrap().to_string_lossy()),
                );
            }
            Outcome::Unchanged(r) => panic!("{}: not instrumented: {r:?}", f.display()),
        }
        // Kernels with line info map their sites to source lines.
        if src.contains(".loc") && want > 0 {
            assert!(
                report
                    .sites
                    .iter()
                    .any(|s| s.line.is_some() && s.file.is_some()),
                "{}",
                f.display()
            );
        }
    }
    assert!(total > 100, "corpus has {total} sites");
    // Ids are dense from 0 over the session.
    assert_eq!(ids.len(), total);
    assert_eq!(ids.iter().next_back().copied(), Some(total as u32 - 1));
}

#[test]
fn memory_options_pick_spaces_and_sampling_adds_counters() {
    let Some(p) = probes(&["mem_count"]) else {
        return;
    };
    let b = attach::session::placeholder_bindings(&p, 0x7f00_0000_0000, 1024);
    let src = std::fs::read_to_string(root().join("jit/tests/ptx_corpus/nvcc/sgemm_sm80.ptx"))
        .unwrap_or_default();
    if src.is_empty() {
        return;
    }
    let global = Instrumenter::new(Arc::new(p.clone()), b.clone(), 90, 1);
    let g = global.ptx(&src).report().sites.len();
    let shared = Instrumenter::new(Arc::new(p), b, 90, 1).with_mem(attach::instrument::MemConfig {
        shared: true,
        local: false,
        sampling: attach::codegen::Sampling {
            every: 8,
            budget: 100,
        },
        eager: false,
        trace: None,
        cold_split: false,
    });
    let o = shared.ptx(&src);
    let s = o.report().sites.len();
    assert!(s > g, "shared accesses add sites: {s} vs {g}");
    let Outcome::Instrumented { ptx, .. } = &o else {
        panic!("instrumented")
    };
    assert!(ptx.contains(".reg .b32 %bt_sc<") && ptx.contains("rem.u32"));
    assemble(ptx, "sgemm_tiled_sm80 sampled");
}

#[test]
fn mem_trace_records_every_access_without_probes() {
    // `--mem-trace` with no probe object: every kernel's global accesses get a record block
    // (a reservation per warp, a bounded write), and the PTX assembles.
    let p = ProbeSet::default();
    let b = attach::session::placeholder_bindings(&p, 0x7f00_0000_0000, 1024);
    let ring = attach::instrument::TraceRing {
        ring: 0x7e00_0000_0000,
        ctl: 0x7d00_0000_0000,
        cap: 1 << 20,
    };
    let inst = Instrumenter::new(Arc::new(p), b, 90, 1).with_mem(attach::instrument::MemConfig {
        trace: Some(ring),
        ..Default::default()
    });
    for f in [
        "nvcc/sgemm_sm90.ptx",
        "nvcc/vecadd_sm90_lineinfo.ptx",
        "triton/softmax_kernel.ptx",
    ] {
        let path = root().join("jit/tests/ptx_corpus").join(f);
        let Ok(src) = std::fs::read_to_string(&path) else {
            continue;
        };
        let parsed = jit::ptx::parse::parse(&src).unwrap();
        let want: usize = parsed.kernels().map(expected_sites).sum();
        let o = inst.ptx(&src);
        let Outcome::Instrumented { ptx, report } = &o else {
            panic!("{f}: {:?}", o.report());
        };
        assert_eq!(report.sites.len(), want, "{f}");
        assert_eq!(ptx.matches("--mem-trace record").count(), want, "{f}");
        // The index is masked to the SM's sub-ring: no record lands outside the ring.
        let sub = (1u64 << 20) / attach::memtrace::STRIPES;
        assert!(ptx.contains(&format!("and.b64 %td5, %td4, {};", sub - 1)));
        // Every exit adds the lanes' counted drops to the ring's.
        assert!(
            ptx.matches("--mem-trace drops").count() >= parsed.kernels().count(),
            "{f}"
        );
        assemble(ptx, &format!("trace-{}", f.replace('/', "-")));
    }
}

/// A kernel with every shape the memory pass meets: guarded and negated-guard accesses, a
/// loop, generic and vector accesses, an atomic, a shared access, and a guarded `ret`.
const SHAPES: &str = r#".version 8.0
.target sm_90
.address_size 64

.visible .entry shapes(
	.param .u64 shapes_param_0,
	.param .u32 shapes_param_1
)
{
	.reg .pred %p<4>;
	.reg .b32 %r<16>;
	.reg .f32 %f<8>;
	.reg .b64 %rd<8>;
	.shared .align 4 .b8 tile[1024];
	ld.param.u64 %rd1, [shapes_param_0];
	ld.param.u32 %r1, [shapes_param_1];
	mov.u32 %r2, %tid.x;
	setp.ge.u32 %p1, %r2, %r1;
	@%p1 ret;
	mul.wide.u32 %rd2, %r2, 4;
	add.s64 %rd3, %rd1, %rd2;
	setp.eq.u32 %p2, %r2, 0;
	@!%p2 ld.global.f32 %f1, [%rd3];
	@%p2 st.global.f32 [%rd3+4], %f1;
	mov.u32 %r3, 0;
$L__loop:
	ld.global.u32 %r4, [%rd3];
	ld.u32 %r5, [%rd3+8];
	add.s32 %r3, %r3, 1;
	setp.lt.u32 %p3, %r3, 4;
	@%p3 bra $L__loop;
	st.global.v4.u32 [%rd1], {%r3, %r4, %r5, %r2};
	atom.global.add.u32 %r6, [%rd1+16], 1;
	st.shared.u32 [tile], %r6;
	ret;
}
"#;

#[test]
fn every_site_shape_with_every_feature_assembles() {
    let Some(p) = probes(&[
        "memprobe_all",
        "mem_exact",
        "coalescing",
        "mem_count",
        "kprobe_all",
    ]) else {
        return;
    };
    let b = attach::session::placeholder_bindings(&p, 0x7f00_0000_0000, 1024);
    let ring = attach::instrument::TraceRing {
        ring: 0x7e00_0000_0000,
        ctl: 0x7d00_0000_0000,
        cap: 1 << 20,
    };
    for (sampling, trace, eager, cold_split) in [
        (attach::codegen::Sampling::default(), None, false, false),
        (
            attach::codegen::Sampling {
                every: 4,
                budget: 10,
            },
            Some(ring),
            false,
            true,
        ),
        (
            attach::codegen::Sampling {
                every: 1,
                budget: 3,
            },
            Some(ring),
            true,
            false,
        ),
    ] {
        let inst = Instrumenter::new(Arc::new(p.clone()), b.clone(), 90, 1).with_mem(
            attach::instrument::MemConfig {
                shared: true,
                local: false,
                sampling,
                eager,
                trace,
                cold_split,
            },
        );
        let o = inst.ptx(SHAPES);
        let Outcome::Instrumented { ptx, report } = &o else {
            panic!("{:?}", o.report());
        };
        // 2 guarded + 2 in the loop + vector + atomic + shared.
        assert_eq!(report.sites.len(), 7, "{:?}", report.sites);
        let loop_sites = report
            .sites
            .iter()
            .filter(|s| s.opcode == "ld.global.u32" || s.opcode == "ld.u32")
            .count();
        assert_eq!(loop_sites, 2);
        // Sums kept in registers only for the loop's sites, unless eager or split (a split
        // probe's adds are in its called part, eager).
        if !cold_split {
            assert_eq!(ptx.contains("deferred add, slot"), !eager, "{ptx}");
        }
        if !sampling.is_all() {
            // The negated guard thins with `not.pred`; the budget caps each thread.
            assert!(
                ptx.contains("not.pred") && ptx.contains("setp.le.u32"),
                "{ptx}"
            );
        }
        assert_eq!(ptx.contains("--mem-trace record"), trace.is_some());
        // Entry probes still land at the kernel's entry and before both rets.
        assert_eq!(
            ptx.matches("// bpftime-super: kretprobe").count(),
            2,
            "{ptx}"
        );
        assemble(ptx, &format!("shapes-{}-{}", sampling.every, eager));
    }
}

/// `cold_split`: a probe that returns on its configuration before it reads the access keeps
/// only that first test at each access; the rest is one function of the module, which each
/// site calls with the kernel's live registers stored around the call (exactly those the
/// kernel reads later, by the liveness pass), and the kernel is listed for the shim's cap.
/// The module assembles, also under the cap the shim would set. Unsplit, nothing of this.
#[test]
fn a_split_probe_calls_its_cold_part_with_the_kernels_live_registers_stored() {
    let Some(p) = probes(&["mem_gated"]) else {
        return;
    };
    let src = ".version 8.0\n.target sm_90\n.address_size 64\n\
.visible .entry k(.param .u64 a, .param .u64 b)\n{\n\t.reg .f32 %f<4>;\n\t.reg .b64 %rd<6>;\n\
\tld.param.u64 %rd1, [a];\n\tld.param.u64 %rd2, [b];\n\
\tcvta.to.global.u64 %rd3, %rd1;\n\tcvta.to.global.u64 %rd4, %rd2;\n\
\tld.global.f32 %f1, [%rd3];\n\tld.global.f32 %f2, [%rd3+4];\n\
\tadd.f32 %f3, %f1, %f2;\n\tst.global.f32 [%rd4], %f3;\n\tret;\n}\n";
    let b = attach::session::placeholder_bindings(&p, 0x7f00_0000_0000, 1024);
    for split in [true, false] {
        let inst = Instrumenter::new(Arc::new(p.clone()), b.clone(), 90, 1).with_mem(
            attach::instrument::MemConfig {
                cold_split: split,
                ..Default::default()
            },
        );
        let o = inst.ptx(src);
        let Outcome::Instrumented { ptx, report } = &o else {
            panic!("{:?}", o.report());
        };
        assert_eq!(report.sites.len(), 3);
        let calls = ptx
            .matches("call.uni (cold_ret), __bpftime0_cold_mem_gated")
            .count();
        if !split {
            assert_eq!(calls, 0, "{ptx}");
            assert!(
                !ptx.contains("__bt_save") && report.freed.is_empty(),
                "{ptx}"
            );
            assemble(ptx, "unsplit");
            continue;
        }
        assert_eq!(calls, 3, "{ptx}");
        assert_eq!(
            ptx.matches(".func (.param .b64 ret0) __bpftime0_cold_mem_gated(")
                .count(),
            1
        );
        assert_eq!(report.freed, ["k"]);
        // After the first load: %rd3, %rd4 and %f1 are read later; after the second, %rd4,
        // %f1 and %f2; after the store, nothing. Widest first, each stored and loaded back.
        let first = "st.local.b64 [__bt_save+0], %rd3;\n\tst.local.b64 [__bt_save+8], %rd4;\n\tst.local.b32 [__bt_save+16], %f1;";
        let second = "st.local.b64 [__bt_save+0], %rd4;\n\tst.local.b32 [__bt_save+8], %f1;\n\tst.local.b32 [__bt_save+12], %f2;";
        assert!(ptx.contains(first) && ptx.contains(second), "{ptx}");
        assert!(ptx.contains("ld.local.b64 %rd3, [__bt_save+0];"), "{ptx}");
        assert!(ptx.contains("ld.local.b32 %f2, [__bt_save+12];"), "{ptx}");
        assert_eq!(ptx.matches("[__bt_save+").count(), 2 * (3 + 3), "{ptx}");
        assert!(ptx.contains(".local .align 8 .b8 __bt_save[20];"), "{ptx}");
        // Every save precedes its call, every load follows it.
        let save = ptx.find(first).unwrap_or(0);
        let call = ptx.find("call.uni (cold_ret)").unwrap_or(0);
        let load = ptx.find("ld.local.b64 %rd3, [__bt_save+0];").unwrap_or(0);
        assert!(save < call && call < load, "{ptx}");
        assemble(ptx, "split");
        let capped = attach::occupancy::cap_registers(ptx, &[("k".to_string(), 32)]).0;
        assert!(capped.contains(".maxnreg 32"), "{capped}");
        assemble(&capped, "split, capped at 32");
    }
}

#[test]
fn hidden_parameters_follow_the_kernels_own_layout() {
    // Offsets as the driver lays out parameters: each at its alignment, the hidden pair
    // 8-aligned after the last.
    let src = ".version 8.0\n.target sm_90\n.address_size 64\n\
.visible .entry a(.param .u32 a_0, .param .align 16 .b8 a_1[20], .param .u8 a_2)\n{\n\tret;\n}\n\
.visible .entry b()\n{\n\tret;\n}\n\
.visible .entry c(.param .u64 c_0, .param .u32 c_1)\n{\n\tret;\n}\n";
    let f = jit::ptx::parse::parse(src).unwrap();
    let of = |n: &str| attach::instrument::HiddenParams::of(f.function(n).unwrap()).unwrap();
    assert_eq!((of("a").params, of("a").offset), (3, 40));
    assert_eq!((of("b").params, of("b").offset), (0, 0));
    assert_eq!((of("c").params, of("c").offset), (2, 16));
}

#[test]
fn the_clock_kernel_assembles() {
    // The shim loads it with cuModuleLoadData in the application's context; ptxas here
    // checks it for its declared target and for the H100/H200 it runs on.
    assemble(
        attach::shim::clock::KERNEL_PTX,
        "the clock calibration kernel",
    );
    common::assemble_for(
        attach::shim::clock::KERNEL_PTX,
        "the clock kernel (sm_90)",
        "sm_90",
    );
}

/// A memory probe that returns on its configuration before it reads the ctx pays for no
/// ctx word: at every site the warp collectives (`activemask`, `match.any`) come after the
/// probe's gate, inside its body. Two probes at a site share the words, computed before
/// either body.
#[test]
fn ctx_words_are_computed_where_the_probe_first_needs_them() {
    let (Some(gated), Some(both)) = (probes(&["mem_gated"]), probes(&["mem_gated", "mem_exact"]))
    else {
        return;
    };
    for (set, alone) in [(gated, true), (both, false)] {
        let b = attach::session::placeholder_bindings(&set, 0x7f00_0000_0000, 1024);
        for sampling in [
            attach::codegen::Sampling::default(),
            attach::codegen::Sampling {
                every: 4,
                budget: 10,
            },
        ] {
            let inst = Instrumenter::new(Arc::new(set.clone()), b.clone(), 90, 1).with_mem(
                attach::instrument::MemConfig {
                    shared: true,
                    local: false,
                    sampling,
                    eager: false,
                    trace: None,
                    cold_split: false,
                },
            );
            let o = inst.ptx(SHAPES);
            let Outcome::Instrumented { ptx, report } = &o else {
                panic!("{:?}", o.report());
            };
            let blocks: Vec<&str> = ptx.split("// bpftime-super: memprobe").skip(1).collect();
            assert_eq!(blocks.len(), report.sites.len());
            assert_eq!(blocks.len(), 7);
            let mut values_seen = 0;
            for blk in blocks {
                let body = blk.find("{ // mem_gated").expect("the body, inlined");
                // The gate: the global's load and the branch on it.
                let gate = blk[body..]
                    .find("ld.global.u64")
                    .map(|g| body + g)
                    .expect("the gate's load");
                let words = blk.find("match.any.sync.b64").expect("warp_sectors");
                let active = blk.find("activemask.b32").expect("warp_active");
                if alone {
                    assert!(
                        words > gate && active > gate,
                        "words before the gate:\n{blk}"
                    );
                    assert!(!blk[..body].contains("%globaltimer"), "{blk}");
                    // Inside the body the words' code reads the kernel's registers (the
                    // loaded value) and the block's `%bt_…`: the body declares none of the
                    // kernel's names (`%r…`, `%rd…`, `%p…`, `%f…`), so none is hidden.
                    let inner = &blk[body..];
                    for l in inner.lines().filter(|l| l.trim_start().starts_with(".reg")) {
                        let name = l.split('%').nth(1).unwrap_or("");
                        let kernel_style = ["rd<", "rs<", "fd<", "r<", "f<", "p<"]
                            .iter()
                            .any(|k| name.starts_with(k));
                        assert!(
                            !kernel_style,
                            "the body hides the kernel's registers: {l}\n{blk}"
                        );
                    }
                    // A load's value is taken at the point, after the gate (not before the
                    // body, where it would wait for the data at every site).
                    // The probe's copy: a block register (`%bt_…`) set from the load's
                    // destination.
                    let at_value = (|| {
                        let load = blk.find("ld.global.u32")?;
                        let dst = blk[load..]
                            .split_whitespace()
                            .nth(1)?
                            .trim_end_matches(',')
                            .to_string();
                        let mut at = load;
                        blk[load..].lines().find_map(|l| {
                            let here = at;
                            at += l.len() + 1;
                            let t = l.trim();
                            (t.contains(" %bt_") && t.ends_with(&format!(", {dst};")))
                                .then_some(here)
                        })
                    })();
                    if let Some(v) = at_value {
                        assert!(v > gate, "a loaded value read before the gate:\n{blk}");
                        values_seen += 1;
                    }
                } else {
                    assert!(words < body && active < body, "words after a body:\n{blk}");
                }
                assert!(
                    !blk.contains("@bt_ctx_point"),
                    "the marker is replaced:\n{blk}"
                );
            }
            if alone {
                assert!(
                    values_seen > 0,
                    "no loaded value found at a ctx point:\n{ptx}"
                );
            }
            assemble(
                ptx,
                &format!(
                    "ctx point, {} probe(s), every {}",
                    if alone { 1 } else { 2 },
                    sampling.every
                ),
            );
        }
    }
}

/// `.maxnreg` caps (`attach::occupancy`) hold: a kernel whose probes need many registers
/// assembles within the cap the original's occupancy allows, and without it needs more.
#[test]
fn register_caps_bound_instrumented_kernels() {
    let (Some(p), Some(ptxas)) = (probes(&["mem_gated", "mem_exact"]), common::ptxas()) else {
        return;
    };
    let inst = instrumenter(p, 90);
    let Outcome::Instrumented { ptx, .. } = inst.ptx(SHAPES) else {
        panic!("not instrumented");
    };
    let regs = |text: &str, what: &str| -> u32 {
        let dir = bpftime_tests::scratch_dir("regcap");
        let src = dir.path().join(format!("{what}.ptx"));
        std::fs::write(&src, text).unwrap();
        let out = std::process::Command::new(&ptxas)
            .args(["-arch=sm_90", "-v", "-o"])
            .arg(dir.path().join(format!("{what}.cubin")))
            .arg(&src)
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{log}");
        log.split("Used ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no register count in {log}"))
    };
    let free = regs(&ptx, "free");
    let cap = attach::occupancy::register_cap(attach::occupancy::SmLimits::SM90, 20);
    assert_eq!(cap, 32);
    assert!(
        free > cap,
        "the probes need only {free} registers: nothing to test"
    );
    let (capped, which) = attach::occupancy::cap_registers(&ptx, &[("shapes".into(), cap)]);
    assert_eq!(which, ["shapes"]);
    assert!(regs(&capped, "capped") <= cap);
}

/// Fetching atomics (here a memory probe's compare-and-swap and an entry probe's
/// fetch-and-add, whose results the programs use) are fully ordered, `atom.acq_rel`, unless
/// the object asks for relaxed ones with `BPFTIME_RELAXED_ATOMICS` (`mem_claim_relaxed`, the
/// same programs): then every probe of it gets `atom.relaxed`. Both assemble.
#[test]
fn an_object_asks_for_relaxed_atomics() {
    let src = ".version 8.0\n.target sm_90\n.address_size 64\n\
.visible .entry k(.param .u64 a)\n{\n\t.reg .f32 %f<2>;\n\t.reg .b64 %rd<3>;\n\
\tld.param.u64 %rd1, [a];\n\tcvta.to.global.u64 %rd2, %rd1;\n\
\tld.global.f32 %f1, [%rd2];\n\tst.global.f32 [%rd2+4], %f1;\n\tret;\n}\n";
    for (name, relaxed) in [("mem_claim", false), ("mem_claim_relaxed", true)] {
        let Some(p) = probes(&[name]) else {
            return;
        };
        assert!(
            p.probes.iter().all(|x| x.relaxed_atomics == relaxed),
            "{name}"
        );
        let b = attach::session::placeholder_bindings(&p, 0x7f00_0000_0000, 1024);
        let inst = Instrumenter::new(Arc::new(p), b, 90, 1)
            .with_mem(attach::instrument::MemConfig::default());
        let o = inst.ptx(src);
        let Outcome::Instrumented { ptx, .. } = &o else {
            panic!("{name}: {:?}", o.report());
        };
        let atoms: Vec<&str> = ptx.lines().filter(|l| l.contains("atom.")).collect();
        let (want, not) = if relaxed {
            ("atom.relaxed.", "atom.acq_rel")
        } else {
            ("atom.acq_rel.", "atom.relaxed")
        };
        for op in [".cas.b64", ".add.u64"] {
            assert!(
                atoms.iter().any(|l| l.contains(want) && l.contains(op)),
                "{name} {op}: {atoms:?}"
            );
        }
        assert!(atoms.iter().all(|l| !l.contains(not)), "{name}: {atoms:?}");
        assemble(ptx, name);
    }
}
