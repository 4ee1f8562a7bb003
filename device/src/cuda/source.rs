//! The persistent runtime's CUDA source and its per-generation parts.
//!
//! | piece                         | made by                          | when                     |
//! |-------------------------------|----------------------------------|--------------------------|
//! | layout macros                 | [`layout_header`] from `shm_maps::layout::{FIELDS, SIZES}` | once |
//! | eBPF interpreter (instant tier) | `kernel/bpf_interp.cuh`        | once                     |
//! | runtime (`kernel/runtime.cu`) | NVRTC, `-rdc=true`               | once per service         |
//! | `bpft_native` dispatch        | [`dispatch_ptx`] (PTX text)      | each generation          |
//! | native programs               | `jit::compile`                   | each generation          |
//!
//! A generation's cubin is the driver linker's output for the runtime PTX, the dispatch PTX
//! and every native program's PTX. The runtime's C structs are checked against the layout
//! macros with `static_assert`, so a layout change that the kernel does not follow fails
//! the NVRTC compile instead of corrupting memory.

use super::DeviceError;
use std::fmt::Write;

/// The runtime kernel source, without the generated prefix.
pub const RUNTIME_CU: &str = include_str!("kernel/runtime.cu");
/// The device interpreter.
pub const INTERP_CUH: &str = include_str!("kernel/bpf_interp.cuh");

/// The C view of `shm_maps::JobDesc`: `(C type, field, array length)` in order. A test
/// lays it out with C's rules and compares every offset with `shm_maps::layout::FIELDS`.
pub const JOB_DESC_C: &[(&str, &str, usize)] = &[
    ("u32", "prog_id", 1),
    ("u32", "flags", 1),
    ("u64", "n", 1),
    ("u64", "input_off", 1),
    ("u64", "input_len", 1),
    ("u64", "output_off", 1),
    ("u64", "output_len", 1),
    ("u32", "in_rec_size", 1),
    ("u32", "out_rec_size", 1),
    ("u64", "offsets_off", 1),
    ("u64", "results_off", 1),
    ("u64", "args", 4),
    ("u32", "client", 1),
    ("u32", "completion", 1),
    ("u64", "tag", 1),
];

/// `#define BPFT_OFF_<Struct>_<field> <offset>` and `BPFT_SIZE_<Struct>` for every row of
/// the shared-memory layout tables, `struct bpft_job_desc` from [`JOB_DESC_C`], the
/// kernel's parameters, state and tier table from `worker` (`bpft_params`, `bpft_state`,
/// `bpft_tier`), and the
/// mailbox block's structures from `wire` (`bpft_ctl`, `bpft_done`, `bpft_fwd`).
pub fn layout_header() -> String {
    let mut s = String::from("// generated from shm_maps::layout::{FIELDS, SIZES}: do not edit\n");
    for (st, f, off) in shm_maps::layout::FIELDS {
        let _ = writeln!(s, "#define BPFT_OFF_{st}_{f} {off}");
    }
    for (st, size) in shm_maps::layout::SIZES {
        let _ = writeln!(s, "#define BPFT_SIZE_{st} {size}");
    }
    s.push_str("struct bpft_job_desc {\n");
    for (ty, f, n) in JOB_DESC_C {
        let ty = match *ty {
            "u32" => "unsigned int",
            _ => "unsigned long long",
        };
        if *n > 1 {
            let _ = writeln!(s, "    {ty} {f}[{n}];");
        } else {
            let _ = writeln!(s, "    {ty} {f};");
        }
    }
    s.push_str("};\n");
    use super::wire::{Ctl, DoneEntry, FwdEntry};
    use super::worker::{Params, State, TierEntry};
    c_struct::<Params>(&mut s);
    c_struct::<State>(&mut s);
    c_struct::<TierEntry>(&mut s);
    c_struct::<Ctl>(&mut s);
    c_struct::<DoneEntry>(&mut s);
    c_struct::<FwdEntry>(&mut s);
    let _ = writeln!(
        s,
        "#define BPFT_INLINE_WORDS {}",
        shm_maps::layout::INLINE_WORDS
    );
    let _ = writeln!(
        s,
        "#define BPFT_TIER_SHIFT {}\n#define BPFT_OUT_TIER_SHIFT {}\n#define BPFT_TIER_SLOTS {}",
        shm_maps::job_flags::TIER_SHIFT,
        shm_maps::job_flags::OUT_TIER_SHIFT,
        shm_maps::job_flags::TIER_SLOTS
    );
    let _ = writeln!(
        s,
        "#define BPFT_JF_INLINE {}u\n#define BPFT_JF_DEVICE_MASK {}u",
        shm_maps::job_flags::INLINE,
        shm_maps::job_flags::DEVICE_MASK
    );
    s.push_str(&check_c());
    s
}

