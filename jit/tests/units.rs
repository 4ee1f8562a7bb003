//! Small checks with hand-computed expectations: the stack scan, the helper table, errors.

mod common;

use ebpf::asm::assemble;
use ebpf::program::Program;
use jit::{CompileError, JitOptions};

#[test]
fn stack_depth_scan() {
    let p = assemble("r0 = *(u64 *)(r10 - 24)\nexit").unwrap();
    // Deepest byte -24, plus 8 for the access width, rounded up to 16.
    assert_eq!(jit::lower::stack_depth(&p, 0, p.len()), 32);
    let p = assemble("r2 = r10\nr2 += -100\n*(u32 *)(r2 + 0) = 1\nexit").unwrap();
    assert_eq!(jit::lower::stack_depth(&p, 0, p.len()), 112);
    // Pointer arithmetic the scan cannot follow: the whole 512 bytes.
    let p = assemble("r2 = r10\nr2 += r1\nr0 = 0\nexit").unwrap();
    assert_eq!(jit::lower::stack_depth(&p, 0, p.len()), 512);
    let p = assemble("r0 = 0\nexit").unwrap();
    assert_eq!(jit::lower::stack_depth(&p, 0, p.len()), 16);
}

#[test]
fn every_helper_has_a_gpu_implementation() {
    for h in ebpf::helpers::HELPERS {
        if ebpf::helpers::HOST_ONLY.contains(&h.id) {
            // Refused with a clear error instead.
            assert!(jit::prelude::def(h.id).is_none(), "{}", h.name);
            let p = Program::from_insns(
                "host_only",
                assemble(&format!("call {}\nr0 = 0\nexit", h.id)).unwrap(),
            );
            let e = jit::compile(&p, &JitOptions::default())
                .unwrap_err()
                .to_string();
            assert!(e.contains("not available on the GPU"), "{e}");
            continue;
        }
        let d = jit::prelude::def(h.id).unwrap_or_else(|| panic!("helper {} missing", h.name));
        assert_eq!(d.name, h.name);
    }
}

#[test]
fn stack_size_option_sets_the_frame() {
    let p = Program::from_insns("s", assemble("r0 = 0\nexit").unwrap());
    let opts = JitOptions {
        stack_size: Some(200),
        ptx_version: (8, 5),
        sm: 89,
        ..JitOptions::default()
    };
    let t = jit::compile(&p, &opts).unwrap().text();
    assert!(t.contains(".local .align 16 .b8 stack[208];"), "{t}");
    assert!(t.contains(".version 8.5\n.target sm_89\n"));
}

#[test]
fn errors_name_the_instruction() {
    let p = Program::from_insns("k", assemble("call kfunc[7]\nexit").unwrap());
    match jit::compile(&p, &JitOptions::default()).unwrap_err() {
        CompileError::Unsupported { loc, insn, .. } => {
            assert_eq!(loc.pc, 0);
            assert!(insn.contains("kfunc"), "{insn}");
        }
        e => panic!("unexpected {e}"),
    }
    let p = Program::from_insns("m", assemble("r1 = map_idx[0] ll\nexit").unwrap());
    assert!(matches!(
        jit::compile(&p, &JitOptions::default()).unwrap_err(),
        CompileError::Unsupported { .. }
    ));
    let p = Program::from_insns("e", vec![]);
    assert!(matches!(
        jit::compile(&p, &JitOptions::default()).unwrap_err(),
        CompileError::Empty { .. }
    ));
}

#[test]
fn writes_to_r10_are_rejected() {
    for src in [
        "r10 = 5\nexit",
        "r10 = r1\nexit",
        "r10 = *(u64 *)(r1 + 0)\nexit",
    ] {
        let p = Program::from_insns("fp", assemble(src).unwrap());
        assert!(
            matches!(
                jit::compile(&p, &JitOptions::default()),
                Err(CompileError::Unsupported { .. })
            ),
            "{src}"
        );
    }
}

#[test]
fn stack_atomics_are_plain_memory_operations() {
    // PTX atomics on local memory are undefined: through r10 the JIT emits ld/op/st only;
    // through another register it checks the address space at run time.
    let p = Program::from_insns(
        "sa",
        assemble("r1 = 1\n*(u64 *)(r10 - 8) = r1\nlock *(u64 *)(r10 - 8) += r1\nr1 = atomic_fetch_add((u64 *)(r10 - 8), r1)\nr0 = r1\nexit").unwrap(),
    );
    let t = jit::compile(&p, &JitOptions::default()).unwrap().text();
    assert!(
        !t.contains("atom.") && !t.contains("red.") && !t.contains("isspacep"),
        "{t}"
    );
    let p = Program::from_insns(
        "ga",
        assemble("r1 = *(u64 *)(r1 + 16)\nr2 = 1\nlock *(u64 *)(r1 + 0) += r2\nr0 = 0\nexit")
            .unwrap(),
    );
    let t = jit::compile(&p, &JitOptions::default()).unwrap().text();
    assert!(
        t.contains("isspacep.local") && t.contains("red.relaxed.sys.add.u64"),
        "{t}"
    );
}

#[test]
fn unaligned_option_splits_misaligned_accesses_into_bytes() {
    let src = "r2 = *(u32 *)(r1 + 1)\n*(u16 *)(r1 + 3) = r2\nr3 = *(s16 *)(r1 + 5)\nr0 = *(u64 *)(r10 - 8)\nexit";
    let p = Program::from_insns("u", assemble(src).unwrap());
    let aligned = jit::compile(&p, &JitOptions::default()).unwrap().text();
    assert!(aligned.contains("ld.u32 %rd2, [%rd1+1];"), "{aligned}");
    // Without the entry, whose inline copy of the body would double the counts.
    let opts = JitOptions {
        unaligned: true,
        entry: false,
        ..JitOptions::default()
    };
    let t = jit::compile(&p, &opts).unwrap().text();
    // Each access: the direct one when the address is aligned, byte accesses on a branch
    // taken when it is not.
    for direct in [
        "ld.u32 %rd2, [%rd1+1];",
        "st.u16 [%rd1+3], %rd2;",
        "ld.s16 %rd3, [%rd1+5];",
    ] {
        assert!(t.contains(direct), "{direct}: {t}");
    }
    assert_eq!(t.matches("ld.u8").count(), 4 + 2, "{t}");
    assert_eq!(t.matches("st.u8").count(), 2, "{t}");
    assert_eq!(
        t.matches("setp.ne.u64").count(),
        3,
        "one alignment test per access: {t}"
    );
    // Stack accesses stay whole: r10-relative offsets are aligned by the verifier; they
    // address the frame's `.local` array directly (frame of 16 bytes: r10 - 8 = stack + 8).
    assert!(t.contains("ld.local.u64 %rd0, [stack+8];"), "{t}");
}

