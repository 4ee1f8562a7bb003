//! Foreign PTX: every `*.ptx` under `tests/ptx_corpus/` (recursively: `nvrtc/` here, and
//! `nvcc/`, `numba/`, `triton/`, `cupy/`, `hand/` when present) parses, round-trips byte for
//! byte through the probe pass with nothing to insert, and, with a probe block that does
//! real work at the entry and before every exit of every kernel, still assembles with
//! ptxas. Mutated and truncated corpus files give errors, never panics.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use jit::passes::probe::{self, ProbeBlocks, ProbeModule, Site};
use jit::ptx::parse::{self, FuncKind, Operand, PtxFunction, StmtKind};
use proptest::prelude::*;

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|e| e == "ptx") {
            out.push(p);
        }
    }
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ptx_corpus")
}

/// `(path relative to the corpus, text)` of every corpus file.
fn corpus() -> &'static [(String, String)] {
    static CORPUS: OnceLock<Vec<(String, String)>> = OnceLock::new();
    CORPUS.get_or_init(load_corpus)
}

fn load_corpus() -> Vec<(String, String)> {
    let mut paths = Vec::new();
    walk(&corpus_dir(), &mut paths);
    assert!(
        !paths.is_empty(),
        "no *.ptx under {}",
        corpus_dir().display()
    );
    paths
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(corpus_dir())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&p).unwrap();
            (rel, text)
        })
        .collect()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(corpus_dir().join(rel)).unwrap()
}

#[test]
fn every_corpus_file_parses() {
    for (name, text) in corpus() {
        let f = parse::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(f.version >= (1, 0), "{name}");
        assert!(!f.target.is_empty(), "{name}");
        for k in f.kernels() {
            assert!(
                !k.statements.is_empty(),
                "{name}: kernel {} is empty",
                k.name
            );
            assert!(
                k.statements.iter().any(|s| s.is_return()),
                "{name}: kernel {} has no ret/exit",
                k.name
            );
        }
    }
}

#[test]
fn vector_add_by_hand() {
    let text = read("nvrtc/basic_90.ptx");
    let f = parse::parse(&text).unwrap();
    assert_eq!(f.version, (8, 8));
    assert_eq!(f.target, vec!["sm_90"]);
    assert_eq!(f.address_size, 64);
    assert_eq!(f.files.get(&1).map(String::as_str), Some("/basic.cu"));
    let names: Vec<&str> = f.functions.iter().map(|f| f.name).collect();
    assert_eq!(
        names,
        vec![
            "vector_add",
            "saxpy_struct",
            "early_exit",
            "_Z9scale_tplIfEvPT_S0_j",
            "_Z9scale_tplIdEvPT_S0_j"
        ]
    );
    assert!(f.kernels().count() == 5);
    assert_eq!(f.functions[3].linkage.as_deref(), Some(".weak"));

    let va = f.function("vector_add").unwrap();
    assert_eq!(va.kind, FuncKind::Entry);
    assert_eq!(va.line, 16);
    let params: Vec<(&str, &str, u32)> = va
        .params
        .iter()
        .map(|p| (p.name.as_str(), p.ty.as_str(), p.size))
        .collect();
    assert_eq!(
        params,
        vec![
            ("vector_add_param_0", ".u64", 8),
            ("vector_add_param_1", ".u64", 8),
            ("vector_add_param_2", ".u64", 8),
            ("vector_add_param_3", ".u32", 4)
        ]
    );
    let count = |k: StmtKind| va.statements.iter().filter(|s| s.kind == k).count();
    assert_eq!(count(StmtKind::Instruction), 22);
    assert_eq!(count(StmtKind::Label), 1);
    let rets: Vec<_> = va.statements.iter().filter(|s| s.is_return()).collect();
    assert_eq!(rets.len(), 1);
    assert_eq!(rets[0].line, 63);
    assert_eq!(
        rets[0].loc.as_ref().map(|l| (l.file, l.line, l.col)),
        Some((1, 7, 1))
    );
    let bra = va
        .statements
        .iter()
        .find(|s| s.base_opcode() == "bra")
        .unwrap();
    assert_eq!(bra.guard.as_ref().map(|g| g.pred.as_str()), Some("%p1"));
    assert_eq!(bra.operands, vec![Operand::Symbol("$L__BB0_2".into())]);
    let st = va
        .statements
        .iter()
        .find(|s| s.opcode == "st.global.f32")
        .unwrap();
    assert_eq!(
        st.operands,
        vec![
            Operand::Address {
                base: Some("%rd10".into()),
                offset: 0
            },
            Operand::Reg("%f3".into())
        ]
    );
    assert_eq!(st.loc.as_ref().map(|l| l.line), Some(6));

    let sx = f.function("saxpy_struct").unwrap();
    assert_eq!(
        (
            sx.params[0].ty.as_str(),
            sx.params[0].size,
            sx.params[0].align
        ),
        (".b8", 32, 8)
    );
    let ee = f.function("early_exit").unwrap();
    let d: Vec<(&str, &[u64])> = ee
        .directives
        .iter()
        .map(|d| (d.name.as_str(), d.values.as_slice()))
        .collect();
    assert_eq!(
        d,
        vec![
            (".maxntid", &[256u64, 1, 1][..]),
            (".minnctapersm", &[2u64][..])
        ]
    );
    assert!(
        ee.statements
            .iter()
            .any(|s| s.kind == StmtKind::Directive && s.opcode == ".shared")
    );
}