/// `struct <name> { … };` from the fields of `T` (`wire::c_mirror!`), and an assertion of
/// the size the Rust structure has.
fn c_struct<T: super::wire::CMirror>(s: &mut String) {
    let name = T::C_NAME;
    let _ = writeln!(s, "struct {name} {{");
    for f in T::C_FIELDS {
        if f.n > 1 {
            let _ = writeln!(s, "    {} {}[{}];", f.ty.name, f.name, f.n);
        } else {
            let _ = writeln!(s, "    {} {};", f.ty.name, f.name);
        }
    }
    let _ = writeln!(
        s,
        "}};\nstatic_assert(sizeof(struct {name}) == {}, \"{name}: generated from Rust\");",
        std::mem::size_of::<T>()
    );
}

/// `bpft_inline_words(w)` and `bpft_slot_check(seq, w, iw)`: `shm_maps::layout`'s
/// `inline_words` and `slot_check` in C, generated from their constants (`w`: the 15
/// descriptor words, `iw`: the slot's inline words). `bpft_slot_chunk_check(seq, a, b, c,
/// m)`: what 16-byte chunk `c` of a slot (slot words `2c` and `2c + 1`, past seq and check
/// from chunk 1 on) adds to the slot check, given the job's `m` inline words; the XOR over
/// the 16 chunks is the slot check, so a warp that read a slot in chunks checks it with a
/// shuffle reduction. `bpft_slot_word_check(seq, v, k, m)`: what slot word `k` (value `v`)
/// adds (0 for seq and check, and for inline words past `m`): the two of a chunk, or one a
/// lane. Each computes its mix whatever the word, then selects: no branch.
/// `bpft_completion_check(w)`: `completion_check`. Plain C, so a test compiles it with the
/// host compiler and compares it with the Rust functions; the runtime defines `BPFT_FN` as
/// a device function.
pub fn check_c() -> String {
    use shm_maps::layout::{
        CHECK_MIX_MUL, CHECK_SEQ_MUL, CHECK_WORD_MUL, COMPLETION_CHECK_WORDS, INLINE_MAX,
        INLINE_WORDS, job_flags,
    };
    format!(
        "#ifndef BPFT_FN\n#define BPFT_FN static inline\n#endif\n\
         BPFT_FN unsigned long long bpft_check_mix(unsigned long long z) {{\n\
         \x20   z = (z ^ (z >> 30)) * {m0:#x}ull;\n\
         \x20   z = (z ^ (z >> 27)) * {m1:#x}ull;\n\
         \x20   return z ^ (z >> 31);\n}}\n\
         BPFT_FN int bpft_inline_words(const unsigned long long *w) {{\n\
         \x20   unsigned long long flags = w[0] >> 32, n = w[1], rec = w[6] & 0xffffffffull;\n\
         \x20   if (!(flags & {inline_flag}ull) || n > {max}ull || n * rec > {max}ull) return 0;\n\
         \x20   return (int)((n * rec + 7) / 8);\n}}\n\
         BPFT_FN unsigned long long bpft_slot_check(unsigned long long seq, const unsigned long long *w,\n\
         \x20                                          const unsigned long long *iw) {{\n\
         \x20   unsigned long long s = seq * {seq:#x}ull, h = 0;\n\
         \x20   for (int i = 0; i < 15; i++)\n\
         \x20       h ^= bpft_check_mix(w[i] + s + (unsigned long long)(i + 1) * {word:#x}ull);\n\
         \x20   int m = bpft_inline_words(w);\n\
         \x20   for (int i = 0; i < {iwords}; i++)\n\
         \x20       if (i < m) h ^= bpft_check_mix(iw[i] + s + (unsigned long long)(i + 16) * {word:#x}ull);\n\
         \x20   return h;\n}}\n\
         BPFT_FN unsigned long long bpft_slot_word_check(unsigned long long seq, unsigned long long v, int k,\n\
         \x20                                               int m) {{\n\
         \x20   unsigned long long h = bpft_check_mix(v + seq * {seq:#x}ull + (unsigned long long)(k - 1) * {word:#x}ull);\n\
         \x20   return k >= 2 && (k < 17 || k - 17 < m) ? h : 0;\n}}\n\
         BPFT_FN unsigned long long bpft_slot_chunk_check(unsigned long long seq, unsigned long long a,\n\
         \x20                                                unsigned long long b, int chunk, int m) {{\n\
         \x20   return bpft_slot_word_check(seq, a, 2 * chunk, m) ^ bpft_slot_word_check(seq, b, 2 * chunk + 1, m);\n}}\n\
         #define BPFT_COMPLETION_CHECK_WORDS {cwords}\n\
         BPFT_FN unsigned long long bpft_completion_check(const unsigned long long *w) {{\n\
         \x20   unsigned long long h = 0;\n\
         \x20   for (int i = 0; i < {cwords}; i++)\n\
         \x20       h ^= bpft_check_mix(w[i] + (unsigned long long)(i + 1) * {word:#x}ull);\n\
         \x20   return h ? h : 1;\n}}\n",
        cwords = COMPLETION_CHECK_WORDS,
        m0 = CHECK_MIX_MUL[0],
        m1 = CHECK_MIX_MUL[1],
        seq = CHECK_SEQ_MUL,
        word = CHECK_WORD_MUL,
        inline_flag = job_flags::INLINE,
        max = INLINE_MAX,
        iwords = INLINE_WORDS,
    )
}

