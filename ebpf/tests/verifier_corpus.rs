//! Verifier corpus: every file under `tests/verifier/accept` must verify, every file under
//! `tests/verifier/reject` must fail with the message named by its `; error:` header (and at
//! the pc of `; at:` when given). Plus property tests: no false rejections of straight-line
//! scalar code, and no panics on arbitrary bytes.
//!
//! Headers (comment lines anywhere in the file):
//!
//! ```text
//! ; error: <substring>          ; at: <pc>            ; ctx: mem 64        ; max_insns: 500
//! ; map: array key=4 value=16 entries=4 name=counts
//! ; map: hash key=8 value=8 entries=64
//! ; map: ringbuf entries=4096
//! ; map: rodata value=16 init="hello\0"
//! ; map: data value=16          (writable global data)
//! ```

use ebpf::asm::assemble;
use ebpf::isa::Insn;
use ebpf::program::Program;
use ebpf::verifier::{CtxKind, VerifyOptions, verify};
use proptest::prelude::*;
use std::path::Path;

use bpftime_tests::corpus::{files, load, parse_map};

#[test]
fn accept_corpus() {
    let fs = files("accept");
    assert!(fs.len() >= 25, "only {} accept cases", fs.len());
    let mut bad = Vec::new();
    for f in &fs {
        let c = load(f);
        assert!(
            c.error.is_none(),
            "{}: accept case with an error header",
            f.display()
        );
        match verify(&c.prog, &c.opts) {
            Ok(v) => {
                assert!(v.insns_processed > 0);
                assert!(v.log.contains("processed"), "log summary missing");
            }
            Err(e) => bad.push(format!("{}: {e}\n{}", f.display(), e.log)),
        }
    }
    assert!(bad.is_empty(), "false rejections:\n{}", bad.join("\n"));
}

#[test]
fn reject_corpus() {
    let fs = files("reject");
    assert!(fs.len() >= 45, "only {} reject cases", fs.len());
    let mut bad = Vec::new();
    for f in &fs {
        let c = load(f);
        let want = c
            .error
            .unwrap_or_else(|| panic!("{}: reject case without `; error:`", f.display()));
        match verify(&c.prog, &c.opts) {
            Ok(_) => bad.push(format!("{}: accepted, expected `{want}`", f.display())),
            Err(e) => {
                if !e.msg.contains(&want) {
                    bad.push(format!("{}: got `{e}`, expected `{want}`", f.display()));
                } else if let Some(pc) = c.at
                    && e.loc.pc != pc
                {
                    bad.push(format!(
                        "{}: error at pc {}, expected {pc}: {e}",
                        f.display(),
                        e.loc.pc
                    ));
                }
                // The error names location and instruction.
                let shown = e.to_string();
                assert!(shown.contains(&format!("insn {}", e.loc.pc)), "{shown}");
            }
        }
    }
    assert!(bad.is_empty(), "wrong verdicts:\n{}", bad.join("\n"));
}

#[test]
fn stack_depths_and_log() {
    let c =
        load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/verifier/accept/call_stack_ptr.s"));
    let v = verify(&c.prog, &c.opts).unwrap();
    // main uses fp-16..fp-1 (16 bytes); the callee writes 8 bytes of its own frame.
    assert_eq!(v.stack_depths[0], (0, 16));
    assert_eq!(v.stack_depths.len(), 2);
    assert_eq!(v.stack_depths[1].1, 8);
    assert_eq!(v.max_stack_depth, 24);
    assert!(v.log.contains("0: r1 = 0"), "{}", v.log);
    assert!(v.log.contains("R10=fp0"), "{}", v.log);
}

#[test]
fn error_log_is_bounded_and_ends_at_the_error() {
    let c =
        load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/verifier/reject/too_complex.s"));
    let e = verify(&c.prog, &c.opts).unwrap_err();
    let lines: Vec<&str> = e.log.lines().collect();
    assert_eq!(lines.len(), 200, "{}", e.log);
    let last = lines.last().unwrap();
    assert!(last.starts_with(&format!("{}: ", e.loc.pc)), "{last}");
    assert!(last.contains(" ; R1="), "{last}");
    // Without logging, no trail is kept.
    let quiet = VerifyOptions {
        log: false,
        ..c.opts.clone()
    };
    assert!(verify(&c.prog, &quiet).unwrap_err().log.is_empty());
}