#[test]
fn calls_by_hand() {
    let text = read("nvrtc/calls_90.ptx");
    let f = parse::parse(&text).unwrap();
    let protos: Vec<&str> = f
        .functions
        .iter()
        .filter(|f| !f.definition)
        .map(|f| f.name)
        .collect();
    assert_eq!(protos, vec!["vprintf"]);
    assert_eq!(f.functions[0].linkage.as_deref(), Some(".extern"));
    let globals: Vec<(&str, &str)> = f
        .globals
        .iter()
        .map(|g| (g.name.as_str(), g.space.as_str()))
        .collect();
    assert_eq!(
        globals,
        vec![
            ("coeffs", ".const"),
            ("counter", ".global"),
            ("table", ".global"),
            ("$str", ".global")
        ]
    );
    let kernels: Vec<&str> = f.kernels().map(|k| k.name).collect();
    assert_eq!(kernels, vec!["calls_kernel", "recursive_kernel"]);
    let ck = f.function("calls_kernel").unwrap();
    let calls: Vec<_> = ck
        .statements
        .iter()
        .filter(|s| s.base_opcode() == "call")
        .collect();
    assert_eq!(calls.len(), 4);
    assert!(calls.iter().all(|c| c.depth == 2 && c.opcode == "call.uni"));
    assert_eq!(
        calls[0].operands,
        vec![
            Operand::List(vec![Operand::Symbol("retval0".into())]),
            Operand::Symbol("_Z4polyf".into()),
            Operand::List(vec![Operand::Symbol("param0".into())]),
        ]
    );
    assert_eq!(ck.statements.iter().filter(|s| s.is_return()).count(), 1);
    // Device functions have rets too, but are not kernels.
    let split = f.function("_Z5splitfi").unwrap();
    assert_eq!(split.kind, FuncKind::Func);
    assert_eq!(
        (
            split.ret_params[0].name.as_str(),
            split.ret_params[0].size,
            split.ret_params[0].align
        ),
        ("func_retval0", 8, 4)
    );
}

#[test]
fn debug_sections_and_inlined_locs() {
    for rel in ["nvrtc/calls_debug_80.ptx", "nvrtc/hopper_90.ptx"] {
        let text = read(rel);
        let f = parse::parse(&text).unwrap();
        assert!(f.files.contains_key(&1), "{rel}");
        if rel.contains("debug") {
            // -G: nothing is inlined.
            continue;
        }
        let inlined = f
            .functions
            .iter()
            .flat_map(|f| &f.statements)
            .filter(|s| s.loc.as_ref().is_some_and(|l| l.inlined_at.is_some()))
            .count();
        assert!(inlined > 0, "{rel}: no inlined_at locations");
    }
    let dbg = read("nvrtc/calls_debug_80.ptx");
    let f = parse::parse(&dbg).unwrap();
    assert_eq!(f.target, vec!["sm_80", "debug"]);
    let hopper = read("nvrtc/hopper_90.ptx");
    let h = parse::parse(&hopper).unwrap();
    let cs = h.function("cluster_sum").unwrap();
    let names: Vec<&str> = cs.directives.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, vec![".explicitcluster", ".reqnctapercluster"]);
    assert!(
        cs.statements
            .iter()
            .any(|s| s.opcode == "mapa.shared::cluster.u32")
    );
}