/// Dispatcher warps of the runtime, at most (`BPFT_MAX_DISPATCHERS`): the worker sizes their
/// scratch lines by it.
pub const MAX_DISPATCHERS: usize = 16;
/// `sizeof(struct bpft_state)` (`BPFT_STATE_BYTES`, asserted by the runtime).
pub const STATE_BYTES: usize = 256;
/// A worker warp's staging area for a chunk of input from pinned host memory
/// (`BPFT_STAGE_BYTES`, `BPFT_HOST_STAGE`).
pub const STAGE_BYTES: usize = 4096;

/// The whole translation unit NVRTC compiles: layout macros, interpreter, runtime.
pub fn runtime_source() -> String {
    // The interpreter stays a function of its own: its register needs must not set the
    // kernel's, nor spill around the native path's calls.
    format!(
        "#define BPFT_FN static __device__ __forceinline__\n#define BPFT_MAX_DISPATCHERS {MAX_DISPATCHERS}\n#define BPFT_STATE_BYTES {STATE_BYTES}\n#define BPFT_STAGE_BYTES {STAGE_BYTES}\n#define BPFT_INDEX_ENTRY_BITS {}\n{}\n#define BPF_INTERP_API static __noinline__ __device__\n#line 1 \"bpf_interp.cuh\"\n{}\n#line 1 \"runtime.cu\"\n{}",
        super::worker::INDEX_ENTRY_BITS,
        layout_header(),
        INTERP_CUH,
        RUNTIME_CU
    )
}

/// Whether NVRTC can be loaded here.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

fn compute_arch(sm: u32) -> &'static str {
    match sm {
        70 => "compute_70",
        75 => "compute_75",
        80 => "compute_80",
        86 => "compute_86",
        87 => "compute_87",
        89 => "compute_89",
        100 => "compute_100",
        120 => "compute_120",
        _ => "compute_90",
    }
}

/// Compiles the runtime to relocatable PTX for `sm` with NVRTC (with
/// `$BPFTIME_CUDA_PRELUDE` first, when set: a measurement knob).
pub fn compile_runtime(sm: u32) -> Result<String, DeviceError> {
    let prelude = std::env::var("BPFTIME_CUDA_PRELUDE").ok();
    if let Some(pre) = &prelude {
        tracing::warn!(prelude = %pre, "runtime compiled with BPFTIME_CUDA_PRELUDE");
    }
    compile_runtime_with(sm, prelude.as_deref().unwrap_or(""))
}