#[test]
fn unaligned_option_checks_a_run_of_accesses_through_one_pointer_once() {
    // Four words read and one written through r2 at offsets that are multiples of their
    // sizes, with arithmetic between: one check of r2 leads to plain accesses (which ptxas
    // can issue together); a misaligned r2 takes the per-access code as before. The load
    // through r3 needs its own check and ends the run; after the jump target a new run
    // would need two accesses and has one.
    let src = "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr0 = *(u64 *)(r2 + 0)\nr4 = *(u32 *)(r2 + 8)\n\
               r0 += r4\nr4 = *(u16 *)(r2 + 14)\nr0 += r4\n*(u64 *)(r2 + 16) = r0\nr4 = *(u64 *)(r3 + 0)\n\
               if r4 == 0 goto out\nr0 += 1\nout:\nr4 = *(u64 *)(r2 + 24)\nr0 += r4\nexit";
    let p = Program::from_insns("run", assemble(src).unwrap());
    let opts = JitOptions {
        unaligned: true,
        entry: false,
        ..JitOptions::default()
    };
    let t = jit::compile(&p, &opts).unwrap().text();
    // The ctx loads through r1 need no check (the ctx is aligned).
    for ctx_load in ["ld.u64 %rd2, [%rd1];", "ld.u64 %rd3, [%rd1+8];"] {
        assert!(t.contains(ctx_load), "{ctx_load}: {t}");
    }
    let fast = "\tld.u64 %rd0, [%rd2];\n\tld.u32 %rd4, [%rd2+8];\n\tadd.s64 %rd0, %rd0, %rd4;\n\
                \tld.u16 %rd4, [%rd2+14];\n\tadd.s64 %rd0, %rd0, %rd4;\n\tst.u64 [%rd2+16], %rd0;\n";
    assert!(t.contains(fast), "the run's fast path, straight: {t}");
    assert!(
        t.contains("and.b64 %rd") && t.contains(", %rd2, 7;"),
        "r2 checked for 8 bytes: {t}"
    );
    // Checks: r2's run (1) and its four accesses (4); the r3 load (1) and the lone r2 load
    // after the label (1). None for the ctx loads through r1.
    assert_eq!(t.matches("setp.ne.u64").count(), 7, "{t}");
    // Byte paths: 8 + 4 + 2 (r2 loads) + 8 (r3) + 8 (after the label) loads, 8 stores.
    assert_eq!(t.matches("ld.u8").count(), 30, "{t}");
    assert_eq!(t.matches("st.u8").count(), 8, "{t}");
    common::assemble(&t, "aligned_run");
    // Without the option: no checks at all.
    let plain = jit::compile(
        &p,
        &JitOptions {
            entry: false,
            ..JitOptions::default()
        },
    )
    .unwrap()
    .text();
    assert_eq!(plain.matches("setp.ne.u64").count(), 0, "{plain}");
}

#[test]
fn unaligned_option_pairs_eight_byte_loads_into_sixteen_byte_ones_where_the_base_allows() {
    // Four words at 0, 8, 16, 24 through r2, summed: with r2 a multiple of 16, two 16-byte
    // loads; a multiple of 8, four plain loads; else the byte path. A store between two
    // loads keeps them apart (the words at 32 and 40).
    let mut src = String::from("r2 = *(u64 *)(r1 + 0)\nr0 = 0\n");
    for k in 0..4 {
        src.push_str(&format!("r5 = *(u64 *)(r2 + {})\nr0 += r5\n", 8 * k));
    }
    src.push_str(
        "r5 = *(u64 *)(r2 + 32)\n*(u64 *)(r2 + 56) = r0\nr4 = *(u64 *)(r2 + 40)\nr0 += r4\nexit",
    );
    let p = Program::from_insns("pairs", assemble(&src).unwrap());
    let opts = JitOptions {
        unaligned: true,
        entry: false,
        ..JitOptions::default()
    };
    let t = jit::compile(&p, &opts).unwrap().text();
    assert_eq!(t.matches("ld.v2.u64").count(), 2, "{t}");
    assert!(
        t.contains(", %rd2, 15;") && t.contains(", %rd2, 7;"),
        "two checks of r2: {t}"
    );
    // Each pair's second word comes from the vector load, after the first word is used.
    let v = t.find("ld.v2.u64").unwrap();
    let after = &t[v..];
    assert!(after.find("mov.b64 %rd5").unwrap() < after.find("add.s64 %rd0, %rd0, %rd5").unwrap());
    // Three paths of six accesses: 16-byte (2 vector, 2 plain: the store splits 32 and 40),
    // 8-byte (6 plain), checked (6 on the byte path: 8 byte loads a load, 8 stores).
    assert_eq!(t.matches("ld.u8").count(), 6 * 8, "{t}");
    assert_eq!(t.matches("st.u8").count(), 8, "{t}");
    common::assemble(&t, "aligned_pairs");
}