#[test]
fn error_display_format() {
    let prog = Program::from_insns("t.o", assemble("r0 = r5\nexit\n").unwrap());
    let e = verify(&prog, &VerifyOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.o:raw: insn 0: r0 = r5: R5 !read_ok (register read before it was written)"
    );
    assert_eq!(e.kind, ebpf::verifier::ErrorKind::Uninit);
}

/// Malformed slots the assembler cannot produce: (slots, pc, expected message).
#[test]
fn structural_raw_cases() {
    let exit = Insn::new(0x95, 0, 0, 0, 0);
    let mov0 = Insn::new(0xb7, 0, 0, 0, 0);
    let cases: Vec<(Vec<Insn>, usize, &str)> = vec![
        (
            vec![mov0, Insn::new(0x00, 0, 0, 0, 0), exit],
            1,
            "unknown opcode 0x00",
        ),
        (
            vec![Insn::new(0xff, 0, 0, 0, 0), exit],
            0,
            "unknown opcode 0xff",
        ),
        (
            vec![Insn::new(0x3f, 0, 1, 2, 0), exit],
            0,
            "does not allow off = 2",
        ),
        (
            vec![Insn::new(0x07, 0, 3, 0, 1), exit],
            0,
            "reserved field src must be 0, found 3",
        ),
        (
            vec![mov0, Insn::new(0x07, 0, 0, 5, 1), exit],
            1,
            "reserved field off must be 0, found 5",
        ),
        (
            vec![mov0, Insn::new(0x0f, 0, 1, 0, 9), exit],
            1,
            "reserved field imm must be 0, found 9",
        ),
        (
            vec![mov0, Insn::new(0x95, 0, 0, 0, 1)],
            1,
            "reserved field imm must be 0, found 1",
        ),
        (
            vec![Insn::new(0xb7, 11, 0, 0, 0), exit],
            0,
            "invalid register r11",
        ),
        (
            vec![Insn::new(0xbf, 0, 13, 0, 0), exit],
            0,
            "invalid register r13",
        ),
        (
            vec![
                Insn::new(0x18, 0, 0, 0, 1),
                Insn::new(0x07, 0, 0, 0, 0),
                exit,
            ],
            0,
            "second slot",
        ),
        (
            vec![mov0, Insn::new(0x18, 0, 0, 0, 1)],
            1,
            "missing its second slot",
        ),
        (
            vec![Insn::new(0x18, 0, 7, 0, 1), Insn::new(0, 0, 0, 0, 0), exit],
            0,
            "does not allow src = 7",
        ),
        (
            vec![Insn::new(0x61, 0, 1, 0, 3), exit],
            0,
            "reserved field imm must be 0",
        ),
        (vec![], 0, "empty program"),
        // callx: the register is dst; src, off and imm are reserved.
        (
            vec![mov0, Insn::new(0x8d, 0, 2, 0, 0), exit],
            1,
            "reserved field src must be 0, found 2",
        ),
        (
            vec![mov0, Insn::new(0x8d, 0, 0, 0, 5), exit],
            1,
            "reserved field imm must be 0, found 5",
        ),
        (
            vec![mov0, Insn::new(0x8d, 0, 0, 3, 0), exit],
            1,
            "reserved field off must be 0, found 3",
        ),
        // A constant divisor of 0 (the sdiv/smod forms have off = 1), even on a dead path.
        (
            vec![mov0, Insn::new(0x37, 0, 0, 0, 0), exit],
            1,
            "div by zero: division by the immediate 0",
        ),
        (
            vec![mov0, Insn::new(0x94, 0, 0, 1, 0), exit],
            1,
            "div by zero: modulo by the immediate 0",
        ),
        (
            vec![
                mov0,
                Insn::new(0x05, 0, 0, 1, 0),
                Insn::new(0x97, 0, 0, 0, 0),
                exit,
            ],
            2,
            "div by zero: modulo by the immediate 0",
        ),
    ];
    for (insns, pc, want) in cases {
        let prog = Program::from_insns("raw", insns.clone());
        let e = verify(&prog, &VerifyOptions::default())
            .err()
            .unwrap_or_else(|| panic!("{insns:?} accepted, expected `{want}`"));
        assert!(
            e.msg.contains(want),
            "{insns:?}: got `{e}`, expected `{want}`"
        );
        assert_eq!(e.loc.pc, pc, "{e}");
        assert_eq!(e.kind, ebpf::verifier::ErrorKind::Structure, "{e}");
    }
}