/// [`compile_runtime`] with `prelude` (C text, e.g. `#define BPFT_TWO_PHASE 0`) put before
/// the runtime's source.
pub fn compile_runtime_with(sm: u32, prelude: &str) -> Result<String, DeviceError> {
    let src = format!("{prelude}\n{}", runtime_source());
    nvrtc_ptx(&src, "bpftime_runtime", sm, &["-rdc=true"], "the runtime")
}

/// Compiles stand-alone CUDA C++ device code (`name` for messages) to PTX for `sm` with
/// NVRTC: the bench's GPU probes are checked with it where there is no GPU.
pub fn compile_cuda(src: &str, name: &str, sm: u32) -> Result<String, DeviceError> {
    nvrtc_ptx(src, name, sm, &[], name)
}

/// NVRTC, C++17, for `sm` (`extra` options besides); `what` names the source in the error.
fn nvrtc_ptx(
    src: &str,
    name: &str,
    sm: u32,
    extra: &[&str],
    what: &str,
) -> Result<String, DeviceError> {
    if !nvrtc_present() {
        return Err(DeviceError::Call {
            call: "nvrtc",
            code: "libnvrtc could not be loaded (install the CUDA toolkit's NVRTC, or the \
                   nvidia-cuda-nvrtc wheel and put its lib/ on LD_LIBRARY_PATH)"
                .into(),
            log: String::new(),
        });
    }
    let mut options: Vec<String> = extra.iter().map(|o| o.to_string()).collect();
    options.push("-std=c++17".into());
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(compute_arch(sm)),
        options,
        name: Some(format!("{name}.cu")),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(src, opts)
        .map(|p| p.to_src())
        .map_err(|e| DeviceError::Call {
            call: "nvrtcCompileProgram",
            code: format!("{what} did not compile"),
            log: format!("{e:?}"),
        })
}

/// Parameters of a JIT chunk loop (`jit::JitOptions::chunk_loop`), in order.
const LOOP_PARAMS: [&str; 13] = [
    "in_base", "in_size", "out_base", "out_size", "n", "arg0", "arg1", "arg2", "arg3", "results",
    "first", "end", "stride",
];

/// The JIT's functions of one native program (`jit::PtxModule`'s names).
#[derive(Clone, Debug)]
pub struct NativeFuncs {
    /// `bpf_prog_<name>(ctx)`: one record, the ctx in memory.
    pub prog: String,
    /// `bpf_loop_<name>(…)`: the chunk loop.
    pub chunk_loop: String,
    /// `bpf_one_<name>(in_base, in_size, out_base, out_size, arg0..arg3)`: record 0 of a
    /// one-record job, the ctx in registers.
    pub one: String,
}

impl NativeFuncs {
    /// The names of a chunk-loop module's functions; `None` without a chunk loop.
    pub fn of(m: &jit::PtxModule) -> Option<Self> {
        Some(NativeFuncs {
            prog: m.prog_func().to_string(),
            chunk_loop: m.loop_func()?.to_string(),
            one: m.one_func()?.to_string(),
        })
    }
}

/// Parameters of a JIT one-record run (`jit::PtxModule::one_func`), in order.
const ONE_PARAMS: [&str; 8] = [
    "in_base", "in_size", "out_base", "out_size", "arg0", "arg1", "arg2", "arg3",
];