#[test]
fn job_buffers_are_read_with_global_loads_in_the_service_mode() {
    // The job ctx's data pointer (and what is added to it) points into global memory: the
    // service's chunk loop says `.global`; elsewhere the accesses stay generic, the
    // one-record `.func` too (the runtime may hand it an input in shared memory).
    let src = "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr4 = r2\nr4 += 32\nif r4 > r3 goto bad\n\
               r0 = *(u64 *)(r2 + 0)\nr5 = *(u64 *)(r2 + 8)\nr0 += r5\nr2 += 16\nr5 = *(u32 *)(r2 + 0)\n\
               r0 += r5\nexit\nbad:\nr0 = 0\nexit";
    let p = Program::from_insns("job", assemble(src).unwrap());
    let service = JitOptions {
        unaligned: true,
        entry: false,
        chunk_loop: true,
        stack_size: Some(16),
        ..JitOptions::default()
    };
    let t = jit::compile(&p, &service).unwrap().text();
    // Each definition: the last mention of its name (the prototypes come first).
    let at = |name: &str| {
        t.rfind(&format!(") {name}("))
            .unwrap_or_else(|| panic!("no {name} in {t}"))
    };
    let (func, lp, one) = (at("bpf_prog_job"), at("bpf_loop_job"), at("bpf_one_job"));
    assert!(
        func < lp && lp < one,
        "the .func is printed before its loop, the loop before the one-record run: {t}"
    );
    let (func_text, loop_text, one_text) = (&t[func..lp], &t[lp..one], &t[one..]);
    assert!(!one_text.contains(".global"), "{one_text}");
    for want in ["ld.global.v2.u64", "ld.global.u64", "ld.global.u32"] {
        assert!(loop_text.contains(want), "{want}: {t}");
    }
    assert!(!loop_text.contains("\tld.u64 %rd0, [%rd2];"), "{t}");
    assert!(
        !func_text.contains(".global"),
        "the one-record .func stays generic: {func_text}"
    );
    for want in ["ld.v2.u64", "ld.u64", "ld.u32"] {
        assert!(func_text.contains(want), "{want}: {func_text}");
    }
    common::assemble(&t, "job_global");
    let plain = jit::compile(
        &p,
        &JitOptions {
            unaligned: true,
            entry: false,
            ..JitOptions::default()
        },
    )
    .unwrap()
    .text();
    assert!(!plain.contains("ld.global"), "{plain}");
}

/// The hash-count program of the GPU benchmark (`gpu_diff bench`): a lookup with the key on
/// the stack, an atomic add on the value, an insert when absent.
const HASHCOUNT: &str = "
r2 = *(u64 *)(r1 + 0)
r3 = *(u64 *)(r1 + 8)
r4 = r2
r4 += 4
if r4 > r3 goto bad
r2 = *(u32 *)(r2 + 0)
r2 &= 4095
*(u32 *)(r10 - 4) = r2
r1 = map_idx[0] ll
r2 = r10
r2 += -4
call map_lookup_elem
if r0 == 0 goto insert
r1 = 1
lock *(u64 *)(r0 + 0) += r1
r0 = 0
exit
insert:
r1 = 1
*(u64 *)(r10 - 16) = r1
r1 = map_idx[0] ll
r2 = r10
r2 += -4
r3 = r10
r3 += -16
r4 = 1
call map_update_elem
r0 = 2
exit
bad:
r0 = 1
exit
";

/// Fetching atomics (fetch-add, exchange, compare-and-swap) are `atom.acq_rel`, as eBPF
/// orders them; with `relaxed_atomics` (memory probes) `atom.relaxed`, still atomic, and
/// both assemble. Adds without fetch are `red.relaxed` either way.
#[test]
fn fetching_atomics_are_relaxed_only_when_asked() {
    let p = Program::from_insns(
        "fa",
        assemble(
            "r1 = *(u64 *)(r1 + 16)\nr2 = 1\nr2 = atomic_fetch_add((u64 *)(r1 + 0), r2)\n\
             r0 = 5\nr0 = cmpxchg_64(r1 + 8, r0, r2)\nr3 = 7\nr3 = xchg_64(r1 + 16, r3)\n\
             lock *(u64 *)(r1 + 24) += r2\nr0 += r3\nexit",
        )
        .unwrap(),
    );
    for relaxed in [false, true] {
        let opts = JitOptions {
            relaxed_atomics: relaxed,
            ..JitOptions::default()
        };
        let t = jit::compile(&p, &opts).unwrap().text();
        let want = if relaxed {
            "atom.relaxed.sys"
        } else {
            "atom.acq_rel.sys"
        };
        for op in [".add.u64", ".cas.b64", ".exch.b64"] {
            assert!(
                t.lines().any(|l| l.contains(want) && l.contains(op)),
                "{relaxed} {op}: {t}"
            );
        }
        let other = if relaxed {
            "atom.acq_rel"
        } else {
            "atom.relaxed"
        };
        assert!(!t.contains(other), "{relaxed}: {t}");
        assert!(t.contains("red.relaxed.sys.add.u64"), "{t}");
        common::assemble(&t, &format!("fetching atomics, relaxed {relaxed}"));
    }
}

fn hash_opts(key_size: u32, scope: jit::AtomicScope) -> (Program, JitOptions) {
    let mut p = Program::from_insns("hc", assemble(HASHCOUNT).unwrap());
    p.maps = vec![ebpf::program::MapDef {
        name: "counts".into(),
        kind: ebpf::program::MapKind::Hash,
        key_size,
        value_size: 8,
        max_entries: 4096,
        flags: 0,
        origin: ebpf::program::MapOrigin::Btf,
        init: None,
    }];
    let mut b = jit::MapBinding::for_def(&p.maps[0], 1 << 40, 1);
    b.scope = scope;
    let opts = JitOptions {
        maps: vec![b],
        stack_size: Some(16),
        ..JitOptions::default()
    };
    (p, opts)
}