#[test]
fn hand_written_edge_cases() {
    let text = read("hand/edge_cases.ptx");
    let f = parse::parse(&text).unwrap();
    assert_eq!((f.version, f.sm()), ((7, 8), Some(75)));
    let kernels: Vec<&str> = f.kernels().map(|k| k.name).collect();
    assert_eq!(
        kernels,
        vec![
            "guarded",
            "no_params",
            "no_list",
            "weak_kernel",
            "guard_last"
        ]
    );
    assert!(f.function("no_list").unwrap().params_close.is_none());
    assert!(f.function("no_params").unwrap().params_close.is_some());
    assert!(f.function("die").unwrap().directives[0].name == ".noreturn");
    let g = f.function("guarded").unwrap();
    assert_eq!(g.params[0].ptr, ".ptr .global .align 4");
    assert_eq!(g.params[0].align, 8);
    let exits: Vec<(&str, u32, Option<bool>)> = g
        .statements
        .iter()
        .filter(|s| s.is_return())
        .map(|s| {
            (
                s.opcode.as_str(),
                s.depth,
                s.guard.as_ref().map(|g| g.negated),
            )
        })
        .collect();
    assert_eq!(
        exits,
        vec![
            ("ret", 1, Some(false)),
            ("ret.uni", 2, None),
            ("exit", 1, Some(true)),
            ("ret", 1, None)
        ]
    );
    assert!(
        g.statements
            .iter()
            .any(|s| s.opcode == ".callprototype" && s.kind == StmtKind::Directive)
    );
    let ld = g
        .statements
        .iter()
        .find(|s| s.opcode == "ld.global.v4.f32")
        .unwrap();
    assert_eq!(
        ld.operands[0],
        Operand::Vector(vec![
            Operand::Reg("%f1".into()),
            Operand::Sink,
            Operand::Reg("%f3".into()),
            Operand::Sink
        ])
    );
    let lut = f.globals.iter().find(|g| g.name == "lut").unwrap();
    assert!(text[lut.span.clone()].ends_with("4294967295};"));

    let mut tag = Busy { extra_param: true };
    let out = probe::splice(&text, &f, &ProbeModule::default(), &mut tag).unwrap();
    let sites: Vec<(String, Site)> = out
        .attached
        .iter()
        .filter(|a| a.kernel == "guarded")
        .map(|a| (a.kernel.clone(), a.site.clone()))
        .collect();
    assert_eq!(sites.len(), 5);
    assert_eq!(
        sites[3].1,
        Site::Exit {
            index: 2,
            line: exits_line(&text, "@!%p3 exit;")
        }
    );
    // `guard_last` ends in `@%p1 ret;`: the closing `}` is an exit site too.
    let gl: Vec<&Site> = out
        .attached
        .iter()
        .filter(|a| a.kernel == "guard_last")
        .map(|a| &a.site)
        .collect();
    assert_eq!(gl.len(), 3);
    assert!(matches!(gl[2], Site::Exit { index: 1, .. }));
    // `@%p1 ret;` is skipped when %p1 is false, `@!%p3 exit;` when %p3 is true.
    assert!(out.text.contains("@!%p1 bra $__bpftime_skip_1;"));
    assert!(out.text.contains("@%p3 bra $__bpftime_skip_3;"));
    assert!(out.text.contains("\t@!%p3 exit;\n$__bpftime_skip_3:"));
}

fn exits_line(text: &str, what: &str) -> u32 {
    1 + text[..text.find(what).unwrap()].matches('\n').count() as u32
}