/// The generation's dispatch, for `progs[slot]`:
/// - `bpft_native(slot, ctx)`: one record;
/// - `bpft_native_loop(slot, in_base, in_size, out_base, out_size, n, arg0..arg3, results,
///   first, end, stride)`: the records `first, first + stride, … < end`, with the body
///   inline; returns the last r0;
/// - `bpft_one_fn[slot]`, in constant memory: the address of the slot's one-record run, which
///   the short path calls through it (one call, no switch, the ctx in registers).
///
/// PTX `.version`/`.target` as given.
pub fn dispatch_ptx(progs: &[NativeFuncs], ptx_version: (u32, u32), sm: u32) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "// generated: native program dispatch\n.version {}.{}\n.target sm_{sm}\n.address_size 64\n",
        ptx_version.0, ptx_version.1
    );
    let lp: Vec<String> = LOOP_PARAMS
        .iter()
        .map(|p| format!(".param .b64 {p}"))
        .collect();
    let one_params: Vec<String> = ONE_PARAMS
        .iter()
        .map(|p| format!(".param .b64 {p}"))
        .collect();
    for f in progs {
        let _ = writeln!(
            s,
            ".extern .func (.param .b64 r) {}(.param .b64 ctx);",
            f.prog
        );
        let _ = writeln!(
            s,
            ".extern .func (.param .b64 r) {}({});",
            f.chunk_loop,
            lp.join(", ")
        );
        let _ = writeln!(
            s,
            ".extern .func (.param .b64 r) {}({});",
            f.one,
            one_params.join(", ")
        );
    }
    // An empty generation's table holds one null entry (PTX has no empty arrays); no job
    // reaches it, since no program is native.
    let table: Vec<&str> = progs.iter().map(|f| f.one.as_str()).collect();
    let _ = writeln!(
        s,
        "\n.visible .const .align 8 .u64 bpft_one_fn[{}] = {{{}}};",
        table.len().max(1),
        if table.is_empty() {
            "0".to_string()
        } else {
            table.join(", ")
        }
    );
    s.push_str(
        "\n.visible .func (.param .b64 ret) bpft_native(.param .b32 slot, .param .b64 ctx)\n{\n\
         \t.reg .b32 %s;\n\t.reg .b64 %c, %r;\n\t.reg .pred %p;\n\
         \tld.param.b32 %s, [slot];\n\tld.param.b64 %c, [ctx];\n\tmov.b64 %r, 0;\n",
    );
    for (i, _) in progs.iter().enumerate() {
        let _ = writeln!(s, "\tsetp.eq.u32 %p, %s, {i};\n\t@%p bra L{i};");
    }
    s.push_str("\tbra LDONE;\n");
    for (i, f) in progs.iter().enumerate() {
        let _ = writeln!(
            s,
            "L{i}:\n\t{{\n\t.param .b64 a;\n\t.param .b64 rv;\n\tst.param.b64 [a], %c;\n\
             \tcall (rv), {}, (a);\n\tld.param.b64 %r, [rv];\n\t}}\n\tbra LDONE;",
            f.prog
        );
    }
    s.push_str("LDONE:\n\tst.param.b64 [ret], %r;\n\tret;\n}\n\n");
    let _ = writeln!(
        s,
        ".visible .func (.param .b64 ret) bpft_native_loop(.param .b32 slot, {})\n{{\n\
         \t.reg .b32 %s;\n\t.reg .b64 %v<13>, %r;\n\t.reg .pred %p;\n\
         \tld.param.b32 %s, [slot];\n\tmov.b64 %r, 0;",
        lp.join(", ")
    );
    for (k, p) in LOOP_PARAMS.iter().enumerate() {
        let _ = writeln!(s, "\tld.param.b64 %v{k}, [{p}];");
    }
    for (i, _) in progs.iter().enumerate() {
        let _ = writeln!(s, "\tsetp.eq.u32 %p, %s, {i};\n\t@%p bra M{i};");
    }
    s.push_str("\tbra MDONE;\n");
    for (i, f) in progs.iter().enumerate() {
        let l = &f.chunk_loop;
        let _ = writeln!(s, "M{i}:\n\t{{");
        for k in 0..LOOP_PARAMS.len() {
            let _ = writeln!(s, "\t.param .b64 a{k};\n\tst.param.b64 [a{k}], %v{k};");
        }
        let args: Vec<String> = (0..LOOP_PARAMS.len()).map(|k| format!("a{k}")).collect();
        let _ = writeln!(
            s,
            "\t.param .b64 rv;\n\tcall (rv), {l}, ({});\n\tld.param.b64 %r, [rv];\n\t}}\n\tbra MDONE;",
            args.join(", ")
        );
    }
    s.push_str("MDONE:\n\tst.param.b64 [ret], %r;\n\tret;\n}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_header_names_every_field_with_its_offset() {
        let h = layout_header();
        assert!(h.contains("#define BPFT_OFF_QueueSlot_desc 16\n"));
        assert!(h.contains("#define BPFT_OFF_QueueSlot_check 8\n"));
        assert!(h.contains("#define BPFT_SIZE_JobDesc 120\n"));
        assert!(h.contains("#define BPFT_SIZE_Completion 128\n"));
        let off = std::mem::offset_of!(shm_maps::layout::Completion, finished_ns);
        assert!(h.contains(&format!("#define BPFT_OFF_Completion_finished_ns {off}\n")));
        for (st, f, _) in shm_maps::layout::FIELDS {
            assert_eq!(h.matches(&format!("BPFT_OFF_{st}_{f} ")).count(), 1);
        }
    }

    /// The generated C copy of the slot check, compiled by the host's C compiler, against
    /// `shm_maps::layout::{inline_words, slot_check}` on descriptors of random words, half
    /// of them inline jobs; and of the completion check against `CompletionData::check`.
    #[test]
    fn the_generated_slot_check_equals_the_rust_one() {
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let dir = std::env::temp_dir().join(format!("bpft-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut src = check_c();
        src.push_str("#include <stdio.h>\nint main(void) {\n");
        let mut want = String::new();
        for case in 0..64 {
            let seq = if case == 0 { 1 } else { next() };
            let mut w: [u64; 15] = std::array::from_fn(|_| if case == 1 { 0 } else { next() });
            if case >= 32 {
                // Inline jobs of 0..=130 bytes (n records of rec bytes), some too long.
                let flags = shm_maps::layout::job_flags::INLINE as u64 | (next() & 0x11);
                w[0] = (w[0] & 0xffff_ffff) | flags << 32;
                w[1] = 1 + next() % 3;
                w[6] = (w[6] & !0xffff_ffff) | (next() % 50);
            }
            let iw: [u64; 15] = std::array::from_fn(|_| next());
            // SAFETY: JobDesc is 15 plain u64-sized words with no padding.
            let d: shm_maps::JobDesc = unsafe { std::mem::transmute(w) };
            let list = |v: &[u64]| {
                v.iter()
                    .map(|x| format!("{x}ull"))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let _ = writeln!(
                src,
                "  {{ unsigned long long w[15] = {{{}}}, iw[15] = {{{}}}, s[32], h = 0; s[0] = {seq}ull; s[1] = 0; for (int i = 0; i < 15; i++) {{ s[2 + i] = w[i]; s[17 + i] = iw[i]; }} for (int c = 0; c < 16; c++) h ^= bpft_slot_chunk_check({seq}ull, s[2 * c], s[2 * c + 1], c, bpft_inline_words(w)); printf(\"%d %llu %llu\\n\", bpft_inline_words(w), bpft_slot_check({seq}ull, w, iw), h); }}",
                list(&w),
                list(&iw)
            );
            let check = shm_maps::layout::slot_check(seq, &d, &iw);
            // The chunk-wise check (the dispatcher's whole-slot poll) gives the same word.
            let _ = writeln!(
                want,
                "{} {check} {check}",
                shm_maps::layout::inline_words(&d)
            );
        }
        // The completion check, on random fields (case 0: all zero) laid out as the GPU
        // lays them out (runtime.cu's finish_job).
        for case in 0..32 {
            let mut r = || if case == 0 { 0 } else { next() };
            let c = shm_maps::region::CompletionData {
                status: r() as i32,
                message: r() as u32,
                prog_version: r() as u32,
                prog_id: r() as u32,
                err_pc: r() as u32,
                records_done: r(),
                records_failed: r(),
                r0: r(),
                started_ns: r(),
                finished_ns: r(),
                gpu_hops: [r() as u32, r() as u32],
                ..Default::default()
            };
            let pair = |lo: u32, hi: u32| format!("{}ull", lo as u64 | (hi as u64) << 32);
            let w = [
                format!("{}ull", c.status as u32),
                pair(c.message, c.prog_version),
                pair(c.prog_id, c.err_pc),
                format!("{}ull", c.records_done),
                format!("{}ull", c.records_failed),
                format!("{}ull", c.r0),
                format!("{}ull", c.started_ns),
                format!("{}ull", c.finished_ns),
                pair(c.gpu_hops[0], c.gpu_hops[1]),
            ];
            let _ = writeln!(
                src,
                "  {{ unsigned long long w[BPFT_COMPLETION_CHECK_WORDS] = {{{}}}; printf(\"%llu\\n\", bpft_completion_check(w)); }}",
                w.join(",")
            );
            let _ = writeln!(want, "{}", c.check());
        }
        src.push_str("  return 0;\n}\n");
        std::fs::write(dir.join("check.c"), src).unwrap();
        let st = std::process::Command::new(&cc)
            .args(["-O2", "-o"])
            .arg(dir.join("check"))
            .arg(dir.join("check.c"))
            .status()
            .unwrap_or_else(|e| panic!("the C compiler `{cc}` runs: {e}"));
        assert!(st.success(), "the generated check compiles as C");
        let out = std::process::Command::new(dir.join("check"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), want);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_generated_job_desc_has_the_rust_offsets() {
        // C layout rules: each field at the next multiple of its alignment.
        let mut off = 0usize;
        for (ty, f, n) in JOB_DESC_C {
            let size = if *ty == "u32" { 4 } else { 8 };
            off = off.div_ceil(size) * size;
            let want = shm_maps::layout::FIELDS
                .iter()
                .find(|(s, name, _)| *s == "JobDesc" && name == f)
                .map(|r| r.2);
            assert_eq!(want, Some(off), "JobDesc.{f}");
            off += size * n;
        }
        assert_eq!(
            off.div_ceil(8) * 8,
            std::mem::size_of::<shm_maps::JobDesc>()
        );
        let listed = shm_maps::layout::FIELDS
            .iter()
            .filter(|r| r.0 == "JobDesc")
            .count();
        assert_eq!(
            listed,
            JOB_DESC_C.len(),
            "every JobDesc field is in the C view"
        );
    }

    #[test]
    fn the_runtime_uses_the_generated_offsets() {
        // Every BPFT_OFF_/BPFT_SIZE_ macro the runtime names must be generated.
        let h = layout_header();
        for word in RUNTIME_CU.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if (word.starts_with("BPFT_OFF_") || word.starts_with("BPFT_SIZE_"))
                && !word.ends_with('_')
            {
                assert!(
                    h.contains(&format!("#define {word} ")),
                    "{word} is not generated"
                );
            }
        }
    }

    #[test]
    fn dispatch_calls_each_slot() {
        let f = |k: u32| NativeFuncs {
            prog: format!("bpf_prog_p{k}"),
            chunk_loop: format!("bpf_loop_p{k}"),
            one: format!("bpf_one_p{k}"),
        };
        let p = dispatch_ptx(&[f(1), f(2)], (8, 0), 90);
        assert!(p.contains(".extern .func (.param .b64 r) bpf_prog_p1(.param .b64 ctx);"));
        assert!(p.contains("setp.eq.u32 %p, %s, 1;"));
        assert!(p.contains("call (rv), bpf_prog_p2, (a);"));
        assert!(p.contains(
            "call (rv), bpf_loop_p2, (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12);"
        ));
        assert!(p.contains(".const .align 8 .u64 bpft_one_fn[2] = {bpf_one_p1, bpf_one_p2};"));
        assert!(p.contains(
            ".extern .func (.param .b64 r) bpf_one_p2(.param .b64 in_base, .param .b64 in_size, \
             .param .b64 out_base, .param .b64 out_size, .param .b64 arg0, .param .b64 arg1, \
             .param .b64 arg2, .param .b64 arg3);"
        ));
        let empty = dispatch_ptx(&[], (8, 0), 90);
        assert!(empty.contains("bpft_one_fn[1] = {0};"));
        assert!(empty.contains(".visible .func (.param .b64 ret) bpft_native("));
        assert!(empty.contains(".visible .func (.param .b64 ret) bpft_native_loop("));
    }
}