#[test]
fn map_helpers_are_inlined_with_word_keys() {
    let (p, opts) = hash_opts(4, jit::AtomicScope::Gpu);
    let t = jit::compile(&p, &opts).unwrap().text();
    // No helper `.func`, no call: both helper bodies are blocks at their call sites.
    assert!(
        !t.contains("call.uni") && !t.contains(".func (.param .b64 ret0) bpf_h"),
        "{t}"
    );
    assert_eq!(
        t.matches("{ // map_lookup_elem inline").count(),
        2,
        "func + entry: {t}"
    );
    // The 4-byte key at r10 - 4 of a 16-byte frame is read once, as a word, from the frame.
    assert!(t.contains("ld.local.u32 %hd64, [stack+12];"), "{t}");
    assert!(!t.contains("ld.u8 %hd22"), "no byte loop: {t}");
    // One-word keys: acquire state, acquire key word, relaxed re-read; no fence in lookups.
    let lookup = t.split("{ // map_lookup_elem inline").nth(1).unwrap();
    let lookup = &lookup[..lookup.find("\t}\n").unwrap()];
    assert!(
        lookup.contains("ld.acquire.gpu.u64 %hd8, [%hd7];"),
        "{lookup}"
    );
    assert!(
        lookup.contains("ld.acquire.gpu.u32 %hd27, [%hd7+16];"),
        "{lookup}"
    );
    assert!(
        lookup.contains("ld.relaxed.gpu.u64 %hd30, [%hd7];"),
        "{lookup}"
    );
    assert!(!lookup.contains("fence"), "{lookup}");
    // The value pointer from the lookup is global: no stack check before the atomic.
    assert!(t.contains("red.relaxed.gpu.global.add.u64"), "{t}");
    assert!(!t.contains("isspacep"), "{t}");
    // The job ctx is not read after the prefix: no copy in local memory.
    assert!(!t.contains("st.local.u64 [jobctx"), "{t}");
    common::assemble(&t, "hashcount, 4-byte key");
}

#[test]
fn helpers_of_a_tiered_map_wait_out_its_latency_and_link() {
    let (p, mut opts) = hash_opts(4, jit::AtomicScope::Gpu);
    let local = jit::compile(&p, &opts).unwrap().text();
    assert!(
        !local.contains("%globaltimer"),
        "a local map waits for nothing"
    );
    // 170 ns, 26 GB/s (38 ps a byte): an 8-byte value costs ceil(304 / 1000) = 1 ns of link.
    opts.maps[0].tier = Some(jit::MapTier {
        latency_ns: 170,
        ps_per_byte: 38,
        tat_addr: 0x7000_0040,
    });
    let t = jit::compile(&p, &opts).unwrap().text();
    // Both helpers (lookup, update), in the func and the entry: each starts with the wait.
    for helper in ["map_lookup_elem", "map_update_elem"] {
        let blocks: Vec<&str> = t.split(&format!("{{ // {helper} inline")).skip(1).collect();
        assert_eq!(blocks.len(), 2, "{helper}: {t}");
        for b in blocks {
            let b = &b[..b.find("\t}\n").unwrap()];
            let wait = b.find("$Ltierw:").expect("the wait");
            assert!(b.contains("add.u64 %hd81, %hd80, 170;"), "{b}");
            assert!(
                b.contains("mov.b64 %hd82, 1879048256;")
                    && b.contains("atom.relaxed.gpu.max.u64 %hd83, [%hd82], %hd80;")
                    && b.contains("atom.relaxed.gpu.add.u64 %hd83, [%hd82], 1;"),
                "{b}"
            );
            assert!(b.contains("max.u64 %hd81, %hd81, %hd83;"), "{b}");
            assert!(wait < b.find("ld.acquire.gpu").unwrap(), "{b}");
            assert!(
                b.find("atom.relaxed.gpu.max").unwrap() < b.find("atom.relaxed.gpu.add").unwrap(),
                "{b}"
            );
            assert!(b.find("atom.relaxed.gpu.add").unwrap() < wait, "{b}");
        }
    }
    common::assemble(&t, "hashcount, tiered with a cap");
    // Latency only: no link word.
    opts.maps[0].tier = Some(jit::MapTier {
        latency_ns: 170,
        ps_per_byte: 0,
        tat_addr: 0,
    });
    let t = jit::compile(&p, &opts).unwrap().text();
    assert!(t.contains("$Ltierw:") && !t.contains("%hd82"), "{t}");
    common::assemble(&t, "hashcount, tiered");
    // As a `.func` (past the inline budget): the same wait first.
    let used = [jit::prelude::Use {
        id: ebpf::helpers::MAP_LOOKUP_ELEM,
        map: Some(0),
    }]
    .into_iter()
    .collect();
    let (_, bodies) = jit::prelude::generate(&used, &opts);
    let f = &bodies[0];
    assert!(
        f.find("add.u64 %rd81, %rd80, 170;").unwrap() < f.find("ld.acquire").unwrap(),
        "{f}"
    );
    // A cap needs its link word.
    opts.maps[0].tier = Some(jit::MapTier {
        latency_ns: 0,
        ps_per_byte: 38,
        tat_addr: 0,
    });
    let e = jit::compile(&p, &opts).unwrap_err().to_string();
    assert!(e.contains("link word"), "{e}");
}

#[test]
fn map_counter_adds_are_warp_aggregated() {
    // HASHCOUNT adds a constant to the looked-up value without fetch. Fast path: when every
    // active lane has the same address (two shuffles and a vote), the highest lane adds the
    // value times the lane count; otherwise one `red` per `match.any` group of lanes with
    // the same address, a plain `red` per lane for mixed values (the value is a constant
    // here, so it is not matched). With the option off, only the plain `red`.
    let (p, opts) = hash_opts(4, jit::AtomicScope::Gpu);
    let t = jit::compile(&p, &opts).unwrap().text();
    assert!(t.contains("activemask.b32"), "{t}");
    assert_eq!(
        t.matches("vote.sync.all.pred").count(),
        2,
        "one per site: {t}"
    );
    assert_eq!(
        t.matches("shfl.sync.idx.b32").count(),
        4,
        "address only: {t}"
    );
    assert_eq!(
        t.matches("match.any.sync.b64").count(),
        2,
        "address only, 1 per site, 2 sites: {t}"
    );
    assert!(t.contains("popc.b32") && t.contains("bfind.u32"), "{t}");
    assert_eq!(
        t.matches("red.relaxed.gpu.global.add.u64").count(),
        6,
        "fast, grouped and per-lane, per site: {t}"
    );
    common::assemble(&t, "hashcount, warp-aggregated");
    assert!(!t.contains("%smid"), "not striped: {t}");
    // Striped: the add goes to the SM's copy, `stride` bytes apart.
    let mut striped = opts.clone();
    striped.maps[0].stripes = 4;
    striped.maps[0].stripe_stride = 4096;
    let t = jit::compile(&p, &striped).unwrap().text();
    assert_eq!(t.matches("%smid").count(), 2, "{t}");
    assert!(
        t.contains("and.b32") && t.contains(", 3;") && t.contains(", 4096;"),
        "{t}"
    );
    common::assemble(&t, "hashcount, striped");
    striped.maps[0].stripes = 3;
    assert!(
        jit::compile(&p, &striped).is_err(),
        "3 stripes is not a power of two"
    );
    let off = JitOptions {
        warp_aggregate: false,
        ..opts
    };
    let t = jit::compile(&p, &off).unwrap().text();
    assert!(!t.contains("match.any") && !t.contains("activemask"), "{t}");
    assert_eq!(
        t.matches("red.relaxed.gpu.global.add.u64").count(),
        2,
        "{t}"
    );
}