#[test]
fn cub_inline_asm_blocks() {
    let text = read("nvrtc/cub_90.ptx");
    let f = parse::parse(&text).unwrap();
    assert!(f.globals.len() > 500, "{}", f.globals.len());
    assert!(f.files.len() > 10);
    let k = f.function("cub_block_ops").unwrap();
    // `{ .reg .s32 r0; .reg .pred p; shfl.sync.up.b32 r0|p, ...; @p add.s32 r0, r0, %r60; ... }`
    let shfl: Vec<_> = k
        .statements
        .iter()
        .filter(|s| s.opcode == "shfl.sync.up.b32")
        .collect();
    assert!(!shfl.is_empty());
    assert!(shfl.iter().all(|s| s.depth == 2));
    assert_eq!(shfl[0].operands[0], Operand::Other("r0|p".into()));
    let guarded_add = k
        .statements
        .iter()
        .find(|s| s.opcode == "add.s32" && s.guard.as_ref().is_some_and(|g| g.pred == "p"))
        .unwrap();
    assert_eq!(guarded_add.operands[0], Operand::Reg("r0".into()));
    assert!(
        k.statements
            .iter()
            .filter(|s| s.kind == StmtKind::Instruction)
            .all(|s| s.loc.is_some())
    );
}

struct Nothing;
impl ProbeBlocks for Nothing {
    fn block(&mut self, _: &PtxFunction<'_>, _: &Site, _: u32) -> Option<String> {
        None
    }
}

#[test]
fn round_trip_without_insertions_is_byte_identical() {
    for (name, text) in corpus() {
        let f = parse::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let out = probe::splice(text, &f, &ProbeModule::default(), &mut Nothing).unwrap();
        assert!(out.text == *text, "{name}: text changed");
        assert!(out.attached.is_empty() && out.warnings.is_empty(), "{name}");
    }
}

/// A probe block that does real work: its own registers, a `.local` array, `%tid.x`,
/// `%globaltimer`, a kernel parameter, a branch to its own label, a call of a module-scope
/// `.func`, an atomic on a module-scope global.
struct Busy {
    extra_param: bool,
}

const BUSY_MODULE: &str = "\
.visible .global .align 8 .u64 __bpftime_test_counter;
.func __bpftime_test_fn(.param .b64 __bpftime_test_fn_a)
{
	.reg .b64 %rd<2>;
	ld.param.u64 %rd1, [__bpftime_test_fn_a];
	red.global.add.u64 [__bpftime_test_counter], %rd1;
	ret;
}
";

impl ProbeBlocks for Busy {
    fn block(&mut self, k: &PtxFunction<'_>, site: &Site, uid: u32) -> Option<String> {
        let param = match k.params.first() {
            Some(p) if p.size >= 8 && p.align >= 8 => {
                format!("\tld.param.u64 %__bt_rd1, [{}];\n", p.name)
            }
            Some(p) if p.size >= 4 && p.align >= 4 => format!(
                "\tld.param.u32 %__bt_r1, [{}];\n\tcvt.u64.u32 %__bt_rd1, %__bt_r1;\n",
                p.name
            ),
            Some(p) if p.size >= 1 => format!(
                "\tld.param.u8 %__bt_rs1, [{}];\n\tcvt.u64.u16 %__bt_rd1, %__bt_rs1;\n",
                p.name
            ),
            _ => "\tmov.u64 %__bt_rd1, 0;\n".to_string(),
        };
        let site_id = match site {
            Site::Entry => 0,
            Site::Exit { index, .. } => 1 + index,
        };
        Some(format!(
            "{{ // bpftime probe {uid}
	.reg .pred %__bt_p<2>;
	.reg .b16 %__bt_rs<2>;
	.reg .b32 %__bt_r<3>;
	.reg .b64 %__bt_rd<4>;
	.local .align 8 .b8 __bt_local_{uid}[16];
	mov.u32 %__bt_r0, %tid.x;
	mov.u64 %__bt_rd0, %globaltimer;
{param}	st.local.u32 [__bt_local_{uid}], %__bt_r0;
	st.local.u64 [__bt_local_{uid}+8], %__bt_rd0;
	ld.local.u64 %__bt_rd2, [__bt_local_{uid}+8];
	add.u64 %__bt_rd2, %__bt_rd2, %__bt_rd1;
	add.u64 %__bt_rd2, %__bt_rd2, {site_id};
	setp.ne.u32 %__bt_p1, %__bt_r0, 0;
	@%__bt_p1 bra $__bt_done_{uid};
	{{
	.param .b64 param0;
	st.param.b64 [param0+0], %__bt_rd2;
	call.uni __bpftime_test_fn, (param0);
	}}
$__bt_done_{uid}:
	red.global.add.u64 [__bpftime_test_counter], 1;
}}"
        ))
    }

    fn extra_params(&mut self, _k: &PtxFunction<'_>) -> Vec<String> {
        if self.extra_param {
            vec![".param .u64 __bpftime_corr".into()]
        } else {
            Vec::new()
        }
    }
}

