//! Small checks with hand-computed expectations: the stack scan, the helper table, errors.

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
fn unaligned_option_splits_accesses_into_bytes() {
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
    assert!(
        !t.contains("ld.u32") && !t.contains("st.u16") && !t.contains("ld.s16"),
        "{t}"
    );
    assert_eq!(t.matches("ld.u8").count(), 4 + 2, "{t}");
    assert_eq!(t.matches("st.u8").count(), 2, "{t}");
    // Stack accesses stay whole: r10-relative offsets are aligned by the verifier.
    assert!(t.contains("ld.u64 %rd0, [%rd10+-8];"), "{t}");
}