#[test]
fn multi_word_and_unaligned_keys_fence_once_per_match() {
    // A 12-byte key at r10 - 4 is 4-aligned: three u32 words, relaxed, one fence on a match.
    let src = HASHCOUNT.replace(
        "r2 = *(u32 *)(r2 + 0)\n",
        "r2 = *(u32 *)(r2 + 0)\n*(u64 *)(r10 - 12) = r2\n",
    );
    let (mut p, opts) = hash_opts(12, jit::AtomicScope::Sys);
    p.insns = assemble(&src.replace(
        "r2 += -4\ncall map_lookup_elem",
        "r2 += -12\ncall map_lookup_elem",
    ))
    .unwrap();
    let t = jit::compile(&p, &opts).unwrap().text();
    let lookup = t.split("{ // map_lookup_elem inline").nth(1).unwrap();
    let lookup = &lookup[..lookup.find("\t}\n").unwrap()];
    for (reg, off) in [(64, 4), (65, 8), (66, 12)] {
        assert!(
            lookup.contains(&format!("ld.local.u32 %hd{reg}, [stack+{off}];")),
            "{lookup}"
        );
    }
    for off in [16, 20, 24] {
        assert!(
            lookup.contains(&format!("ld.relaxed.sys.u32 %hd27, [%hd7+{off}];")),
            "{lookup}"
        );
    }
    assert_eq!(lookup.matches("fence.acq_rel.sys;").count(), 1, "{lookup}");
    common::assemble(&t, "hashcount, 12-byte key");
    // Through a pointer of unknown alignment (r2 from the record): bytes.
    let src = HASHCOUNT.replace(
        "r2 = r10\nr2 += -4\ncall map_lookup_elem",
        "r2 = *(u64 *)(r1 + 0)\ncall map_lookup_elem",
    );
    let (mut p, opts) = hash_opts(4, jit::AtomicScope::Sys);
    p.insns = assemble(&src).unwrap();
    let t = jit::compile(&p, &opts).unwrap().text();
    let lookup = t.split("{ // map_lookup_elem inline").nth(1).unwrap();
    for k in 0..4 {
        assert!(
            lookup.contains(&format!("ld.u8 %hd{}, [%hd2+{k}];", 64 + k)),
            "{lookup}"
        );
    }
    common::assemble(&t, "hashcount, key through a pointer");
}

#[test]
fn alu32_ops_are_64_bit_ops_then_masked() {
    // `w5 = -w5` with w5 = 0x7fffffff on a conditional path: the `cvt`/`neg.s32`/`cvt` form
    // is miscompiled by ptxas -O3 (case alu5440); the JIT emits `neg.s64` + `and.b64`.
    let src = "r5 = 0x7fffffff\nif r1 < r3 goto +1\nw5 = -w5\nw5 += 3\nw5 -= w2\nw5 *= 7\nw5 ^= 1\nr0 = r5\nexit";
    let p = Program::from_insns("n", assemble(src).unwrap());
    let opts = JitOptions {
        entry: false,
        ..JitOptions::default()
    };
    let t = jit::compile(&p, &opts).unwrap().text();
    for line in [
        "neg.s64 %rd5, %rd5;",
        "add.s64 %rd5, %rd5, 3;",
        "sub.s64 %rd5, %rd5, %rd2;",
        "mul.lo.s64 %rd5, %rd5, 7;",
        "xor.b64 %rd5, %rd5, 1;",
    ] {
        assert!(
            t.contains(&format!("\t{line}\n\tand.b64 %rd5, %rd5, 4294967295;\n")),
            "{line}: {t}"
        );
    }
    assert!(!t.contains("neg.s32") && !t.contains("cvt.u32.u64"), "{t}");
    common::assemble(&t, "alu32 ops");
}

#[test]
fn array_lookups_read_a_stack_key_from_the_frame() {
    let src = "r2 = 3\n*(u32 *)(r10 - 4) = r2\nr1 = map_idx[0] ll\nr2 = r10\nr2 += -4\ncall map_lookup_elem\nif r0 == 0 goto +2\nr0 = *(u64 *)(r0 + 0)\nexit\nr0 = 1\nexit";
    let mut p = Program::from_insns("ar", assemble(src).unwrap());
    p.maps = vec![ebpf::program::MapDef {
        name: "hist".into(),
        kind: ebpf::program::MapKind::PerThreadArray,
        key_size: 4,
        value_size: 8,
        max_entries: 16,
        flags: 0,
        origin: ebpf::program::MapOrigin::Btf,
        init: None,
    }];
    let opts = JitOptions {
        maps: vec![jit::MapBinding::for_def(&p.maps[0], 1 << 40, 256)],
        stack_size: Some(16),
        entry: false,
        ..JitOptions::default()
    };
    let t = jit::compile(&p, &opts).unwrap().text();
    // Frame of 16 bytes: r10 - 4 is stack + 12, where the program stored the key.
    assert!(t.contains("st.local.u32 [stack+12], %rd2;"), "{t}");
    assert!(t.contains("ld.local.u32 %hr1, [stack+12];"), "{t}");
    assert!(!t.contains("call.uni"), "{t}");
    common::assemble(&t, "array lookup");
}