/// `-arch=` for ptxas: the (raised) target's `sm_N` with its suffix.
fn arch_of(f: &parse::PtxFile<'_>) -> String {
    f.target
        .iter()
        .find(|t| parse::split_sm(t).is_some())
        .cloned()
        .unwrap_or_else(|| "sm_70".into())
}

/// Assembles `text` (parsed as `f`) for its own target. A file newer than the ptxas in use
/// (the integrator's CUDA 13 files under ptxas 12.9) is tried with its `.version` lowered;
/// if ptxas rejects it then, the file is skipped (`false`) unless `strict`. Panics when
/// ptxas rejects a file it should take.
fn assemble(f: &parse::PtxFile<'_>, what: &str, strict: bool) -> bool {
    let Some(max) = common::ptxas_max_isa() else {
        return false;
    };
    let mut text = f.src.to_string();
    let lowered = f.version > max;
    if lowered {
        text.replace_range(f.version_span.clone(), &format!("{}.{}", max.0, max.1));
    }
    match common::try_assemble_for(&text, what, &arch_of(f)) {
        None => false,
        Some(Ok(())) => true,
        Some(Err(e)) if lowered && !strict => {
            eprintln!(
                "SKIPPING {what}: PTX ISA {}.{} is newer than ptxas's {}.{}, and lowered: {}",
                f.version.0,
                f.version.1,
                max.0,
                max.1,
                e.lines().nth(1).unwrap_or("")
            );
            false
        }
        Some(Err(e)) => panic!("{e}"),
    }
}

#[test]
fn spliced_corpus_assembles_with_ptxas() {
    let module = ProbeModule {
        text: BUSY_MODULE.into(),
        min_version: (7, 0),
        min_sm: 70,
    };
    for (i, (name, text)) in corpus().iter().enumerate() {
        let f = parse::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut busy = Busy {
            extra_param: i % 2 == 0,
        };
        let out = probe::splice(text, &f, &module, &mut busy).unwrap();
        let exits: usize = f
            .kernels()
            .map(|k| k.statements.iter().filter(|s| s.is_return()).count())
            .sum();
        let fall_off = usize::from(name.starts_with("hand/"));
        assert_eq!(
            out.attached.len(),
            f.kernels().count() + exits + fall_off,
            "{name}"
        );
        assert_eq!(
            out.warnings.is_empty(),
            f.sm().is_none_or(|n| n >= 70) && f.version >= (7, 0),
            "{name}: {:?}",
            out.warnings
        );
        let g = parse::parse(&out.text)
            .unwrap_or_else(|e| panic!("{name}: spliced text does not parse: {e}\n{}", out.text));
        assert!(g.sm().is_none_or(|n| n >= 70));
        for (a, b) in f.kernels().zip(g.kernels()) {
            assert_eq!(a.name, b.name);
            assert_eq!(
                b.params.len(),
                a.params.len() + usize::from(busy.extra_param)
            );
            // Every original return now follows a probe (or a probe's skip branch).
            assert_eq!(
                b.statements.iter().filter(|s| s.is_return()).count(),
                a.statements.iter().filter(|s| s.is_return()).count()
            );
        }
        // The spliced text must assemble whenever the original (raised to sm_70) does.
        let mut raised = f.clone();
        let raised_text;
        if f.sm().is_some_and(|n| n < 70) {
            raised_text = probe::splice(
                text,
                &f,
                &ProbeModule {
                    min_sm: 70,
                    ..ProbeModule::default()
                },
                &mut Nothing,
            )
            .unwrap()
            .text;
            raised = parse::parse(&raised_text).unwrap();
        }
        if assemble(&raised, &format!("orig_{name}"), false) {
            assemble(&g, &format!("spliced_{name}"), true);
        }
    }
}

#[test]
fn unmodified_corpus_assembles_with_ptxas() {
    for (name, text) in corpus() {
        let f = parse::parse(text).unwrap();
        assemble(&f, &format!("orig_{name}"), false);
    }
}