#[test]
fn straight_line_4096_is_fast() {
    let mut text = String::from("r0 = 0\nr2 = 1\n");
    for i in 0..4090 {
        match i % 5 {
            0 => text.push_str("r0 += r2\n"),
            1 => text.push_str("*(u64 *)(r10 - 8) = r0\n"),
            2 => text.push_str("r3 = *(u64 *)(r10 - 8)\n"),
            3 => text.push_str("r2 ^= 7\n"),
            _ => text.push_str("r0 &= 0xffff\n"),
        }
    }
    text.push_str("exit\n");
    let prog = Program::from_insns("big", assemble(&text).unwrap());
    let t = std::time::Instant::now();
    let v = verify(&prog, &VerifyOptions::default()).unwrap();
    let dt = t.elapsed();
    eprintln!(
        "{} straight-line insns verified in {dt:?}",
        prog.insns.len()
    );
    assert_eq!(v.insns_processed, prog.insns.len());
    // 100 ms is the target in release builds; debug builds get headroom.
    let limit = if cfg!(debug_assertions) { 1000 } else { 100 };
    assert!(dt.as_millis() < limit, "took {dt:?}");
}

#[test]
fn budget_counts_processed_insns() {
    // A 100-iteration loop processes well over 100 insns; with a budget of 50 it fails.
    let text = "r1 = 0\nl:\nr1 += 1\nif r1 < 100 goto l\nr0 = 0\nexit\n";
    let prog = Program::from_insns("loop", assemble(text).unwrap());
    let v = verify(&prog, &VerifyOptions::default()).unwrap();
    assert!(v.insns_processed >= 200, "{}", v.insns_processed);
    let e = verify(
        &prog,
        &VerifyOptions {
            max_insns: 50,
            ..VerifyOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        e.msg
            .contains("program too complex: processed 51 instructions"),
        "{e}"
    );
}

/// Soundness against an independent reference: random memory-touching programs that this
/// verifier accepts must run in rbpf's interpreter (which bounds-checks every access at run
/// time against the 64-byte block and the 512-byte stack) without a memory error.
#[test]
fn accepted_programs_run_safely_in_rbpf() {
    use rand::{Rng, SeedableRng, rngs::StdRng};
    const LEN: usize = 64;
    let moff = |o: i32| {
        if o < 0 {
            format!("- {}", -o)
        } else {
            format!("+ {o}")
        }
    };
    let mut rng = StdRng::seed_from_u64(
        std::env::var("SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5eed_ba5e),
    );
    // Control: the oracle does catch an out-of-bounds access that the verifier rejects.
    {
        let insns = assemble("r0 = *(u64 *)(r1 + 60)\nexit\n").unwrap();
        let opts = VerifyOptions {
            ctx: CtxKind::Mem { len: LEN },
            ..VerifyOptions::default()
        };
        assert!(verify(&Program::from_insns("oob", insns.clone()), &opts).is_err());
        let bytes = ebpf::isa::insns_to_bytes(&insns);
        let mut vm = rbpf::EbpfVmRaw::new(None).unwrap();
        vm.set_verifier(|_| Ok(())).unwrap();
        vm.set_program(&bytes).unwrap();
        let mut mem = vec![0u8; LEN];
        assert!(vm.execute_program(&mut mem).is_err());
    }
    let (mut accepted, mut total, mut with_calls) = (0usize, 0usize, 0usize);
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    for _ in 0..rounds {
        let steps = rng.gen_range(4..24);
        let mut body: Vec<String> = Vec::new();
        let mut labels: Vec<(usize, String)> = Vec::new();
        let scal = |rng: &mut StdRng| [3, 4, 5, 7, 8, 9][rng.gen_range(0..6)];
        for i in 0..steps {
            let x = scal(&mut rng);
            let y = scal(&mut rng);
            let w = if rng.gen_bool(0.3) { 'w' } else { 'r' };
            let line = match rng.gen_range(0..18) {
                // A bpf-to-bpf call whose callee uses r2 as an offset into the block.
                // (`sub2` only passes the value back: the result carries its precision.)
                17 => format!(
                    "*(u64 *)(r10 - 64) = r1\n*(u64 *)(r10 - 72) = r0\nr2 = r{x}\nr3 = r10\nr3 += -8\ncall {}\nr1 = *(u64 *)(r10 - 64)\nr3 = r0\nr0 = *(u64 *)(r10 - 72)\nr4 = 1\nr5 = 2",
                    if rng.gen_bool(0.5) { "sub" } else { "sub2" }
                ),
                // A diamond leaving one of two constants in a register; the join is a
                // prune point where only precision tracking tells them apart.
                14 | 15 => format!(
                    "if {w}{y} > {} goto da{i}\nr{x} = {}\ngoto db{i}\nda{i}:\nr{x} = {}\ndb{i}:",
                    rng.gen_range(0..8),
                    rng.gen_range(0..70),
                    rng.gen_range(0..70)
                ),
                16 => format!(
                    "r6 = r1\nr6 += r{x}\nr{y} = *({} *)(r6 + 0)",
                    ["u8", "u16", "u32", "u64"][rng.gen_range(0..4)]
                ),
                0 => format!("r{x} = {}", rng.gen_range(-8i32..80)),
                1 => format!("r{x} = *(u8 *)(r1 + {})", rng.gen_range(0..LEN as i32 + 4)),
                2 => {
                    let ops = ["+=", "-=", "*=", "/=", "%=", "|=", "^="];
                    format!("{w}{x} {} {w}{y}", ops[rng.gen_range(0..ops.len())])
                }
                3 => format!("{w}{x} &= {}", [7, 15, 31, 63, 0xff][rng.gen_range(0..5)]),
                4 => format!("{w}{x} >>= {}", rng.gen_range(0..8)),
                5 => format!("{w}{x} <<= {}", rng.gen_range(0..4)),
                6 => format!("{w}{x} += {}", rng.gen_range(-16i32..16)),
                7 => "r6 = r1".to_string(),
                8 => format!("r6 += r{x}"),
                9 => format!("r6 += {}", rng.gen_range(-8i32..70)),
                10 => {
                    let sz = ["u8", "u16", "u32", "u64"][rng.gen_range(0..4)];
                    format!("r{x} = *({sz} *)(r6 {})", moff(rng.gen_range(-4i32..12)))
                }
                11 => {
                    let sz = ["u8", "u16", "u32", "u64"][rng.gen_range(0..4)];
                    format!("*({sz} *)(r6 {}) = r{x}", moff(rng.gen_range(-4i32..12)))
                }
                12 => {
                    let slot = rng.gen_range(1..8) * 8;
                    if rng.gen_bool(0.5) {
                        format!("*(u64 *)(r10 - {slot}) = r{x}")
                    } else {
                        format!("r{x} = *(u64 *)(r10 - {slot})")
                    }
                }
                _ => {
                    let conds = [">", ">=", "<", "<=", "s>", "s<", "==", "!="];
                    let c = conds[rng.gen_range(0..conds.len())];
                    let target = rng.gen_range(i + 1..=steps);
                    let name = format!("l{i}");
                    labels.push((target, name.clone()));
                    if rng.gen_bool(0.5) {
                        format!("if {w}{x} {c} {} goto {name}", rng.gen_range(0..70))
                    } else {
                        format!("if {w}{x} {c} {w}{y} goto {name}")
                    }
                }
            };
            body.push(line);
        }
        // Sometimes a counted loop (counter r0) around a stretch of the body.
        let lp = rng.gen_bool(0.4).then(|| {
            let a = rng.gen_range(0..steps);
            (a, rng.gen_range(a..steps), rng.gen_range(1..6))
        });
        let mut text =
            String::from("r0 = 0\nr2 = 64\nr3 = 0\nr4 = 1\nr5 = 2\nr7 = 3\nr8 = 4\nr9 = 5\n");
        for (i, line) in body.iter().enumerate() {
            for (t, name) in &labels {
                if *t == i {
                    text.push_str(&format!("{name}:\n"));
                }
            }
            if let Some((a, _, _)) = lp
                && a == i
            {
                text.push_str("top:\n");
            }
            text.push_str(line);
            text.push('\n');
            if let Some((_, b, n)) = lp
                && b == i
            {
                text.push_str(&format!("r0 += 1\nif r0 < {n} goto top\n"));
            }
        }
        for (t, name) in &labels {
            if *t == steps {
                text.push_str(&format!("{name}:\n"));
            }
        }
        text.push_str("r0 = r3\nexit\n");
        text.push_str(
            "sub:\nr1 += r2\nr0 = *(u8 *)(r1 + 0)\n*(u64 *)(r3 + 0) = r0\nr0 += r2\nexit\n",
        );
        text.push_str("sub2:\nr0 = r2\nr0 += 1\nexit\n");
        let insns = assemble(&text).unwrap_or_else(|e| panic!("{text}\n{e}"));
        let prog = Program::from_insns("rand", insns.clone());
        total += 1;
        let opts = VerifyOptions {
            ctx: CtxKind::Mem { len: LEN },
            ..VerifyOptions::default()
        };
        if verify(&prog, &opts).is_err() {
            continue;
        }
        accepted += 1;
        if text.contains("call sub") {
            with_calls += 1;
        }
        let bytes = ebpf::isa::insns_to_bytes(&insns);
        let mut vm = rbpf::EbpfVmRaw::new(None).unwrap();
        vm.set_verifier(|_| Ok(())).unwrap();
        vm.set_program(&bytes).unwrap();
        let mut mem = vec![0xa5u8; LEN];
        let r = vm.execute_program(&mut mem);
        assert!(
            r.is_ok(),
            "accepted but unsafe in rbpf: {:?}\n{text}",
            r.err()
        );
    }
    // The generator must exercise the accepting side too.
    assert!(accepted * 10 > total, "only {accepted} of {total} accepted");
    assert!(
        with_calls * 50 > accepted,
        "only {with_calls} accepted programs call"
    );
    eprintln!(
        "{accepted} of {total} random programs ({with_calls} with calls) accepted and ran safely"
    );
}

/// The same differential check for the job ctx: data/out pointers, XDP-style checks with
/// random conditions and operand orders, variable offsets. The input lives in its own
/// exactly-sized buffer and the output right after the 80-byte ctx in rbpf's metadata
/// buffer, so any access past `data_end`/`out_end` leaves the regions rbpf allows.
#[test]
fn accepted_job_programs_run_safely_in_rbpf() {
    use rand::{Rng, SeedableRng, rngs::StdRng};
    let moff = |o: i32| {
        if o < 0 {
            format!("- {}", -o)
        } else {
            format!("+ {o}")
        }
    };
    let mut rng = StdRng::seed_from_u64(
        std::env::var("SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x0bad_cafe),
    );
    let (mut accepted, mut total) = (0usize, 0usize);
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    for _ in 0..rounds {
        let mut text = String::from(
            "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr4 = *(u64 *)(r1 + 16)\nr5 = *(u64 *)(r1 + 24)\nr6 = 0\nr7 = 1\nr8 = r2\n",
        );
        let blocks = rng.gen_range(1..5);
        for b in 0..blocks {
            let out = rng.gen_bool(0.5);
            let (base, end) = if out { (4, 5) } else { (2, 3) };
            // Occasionally mix up the end pointer or keep the previous base.
            let end = if rng.gen_bool(0.1) { 8 - end } else { end };
            if rng.gen_bool(0.9) {
                text.push_str(&format!("r8 = r{base}\n"));
            }
            if rng.gen_bool(0.25) {
                // Two constant offsets meeting at a prune point.
                let (a, c) = (rng.gen_range(0..24), rng.gen_range(0..24));
                text.push_str(&format!(
                    "r6 = *(u64 *)(r1 + 32)\nif r6 > 3 goto ja{b}\nr6 = {a}\ngoto jb{b}\nja{b}:\nr6 = {c}\njb{b}:\nr8 += r6\n"
                ));
            } else if rng.gen_bool(0.5) {
                let arg = [32, 40, 48, 56, 64, 72][rng.gen_range(0..6)];
                let mask = [3, 7, 15, 31, 0xff, -1][rng.gen_range(0..6)];
                text.push_str(&format!(
                    "r6 = *(u64 *)(r1 + {arg})\nr6 &= {mask}\nr8 += r6\n"
                ));
            }
            if rng.gen_bool(0.3) {
                text.push_str(&format!("r8 += {}\n", rng.gen_range(-2i32..8)));
            }
            let k = rng.gen_range(0..24);
            let skip = if rng.gen_bool(0.8) {
                format!("s{b}")
            } else {
                format!("s{}", rng.gen_range(b..blocks))
            };
            let (c, swap) = if rng.gen_bool(0.7) {
                if rng.gen_bool(0.5) {
                    (">", false)
                } else {
                    ("<", true)
                }
            } else {
                (
                    ["> ", ">=", "<", "<=", "==", "!="][rng.gen_range(0..6)].trim(),
                    rng.gen_bool(0.5),
                )
            };
            text.push_str(&format!("r9 = r8\nr9 += {k}\n"));
            if swap {
                text.push_str(&format!("if r{end} {c} r9 goto {skip}\n"));
            } else {
                text.push_str(&format!("if r9 {c} r{end} goto {skip}\n"));
            }
            for _ in 0..rng.gen_range(1..4) {
                let sz = ["u8", "u16", "u32", "u64"][rng.gen_range(0..4)];
                let off = moff(rng.gen_range(-1i32..k.max(1) + 2));
                if out && rng.gen_bool(0.7) {
                    text.push_str(&format!("*({sz} *)(r8 {off}) = r7\n"));
                } else {
                    text.push_str(&format!("r7 = *({sz} *)(r8 {off})\n"));
                }
            }
            text.push_str(&format!("s{b}:\n"));
        }
        text.push_str("r0 = 0\nexit\n");
        let insns = assemble(&text).unwrap_or_else(|e| panic!("{text}\n{e}"));
        total += 1;
        if let Err(e) = verify(
            &Program::from_insns("job", insns.clone()),
            &VerifyOptions::default(),
        ) {
            if std::env::var("HIST").is_ok() {
                let m: String = e.msg.chars().take(45).collect();
                eprintln!("REJ {m}");
            }
            continue;
        }
        accepted += 1;
        let bytes = ebpf::isa::insns_to_bytes(&insns);
        for _ in 0..4 {
            let dlen = rng.gen_range(0..40);
            let olen = rng.gen_range(0..40);
            let data = vec![0x5au8; dlen];
            let mut mbuff = vec![0u8; 80 + olen];
            let d = data.as_ptr() as u64;
            let o = mbuff.as_ptr() as u64 + 80;
            let args: [u64; 6] = [
                rng.gen_range(0..64),
                rng.r#gen(),
                rng.gen_range(0..8),
                rng.r#gen(),
                rng.gen_range(0..300),
                u64::MAX - rng.gen_range(0..4),
            ];
            let fields = [d, d + dlen as u64, o, o + olen as u64];
            for (i, v) in fields.iter().chain(args.iter()).enumerate() {
                mbuff[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
            }
            let mut vm = rbpf::EbpfVmMbuff::new(None).unwrap();
            vm.set_verifier(|_| Ok(())).unwrap();
            vm.set_program(&bytes).unwrap();
            let r = vm.execute_program(&data, &mbuff);
            assert!(
                r.is_ok(),
                "accepted but unsafe in rbpf (dlen {dlen}, olen {olen}): {:?}\n{text}",
                r.err()
            );
        }
    }
    assert!(accepted * 20 > total, "only {accepted} of {total} accepted");
    eprintln!("{accepted} of {total} random job programs accepted and ran safely");
}

fn alu_line(op: u8, dst: u8, src: u8, imm: i32, wide: bool) -> String {
    let ops = [
        "+=", "-=", "*=", "/=", "%=", "|=", "&=", "^=", "<<=", ">>=", "s>>=", "s/=", "s%=", "=",
    ];
    let o = ops[op as usize % ops.len()];
    let r = if wide { 'r' } else { 'w' };
    if imm % 2 == 0 {
        format!("{r}{dst} {o} {r}{src}")
    } else {
        format!("{r}{dst} {o} {imm}")
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn straight_line_scalar_code_verifies(
        inits in proptest::collection::vec(any::<i32>(), 10),
        body in proptest::collection::vec((0u8..14, 0u8..10, 0u8..10, any::<i32>(), any::<bool>()), 1..60),
    ) {
        let mut text = String::new();
        for (r, v) in inits.iter().enumerate() {
            text.push_str(&format!("r{r} = {v}\n"));
        }
        for (op, d, s, imm, wide) in body {
            // Shift counts stay in range only through masking; any count is valid eBPF.
            text.push_str(&alu_line(op, d, s, imm, wide));
            text.push('\n');
        }
        text.push_str("exit\n");
        let insns = assemble(&text).unwrap();
        let prog = Program::from_insns("p", insns);
        let r = verify(&prog, &VerifyOptions::default());
        prop_assert!(r.is_ok(), "{}\n{:?}", text, r.err().map(|e| e.to_string()));
    }

    #[test]
    fn never_panics_on_random_slots(words in proptest::collection::vec(any::<u64>(), 1..40), nmaps in 0usize..3) {
        let insns: Vec<Insn> = words.iter().map(|w| Insn::from_bytes(w.to_le_bytes())).collect();
        let mut prog = Program::from_insns("rand", insns);
        for i in 0..nmaps {
            prog.maps.push(parse_map(if i == 0 { "array key=4 value=16 entries=4" } else { "ringbuf entries=4096" }, i));
        }
        let _ = verify(&prog, &VerifyOptions { max_insns: 10_000, ..VerifyOptions::default() });
    }

    #[test]
    fn never_panics_on_mostly_valid_programs(
        ops in proptest::collection::vec((0usize..40, 0u8..11, 0u8..11, -20i16..20, -40i32..40), 1..30)
    ) {
        // Instructions built from real opcodes with small fields: reaches deep into the checks.
        let all = ebpf::isa::Opcode::ALL;
        let mut insns = Vec::new();
        for (i, (k, d, s, off, imm)) in ops.iter().enumerate() {
            let op = all[(k * 7 + i * 13) % all.len()];
            insns.push(op.insn(*d, *s, *off, *imm));
            if op.is_wide() {
                insns.push(Insn::new(0, 0, 0, 0, *imm));
            }
        }
        insns.push(Insn::new(0x95, 0, 0, 0, 0));
        let mut prog = Program::from_insns("rand", insns);
        prog.maps.push(parse_map("array key=4 value=16 entries=4", 0));
        prog.maps.push(parse_map("ringbuf entries=4096", 1));
        let _ = verify(&prog, &VerifyOptions { max_insns: 10_000, ..VerifyOptions::default() });
    }
}