/// The chunk loop runs the body once per record: every exit of the body becomes the loop's
/// next step, the ctx words are recomputed per record, and the module assembles.
#[test]
fn chunk_loop_wraps_the_body_in_a_loop() {
    // Early exit, a bpf-to-bpf call and a fall-through exit: three ways out of the body.
    let src = "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr4 = r2\nr4 += 8\n\
               if r4 > r3 goto short\nr1 = *(u64 *)(r2 + 0)\ncall sub\nr0 += 1\nexit\n\
               short:\nr0 = 7\nexit\nsub:\nr0 = r1\nr0 *= 3\nexit\n";
    let p = Program::from_insns("lp", assemble(src).unwrap());
    let opts = JitOptions {
        entry: false,
        chunk_loop: true,
        ..JitOptions::default()
    };
    let m = jit::compile(&p, &opts).unwrap();
    assert_eq!(m.loop_func(), Some("bpf_loop_lp"));
    let t = m.text();
    let body = &t[t
        .rfind(".func (.param .b64 ret) bpf_loop_lp(")
        .expect("loop func")
        ..t.rfind(".func (.param .b64 ret) bpf_one_lp(")
            .expect("one-record run")];
    let head = body
        .find("bra.uni $L_")
        .map(|k| &body[k + 8..])
        .expect("a branch back");
    let head = &head[..head.find(';').unwrap()];
    assert!(
        body.contains(&format!("{head}:\n")),
        "the loop head {head} is placed: {body}"
    );
    assert!(body.contains(".param .b64 stride"), "{body}");
    // One `ret` only: the loop's own, after the last record.
    assert_eq!(body.matches("\tret;\n").count(), 1, "{body}");
    assert!(
        body.contains("add.s64") && body.contains("st.param.b64 [ret]"),
        "{body}"
    );
    common::assemble(&t, "chunk loop");
    // Helper 507 ends the thread: no loop for such a program.
    let q = Program::from_insns("ex", assemble("call 507\nr0 = 0\nexit").unwrap());
    assert_eq!(jit::compile(&q, &opts).unwrap().loop_func(), None);
    // With the entry, no loop (they would inline the same body).
    let both = JitOptions {
        chunk_loop: true,
        ..JitOptions::default()
    };
    assert_eq!(jit::compile(&p, &both).unwrap().loop_func(), None);
}

/// The one-record run (`bpf_one_<name>`) comes with the chunk loop: the same body inline,
/// the ctx words computed from its eight parameters for record 0 of 1, every exit returning
/// r0, and its job-buffer accesses generic where the loop's are `.global`. A program that
/// lets the ctx pointer escape (here to a subprogram) gets the ctx's local copy.
#[test]
fn the_one_record_run_is_the_loop_body_with_generic_accesses() {
    let src = "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr4 = r2\nr4 += 8\n\
               if r4 > r3 goto short\nr0 = *(u64 *)(r2 + 0)\nr5 = *(u64 *)(r1 + 48)\nr0 += r5\n\
               r6 = *(u64 *)(r1 + 16)\n*(u64 *)(r6 + 0) = r0\nexit\nshort:\nr0 = 7\nexit\n";
    let opts = JitOptions {
        entry: false,
        chunk_loop: true,
        ..JitOptions::default()
    };
    let m = jit::compile(&Program::from_insns("one", assemble(src).unwrap()), &opts).unwrap();
    assert_eq!(m.one_func(), Some("bpf_one_one"));
    let t = m.text();
    let func = |name: &str| {
        let at = t
            .rfind(&format!(".func (.param .b64 ret) {name}("))
            .unwrap_or_else(|| panic!("{name}: {t}"));
        let end = t[at..].find("\n}\n").expect("its end") + at + 1;
        t[at..end].to_string()
    };
    let (one, lp) = (func("bpf_one_one"), func("bpf_loop_one"));
    assert!(
        one.contains("(\n\t.param .b64 in_base,\n\t.param .b64 in_size,\n\t.param .b64 out_base,\n\t.param .b64 out_size,\n\t.param .b64 arg0,\n\t.param .b64 arg1,\n\t.param .b64 arg2,\n\t.param .b64 arg3)"),
        "{one}"
    );
    // The loop's input load and output store are `.global`; the one-record run's the same
    // accesses, generic.
    for (a, b) in [
        ("ld.global.u64 %rd0, [%rd2]", "ld.u64 %rd0, [%rd2]"),
        ("st.global.u64 [%rd6]", "st.u64 [%rd6]"),
    ] {
        assert!(lp.contains(a), "{a}: {lp}");
        assert!(one.contains(b) && !one.contains(a), "{b}: {one}");
    }
    assert!(!one.contains(".global"), "{one}");
    // The ctx in registers: no load through %rd1, and no local copy (nothing reads it).
    assert!(!one.contains("[%rd1"), "{one}");
    assert!(!one.contains("st.local.u64 [jobctx"), "{one}");
    // Both exits come to the one return of r0.
    assert_eq!(one.matches("\tret;\n").count(), 1, "{one}");
    assert!(one.contains("st.param.b64 [ret], %rd0;"), "{one}");
    common::assemble(&t, "one-record run");

    // The ctx pointer handed to a subprogram: the one-record run stores the ctx words.
    let esc = "call sub\nexit\nsub:\nr0 = *(u64 *)(r1 + 40)\nexit\n";
    let m = jit::compile(&Program::from_insns("esc", assemble(esc).unwrap()), &opts).unwrap();
    let t = m.text();
    let one = &t[t.rfind("bpf_one_esc(").unwrap()..];
    assert!(one.contains("st.local.u64 [jobctx+40]"), "{one}");
    common::assemble(&t, "one-record run, escaping ctx");
    // Helper 507 ends the thread: no loop, no one-record run.
    let q = Program::from_insns("ex", assemble("call 507\nr0 = 0\nexit").unwrap());
    assert_eq!(jit::compile(&q, &opts).unwrap().one_func(), None);
}