#[test]
fn errors_name_the_line() {
    let text = read("nvrtc/basic_90.ptx");
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    // Truncated in the middle of line 40 (inside `vector_add`).
    let cut: usize = lines[..39].iter().map(|l| l.len()).sum::<usize>() + 8;
    let e = parse::parse(&text[..cut]).unwrap_err();
    assert_eq!(e.line, 40, "{e}");
    assert!(e.what.contains("end of the text"), "{e}");
    // Garbage.
    let e = parse::parse("\u{0}\u{1}garbage").unwrap_err();
    assert_eq!(e.line, 1, "{e}");
    let e = parse::parse(".version 8.0\n.target sm_90\n\n%%% !!").unwrap_err();
    assert_eq!((e.line, e.col), (4, 1), "{e}");
    // A stray line in a body.
    let mut bad: Vec<&str> = lines.clone();
    bad.insert(44, "\t))) what;\n");
    let e = parse::parse(&bad.concat()).unwrap_err();
    assert_eq!(e.line, 45, "{e}");
    // Unbalanced braces: the `}` closing `vector_add` (line 65) removed: the error is at the
    // next function's header.
    let mut bad: Vec<&str> = lines.clone();
    assert_eq!(bad[64], "}\n");
    bad.remove(64);
    let e = parse::parse(&bad.concat()).unwrap_err();
    assert_eq!(e.line, 66, "{e}");
    assert!(e.what.contains("line 22"), "{e}");
    // One `}` too many.
    let mut bad: Vec<&str> = lines.clone();
    bad.insert(64, "}\n");
    let e = parse::parse(&bad.concat()).unwrap_err();
    assert_eq!(e.line, 66, "{e}");
    // An unterminated string in `.file`.
    let e = parse::parse(".version 8.0\n.target sm_90\n.file 1 \"abc\n").unwrap_err();
    assert_eq!(e.line, 3, "{e}");
}

#[test]
fn unparsable_module_is_left_alone() {
    let text = read("nvrtc/reduce_80.ptx");
    let broken = &text[..text.len() / 2];
    let module = ProbeModule {
        text: BUSY_MODULE.into(),
        min_version: (8, 0),
        min_sm: 90,
    };
    let out = probe::instrument(broken, &module, &mut Busy { extra_param: true }).unwrap();
    assert_eq!(out.text, broken);
    assert!(out.attached.is_empty());
    assert_eq!(out.warnings.len(), 1);
    assert!(out.warnings[0].line > 1);
}

#[derive(Clone, Debug)]
enum Mutation {
    Truncate(usize),
    Delete(usize, usize),
    Insert(usize, &'static str),
    Byte(usize, u8),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    let snippets = prop::sample::select(vec![
        "{",
        "}",
        "(",
        ")",
        "[",
        "]",
        ";",
        ",",
        "@",
        "@!",
        "!",
        ":",
        ".reg",
        ".entry k(",
        ".func",
        "ret;",
        "\"",
        "/*",
        "*/",
        "//",
        "0f",
        "0x",
        "-",
        "+",
        ".loc",
        ".loc 1",
        ".file 1",
        ".section .debug_str {",
        "$L:",
        "%r1",
        "\n",
        "\u{e9}",
        "0d1",
        "1e",
        ".param .u64 p",
    ]);
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 0usize..64).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (any::<usize>(), snippets).prop_map(|(a, s)| Mutation::Insert(a, s)),
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::Byte(a, b)),
    ]
}

fn mutate(text: &str, muts: &[Mutation]) -> String {
    let mut b = text.as_bytes().to_vec();
    for m in muts {
        let at = |a: usize, len: usize| if len == 0 { 0 } else { a % (len + 1) };
        match *m {
            Mutation::Truncate(a) => {
                let a = at(a, b.len());
                b.truncate(a);
            }
            Mutation::Delete(a, n) => {
                let a = at(a, b.len());
                let e = (a + n).min(b.len());
                b.drain(a..e);
            }
            Mutation::Insert(a, s) => {
                let a = at(a, b.len());
                b.splice(a..a, s.bytes());
            }
            Mutation::Byte(a, x) => {
                if !b.is_empty() {
                    let a = a % b.len();
                    b[a] = x;
                }
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig {
        // PROPTEST_CASES=20000 for a longer run.
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512),
        ..ProptestConfig::default()
    })]

    #[test]
    fn mutations_never_panic(
        file in any::<prop::sample::Index>(),
        muts in prop::collection::vec(arb_mutation(), 1..4),
    ) {
        let files = corpus();
        let (_, text) = &files[file.index(files.len())];
        let m = mutate(text, &muts);
        let parsed = parse::parse(&m);
        let lenient = parse::parse_lenient(&m);
        if let Ok(f) = &parsed {
            // Lenient parsing only differs on errors.
            let l = lenient.as_ref().unwrap();
            prop_assert_eq!(f.functions.len(), l.functions.len());
            prop_assert!(l.functions.iter().all(|f| f.error.is_none()));
        }
        if let Err(e) = &parsed {
            // Errors point into the text.
            let lines = 1 + m.matches('\n').count() as u32;
            prop_assert!(e.line >= 1 && e.line <= lines, "{e} ({lines} lines)");
            prop_assert!(e.col >= 1, "{e}");
        }
        if let Ok(f) = parsed {
            let same = probe::splice(&m, &f, &ProbeModule::default(), &mut Nothing).unwrap();
            prop_assert_eq!(&same.text, &m);
            let module = ProbeModule { text: String::new(), min_version: (8, 0), min_sm: 90 };
            let _ = probe::splice(&m, &f, &module, &mut Busy { extra_param: true });
        }
        let _ = probe::instrument(&m, &ProbeModule::default(), &mut Busy { extra_param: false });
    }
}

/// `cargo test -p jit --test ptx_parse corpus_summary -- --ignored --nocapture` prints what
/// the parser sees in each corpus file.
#[test]
#[ignore = "prints a summary; run by hand"]
fn corpus_summary() {
    for (name, text) in corpus() {
        let f = parse::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        println!(
            "{name}: .version {}.{} .target {:?}, {} files, {} globals",
            f.version.0,
            f.version.1,
            f.target,
            f.files.len(),
            f.globals.len()
        );
        for func in &f.functions {
            let count = |k: StmtKind| func.statements.iter().filter(|s| s.kind == k).count();
            println!(
                "  {:?} {} (line {}): {} params, {} insns, {} labels, {} directives, {} exits, {} with .loc, max depth {}, {:?}",
                func.kind,
                func.name,
                func.line,
                func.params.len(),
                count(StmtKind::Instruction),
                count(StmtKind::Label),
                count(StmtKind::Directive),
                func.statements.iter().filter(|s| s.is_return()).count(),
                func.statements.iter().filter(|s| s.loc.is_some()).count(),
                func.statements.iter().map(|s| s.depth).max().unwrap_or(0),
                func.directives
                    .iter()
                    .map(|d| d.name.as_str())
                    .collect::<Vec<_>>()
            );
        }
    }
}

const SOUP: &[&str] = &[
    ".entry",
    ".func",
    ".visible",
    ".param",
    ".u64",
    ".b8",
    ".reg",
    ".pred",
    ".align",
    "8",
    "k",
    "f",
    "%p1",
    "%r1",
    "$L1",
    "_",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ";",
    ",",
    ":",
    "@",
    "!",
    "+",
    "-",
    "ret",
    "exit",
    "bra",
    "ld.param.u64",
    "call.uni",
    ".loc",
    "1",
    "2",
    ".file",
    "\"x.cu\"",
    ".section",
    ".debug_str",
    ".maxntid",
    ".global",
    "=",
    "0f3F800000",
    "\n",
    " ",
    "// c\n",
    "/* c */",
    ".pragma",
    ".callprototype",
    ".ptr",
    "[1]",
    "0x10",
];

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512),
        ..ProptestConfig::default()
    })]

    /// Token soup after a valid header: errors or a parse, never a panic; what parses
    /// round-trips and splices.
    #[test]
    fn token_soup_never_panics(toks in prop::collection::vec(prop::sample::select(SOUP), 0..80)) {
        let src = format!(".version 8.0\n.target sm_90\n.address_size 64\n{}", toks.join(" "));
        if let Ok(f) = parse::parse(&src) {
            let same = probe::splice(&src, &f, &ProbeModule::default(), &mut Nothing).unwrap();
            prop_assert_eq!(&same.text, &src);
            let out = probe::splice(&src, &f, &ProbeModule::default(), &mut Busy { extra_param: true });
            if let Ok(out) = out {
                prop_assert!(parse::parse(&out.text).is_ok(), "{}", out.text);
            }
        }
    }
}