/// `callx` with its id set on the same straight-line stretch lowers exactly like `call` of
/// that id; otherwise a compare chain on the register selects the helper, and an id no arm
/// takes traps. Both assemble.
#[test]
fn callx_lowers_to_the_static_call_or_a_chain() {
    let compile = |name: &str, src: &str, opts: &JitOptions| {
        let p = Program::from_insns(name, assemble(src).unwrap());
        jit::compile(&p, opts).unwrap_or_else(|e| panic!("{src}: {e}"))
    };
    let opts = JitOptions::default();
    let stat = compile("cx", "r6 = 509\ncallx r6\nr0 += 1\nexit", &opts).text();
    let call = compile("cx", "r6 = 509\ncall 509\nr0 += 1\nexit", &opts).text();
    assert_eq!(stat, call);
    // Through a copy, and a 32-bit move.
    let copy = compile("cw", "w6 = 509\nr3 = r6\ncallx r3\nr0 += 1\nexit", &opts).text();
    assert!(copy.contains("%smid"), "{copy}");
    assert!(!copy.contains("setp.ne.u64"), "{copy}");

    // The id differs by path: the chain, one arm per helper the GPU runs here.
    let src = "r6 = *(u64 *)(r1 + 32)\nr7 = 511\nif r6 & 1 goto c\nr7 = 509\nc:\ncallx r7\nexit";
    let chain = compile("cy", src, &opts).text();
    for id in [509, 511, 507, 5] {
        assert!(
            chain
                .lines()
                .any(|l| l.contains("setp.ne.u64 %p") && l.ends_with(&format!("%rd7, {id};"))),
            "arm for {id}: {chain}"
        );
    }
    assert!(
        chain.contains("%smid") && chain.contains("%laneid"),
        "{chain}"
    );
    // No map bound: no map helper arm.
    assert!(!chain.contains("%rd7, 1;"), "{chain}");
    common::assemble(&common::merge(&[stat, copy, chain]), "callx");

    // A chain may reach helper 507 (`exit`), which ends the thread: no chunk loop; a static
    // callx of another helper keeps it.
    let lp = JitOptions {
        entry: false,
        chunk_loop: true,
        ..JitOptions::default()
    };
    let p = Program::from_insns("cy", assemble(src).unwrap());
    assert_eq!(jit::compile(&p, &lp).unwrap().loop_func(), None);
    let p = Program::from_insns("cx", assemble("r6 = 509\ncallx r6\nexit").unwrap());
    assert_eq!(
        jit::compile(&p, &lp).unwrap().loop_func(),
        Some("bpf_loop_cx")
    );
    let p = Program::from_insns("cz", assemble("r6 = 507\ncallx r6\nr0 = 0\nexit").unwrap());
    assert_eq!(jit::compile(&p, &lp).unwrap().loop_func(), None);
}

/// The ctx point (`jit::lower::CTX_POINT`) of a body compiled with the ctx in registers:
/// marked before the first ctx read when every path to a ctx read passes through it once;
/// absent when a path bypasses it or a loop comes back to it.
#[test]
fn the_ctx_point_marks_where_the_words_may_be_computed() {
    let point = jit::lower::CTX_POINT.trim();
    let compile = |src: &str, loads: &[(usize, i64)]| {
        let p = Program::from_insns("p", assemble(src).unwrap());
        let opts = JitOptions {
            entry: false,
            ctx_regs: Some(loads.iter().copied().collect()),
            ..JitOptions::default()
        };
        jit::compile(&p, &opts).unwrap().text()
    };
    // A gate on something else, then the ctx: the point follows the gate's branch and
    // precedes the first read.
    let t = compile(
        "r6 = r1\nr2 = 7\nif r2 == 0 goto +3\nr3 = *(u64 *)(r6 + 0)\nr0 = r3\nexit\nr0 = 0\nexit",
        &[(3, 0)],
    );
    let (at, read) = (t.find(point), t.find("%bt_cw0"));
    assert!(at.is_some() && read.is_some(), "{t}");
    assert!(at < read && t[..at.unwrap()].contains("bra"), "{t}");
    assert_eq!(t.matches(point).count(), 1);
    // The first read is a jump target: the point comes after its label, so that the
    // jumping path computes the words too.
    let t = compile(
        "r6 = r1\nif r2 != 0 goto +1\nr2 = 1\nr3 = *(u64 *)(r6 + 0)\nr0 = r3\nexit",
        &[(3, 0)],
    );
    let at = t.find(point).expect("a point");
    assert!(t[..at].trim_end().ends_with(':'), "{t}");
    // A path around the first read to another one: no point.
    let t = compile(
        "r6 = r1\nif r2 == 0 goto +2\nr3 = *(u64 *)(r6 + 0)\nexit\nr3 = *(u64 *)(r6 + 8)\nr0 = r3\nexit",
        &[(2, 0), (4, 8)],
    );
    assert!(!t.contains(point), "{t}");
    // A loop back to the first read: no point.
    let t = compile(
        "r6 = r1\nr4 = 3\nr3 = *(u64 *)(r6 + 0)\nr4 += -1\nif r4 != 0 goto -3\nr0 = r3\nexit",
        &[(2, 0)],
    );
    assert!(!t.contains(point), "{t}");
    // A loop before the point, and exits that read nothing past it, are fine.
    let t = compile(
        "r6 = r1\nr4 = 3\nr4 += -1\nif r4 != 0 goto -2\nif r2 == 0 goto +2\nr0 = *(u64 *)(r6 + 0)\nexit\nr0 = 0\nexit",
        &[(5, 0)],
    );
    assert_eq!(t.matches(point).count(), 1, "{t}");
    // Without the ctx in registers there is nothing to mark.
    let p = Program::from_insns("p", assemble("r0 = *(u64 *)(r1 + 0)\nexit").unwrap());
    assert!(
        !jit::compile(&p, &JitOptions::default())
            .unwrap()
            .text()
            .contains(point)
    );
}

/// `split_cold`: the body's code from its ctx point on is a function of its own, called at
/// the point with the registers the hot part set and the cold part reads (r6 here, and r10,
/// the frame, always), the ctx words the cold part reads, and nothing else (not r1, which
/// only the point's own ctx load names, nor r7, which the cold part sets); the marker line
/// follows the call. The cold function reaches the frame through r10, a generic pointer
/// into its caller's frame (never its own `stack`), and returns to the body, which returns
/// what it returns. An exit both parts reach is in both.
#[test]
fn a_split_body_calls_its_cold_part_with_what_the_cold_part_reads() {
    let src = "r6 = 5\n*(u64 *)(r10 - 8) = r6\nif r2 == 0 goto +7\nr3 = *(u64 *)(r1 + 8)\nif r3 == 0 goto +5\nr7 = *(u64 *)(r10 - 8)\nr0 = r3\nr0 += r7\nr0 += r6\nexit\nr0 = 77\nexit";
    let p = Program::from_insns("p", assemble(src).unwrap());
    let opts = |split: bool| JitOptions {
        entry: false,
        ctx_regs: Some([(3usize, 8i64)].into_iter().collect()),
        split_cold: split,
        ..JitOptions::default()
    };
    let t = jit::compile(&p, &opts(true)).unwrap().text();
    let cold_at = t
        .find(".func (.param .b64 ret0) bpf_cold_p(\n\t.param .b64 args)\n{")
        .expect("a cold function");
    let hot_at = t
        .find(".visible .func (.param .b64 ret0) bpf_prog_p(\n\t.param .b64 ctx)\n{")
        .expect("the body");
    let end_of = |at: usize| at + t[at..].find("\n}").unwrap();
    let (hot, cold) = (&t[hot_at..end_of(hot_at)], &t[cold_at..end_of(cold_at)]);
    let (call_at, call_end) = (
        hot.find("{ // the cold part").expect("the call block"),
        hot.find("// @bt_cold_end").expect("the marker"),
    );
    let call = &hot[call_at..call_end];
    assert!(
        call.contains("call.uni (cold_ret), bpf_cold_p, (args);"),
        "{hot}"
    );
    assert!(
        call.contains("], %rd6;") && call.contains("], %bt_cw1;"),
        "{call}"
    );
    for not in ["%rd1;", "%rd3;", "%rd7;", "%bt_cw0"] {
        assert!(!call.contains(not), "{not} passed: {call}");
    }
    assert!(
        call.contains("cvta.local.u64 %cold_a, stack;"),
        "r10 from the frame: {call}"
    );
    // Outside the call, the hot part reads no ctx word; it holds the shared exit.
    let outside = format!("{}{}", &hot[..call_at], &hot[call_end..]);
    assert!(!outside.contains("%bt_cw"), "{hot}");
    assert!(
        outside.contains("mov.b64 %rd0, 77;") && cold.contains("mov.b64 %rd0, 77;"),
        "{t}"
    );
    // The cold part: the words and registers from the array, the frame through r10.
    assert!(cold.contains("ld.param.b64 %cold_args, [args];"), "{cold}");
    assert!(cold.contains("mov.b64 %rd3, %bt_cw1;"), "{cold}");
    assert!(
        cold.contains("[%rd10+-8]") && !cold.contains("[stack"),
        "{cold}"
    );
    // Unsplit: one function, the word read in place.
    let t = jit::compile(&p, &opts(false)).unwrap().text();
    assert!(
        !t.contains("bpf_cold_p") && t.contains("mov.b64 %rd3, %bt_cw1;"),
        "{t}"
    );
}

/// `JitOptions::stack_regs` (from the verifier's `stack_registers`) keeps the program's
/// spills in registers: no local-memory access is left for those slots, a helper's key
/// stays in memory, and the PTX assembles. (What it computes is checked on a GPU against the
/// interpreter: `gpu_diff` compiles its cases the same way.)
#[test]
fn frame_slots_in_registers_leave_no_local_access_for_them() {
    let src = "r1 = 5
*(u64 *)(r10 - 16) = r1
*(u32 *)(r10 - 24) = -7
r2 = *(u64 *)(r10 - 16)
r3 = *(u32 *)(r10 - 24)
r4 = *(s32 *)(r10 - 24)
r0 = r2
r0 += r3
r0 += r4
exit";
    let p = Program::from_insns("slots", assemble(src).unwrap());
    let v = ebpf::verifier::verify(&p, &ebpf::verifier::VerifyOptions::default()).unwrap();
    let regs = v.stack_registers();
    assert_eq!(regs.len(), 5, "{regs:?}");
    let local = |o: &JitOptions| {
        let t = jit::compile(&p, o).unwrap().text();
        common::assemble(&t, "stack_regs");
        t.lines()
            .filter(|l| l.contains("ld.local.") || l.contains("st.local."))
            .count()
    };
    assert!(local(&JitOptions::default()) >= 5);
    let with = JitOptions {
        stack_regs: Some(regs),
        ..JitOptions::default()
    };
    assert_eq!(local(&with), 0);

    // A map key stays in the frame: the helper reads it there.
    let src = "r1 = 0
*(u32 *)(r10 - 4) = r1
*(u64 *)(r10 - 16) = r1
r1 = map_idx[0] ll
r2 = r10
r2 += -4
call map_lookup_elem
r0 = *(u64 *)(r10 - 16)
exit";
    let mut p = Program::from_insns("key", assemble(src).unwrap());
    p.maps = vec![ebpf::program::MapDef {
        name: "a".into(),
        kind: ebpf::program::MapKind::Array,
        key_size: 4,
        value_size: 8,
        max_entries: 4,
        flags: 0,
        origin: ebpf::program::MapOrigin::Btf,
        init: None,
    }];
    let v = ebpf::verifier::verify(&p, &ebpf::verifier::VerifyOptions::default()).unwrap();
    let regs = v.stack_registers();
    assert_eq!(
        regs.into_iter().collect::<Vec<_>>(),
        vec![(2, -16), (8, -16)]
    );
    let o = JitOptions {
        maps: vec![jit::MapBinding::for_def(&p.maps[0], 0x7f00_0000_0000, 1)],
        stack_regs: Some(v.stack_registers()),
        ..JitOptions::default()
    };
    let t = jit::compile(&p, &o).unwrap().text();
    common::assemble(&t, "stack_regs_key");
    assert!(t.contains("st.local.u32"), "the key's store stays:\n{t}");
    assert!(
        !t.contains("st.local.u64") && !t.contains("ld.local.u64"),
        "{t}"
    );

    // A map naming an atomic is refused: its slot would be half register, half memory.
    let src = "r1 = 1
*(u64 *)(r10 - 8) = r1
lock *(u64 *)(r10 - 8) += r1
r0 = *(u64 *)(r10 - 8)
exit";
    let p = Program::from_insns("atomic", assemble(src).unwrap());
    let bad = JitOptions {
        stack_regs: Some([(1usize, -8i64), (2, -8), (3, -8)].into()),
        ..JitOptions::default()
    };
    let e = jit::compile(&p, &bad).unwrap_err().to_string();
    assert!(e.contains("not a plain load or store"), "{e}");
}
