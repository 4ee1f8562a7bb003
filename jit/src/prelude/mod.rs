//! Helper functions as PTX device functions, generated from one table ([`HELPERS`]) and
//! emitted only when the program calls them.
//!
//! Every helper is `.func (.param .b64 ret0) bpf_h<id>[_m<map>](.param .b64 a1, …)`; map
//! helpers get one specialised copy per map, with the map's base address and geometry baked
//! in as immediates. Helper 507 (`exit`) is inlined as PTX `exit` (the entry wrapper stores
//! result 0 first).
//!
//! **Map layouts** are those of `shm-maps/src/maps/` (commit 78d6681), so the same bytes
//! serve host processes and the GPU. Every map starts with a 64-byte header (`count`, the
//! hash entry counter, at +48).
//!
//! | kind             | layout at `base` (n = max_entries, t = threads)                                  |
//! |------------------|-----------------------------------------------------------------------------------|
//! | `Array`          | header; `seq[t·n]` u64 at 64; values at `round_up(64 + 8·t·n, 64)`, stride `round_up(value_size, 8)` |
//! | `PerThreadArray` | as `Array`, value set `t` = global thread id (`ctaid.x·ntid.x + tid.x`), NULL / `-E2BIG` beyond `threads` |
//! | `Hash`           | header; `lock[j]` u32 at 64 + 4j (`locks = min(slots, 1024)`); slots at `round_up(64 + 4·locks, 64)`, each `state` u64, `seq` u64, key (`round_up(ks, 8)`), value; `slots = next_pow2(2n)`; FNV-1a + murmur finalizer, linear probing |
//! | `RingBuf`        | header; `prod_lock` u32 at 128, `prod_pos` u64 at 136, `cons_pos` u64 at 264; data at 384: records `u32 len\|BUSY<<31\|DISCARD<<30`, `u32 pid`, data padded to 8 |
//!
//! Lock words hold a pid ([`JitOptions::lock_pid`](crate::JitOptions::lock_pid)): the GPU
//! takes stripe and producer locks by CAS `0 → pid` and spins (with `nanosleep`) while they
//! are held; it never steals a lock from a dead host process (the host does that).
//!
//! **Trace ring** (`trace_printk` 6, `puts` 501), at [`JitOptions::trace_buf`](crate::JitOptions::trace_buf),
//! defined here: a 64-byte header (`head` u64 at 0: next record number, taken with
//! `atom.add`; `capacity` u64 at 8: record count, a power of two, written by the host), then
//! `capacity` 64-byte records at 64 + 64·(k mod capacity):
//!
//! | offset | field                                                         |
//! |--------|---------------------------------------------------------------|
//! | 0      | `seq` u64 = k + 1, stored last with release (0: never written) |
//! | 8      | `helper` u32 (6 or 501)                                       |
//! | 12     | `fmt_len` u32 (r2 of `trace_printk`, 0 for `puts`)            |
//! | 16     | `fmt` u64: address of the format / string (in `.rodata`)       |
//! | 24     | `args[3]` u64                                                 |
//! | 48     | global thread id u64                                          |
//! | 56     | `%globaltimer` u64                                            |
//!
//! The ring overwrites old records when the host falls behind; both helpers return 0.
//!
//! Other helpers: `ktime_get_ns` (5) and `get_globaltimer` (502) read `%globaltimer`;
//! `get_prandom_u32` (7) is xorshift64 on a per-thread state in a module global
//! (`bpf_prandom_state[4096]`, indexed by global thread id, seeded from `%globaltimer`);
//! 520 `wait_until` spins on `%globaltimer` (with `nanosleep` unless r2 bit 0 is set);
//! 503/504/505/508 write `%ctaid`/`%ntid`/`%tid`/`%nctaid` (x, y, z) to the non-NULL
//! pointers r1..r3; 506 is `membar.sys`; 509 `%smid`; 510 `tid.x / 32`; 511 `%laneid`;
//! 521 `membar_gpu` is `fence.acq_rel.gpu`, which also drops the SM's L1 cache (ptxas
//! follows every fence with `CCTL.IVALL`): a probe that reads host-updated data through L1
//! calls it now and then to see the update, far cheaper than `membar.sys`.

use crate::{JitOptions, MapBinding};
use ebpf::helpers as h;
use ebpf::program::MapKind;
use std::collections::BTreeSet;

/// One use of a helper: id and, for map helpers, the map index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Use {
    /// Helper id.
    pub id: i32,
    /// Map index for map-specialised helpers.
    pub map: Option<usize>,
}

/// Context of one body generation.
pub struct Gen<'a> {
    /// Options (trace buffer, lock pid).
    pub opts: &'a JitOptions,
    /// The map, for map helpers.
    pub map: Option<&'a MapBinding>,
    /// What the call site knows (nothing for a `.func` body).
    pub site: Site,
}

/// What a call site knows about the helper's arguments, for a body inlined there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Site {
    /// r2 (the key of map helpers) is `stack + key` in the caller's frame: the byte offset
    /// into its `.local` array `stack` (16-byte aligned), so the key is read from there in
    /// aligned words (when the whole key lies inside the frame).
    pub key: Option<i64>,
    /// Bytes of the caller's `stack` array.
    pub frame: u32,
}

/// One helper of the table.
pub struct HelperDef {
    /// Helper id.
    pub id: i32,
    /// Name (as `ebpf::helpers`).
    pub name: &'static str,
    /// Arguments r1..r(nargs) passed.
    pub nargs: u8,
    /// Map kinds it is specialised for (empty: not a map helper).
    pub map_kinds: &'static [MapKind],
    /// Lowered inline as PTX `exit`.
    pub inline_exit: bool,
    /// Generates the body (the part between the argument loads and the return).
    pub body: fn(&Gen) -> String,
}

const MAPS: &[MapKind] = &[MapKind::Array, MapKind::PerThreadArray, MapKind::Hash];
const RINGBUF: &[MapKind] = &[MapKind::RingBuf];

/// The helper table: every helper the GPU provides.
pub static HELPERS: &[HelperDef] = &[
    HelperDef {
        id: h::MAP_LOOKUP_ELEM,
        name: "map_lookup_elem",
        nargs: 2,
        map_kinds: MAPS,
        inline_exit: false,
        body: map_lookup,
    },
    HelperDef {
        id: h::MAP_UPDATE_ELEM,
        name: "map_update_elem",
        nargs: 4,
        map_kinds: MAPS,
        inline_exit: false,
        body: map_update,
    },
    HelperDef {
        id: h::MAP_DELETE_ELEM,
        name: "map_delete_elem",
        nargs: 2,
        map_kinds: MAPS,
        inline_exit: false,
        body: map_delete,
    },
    HelperDef {
        id: h::KTIME_GET_NS,
        name: "ktime_get_ns",
        nargs: 0,
        map_kinds: &[],
        inline_exit: false,
        body: globaltimer,
    },
    HelperDef {
        id: h::TRACE_PRINTK,
        name: "trace_printk",
        nargs: 5,
        map_kinds: &[],
        inline_exit: false,
        body: trace_printk,
    },
    HelperDef {
        id: h::GET_PRANDOM_U32,
        name: "get_prandom_u32",
        nargs: 0,
        map_kinds: &[],
        inline_exit: false,
        body: prandom,
    },
    HelperDef {
        id: h::RINGBUF_OUTPUT,
        name: "ringbuf_output",
        nargs: 4,
        map_kinds: RINGBUF,
        inline_exit: false,
        body: ringbuf_output,
    },
    HelperDef {
        id: h::RINGBUF_RESERVE,
        name: "ringbuf_reserve",
        nargs: 3,
        map_kinds: RINGBUF,
        inline_exit: false,
        body: ringbuf_reserve,
    },
    HelperDef {
        id: h::RINGBUF_SUBMIT,
        name: "ringbuf_submit",
        nargs: 2,
        map_kinds: &[],
        inline_exit: false,
        body: ringbuf_submit,
    },
    HelperDef {
        id: h::RINGBUF_DISCARD,
        name: "ringbuf_discard",
        nargs: 2,
        map_kinds: &[],
        inline_exit: false,
        body: ringbuf_discard,
    },
    HelperDef {
        id: h::PUTS,
        name: "puts",
        nargs: 1,
        map_kinds: &[],
        inline_exit: false,
        body: puts,
    },
    HelperDef {
        id: h::GET_GLOBALTIMER,
        name: "get_globaltimer",
        nargs: 0,
        map_kinds: &[],
        inline_exit: false,
        body: globaltimer,
    },
    HelperDef {
        id: h::GET_BLOCK_IDX,
        name: "get_block_idx",
        nargs: 3,
        map_kinds: &[],
        inline_exit: false,
        body: |_| xyz("%ctaid"),
    },
    HelperDef {
        id: h::GET_BLOCK_DIM,
        name: "get_block_dim",
        nargs: 3,
        map_kinds: &[],
        inline_exit: false,
        body: |_| xyz("%ntid"),
    },
    HelperDef {
        id: h::GET_THREAD_IDX,
        name: "get_thread_idx",
        nargs: 3,
        map_kinds: &[],
        inline_exit: false,
        body: |_| xyz("%tid"),
    },
    HelperDef {
        id: h::MEMBAR,
        name: "membar",
        nargs: 0,
        map_kinds: &[],
        inline_exit: false,
        body: |_| "\tmembar.sys;\n".into(),
    },
    HelperDef {
        id: h::MEMBAR_GPU,
        name: "membar_gpu",
        nargs: 0,
        map_kinds: &[],
        inline_exit: false,
        body: |_| "\tfence.acq_rel.gpu;\n".into(),
    },
    HelperDef {
        id: h::EXIT,
        name: "exit",
        nargs: 0,
        map_kinds: &[],
        inline_exit: true,
        body: |_| String::new(),
    },
    HelperDef {
        id: h::GET_GRID_DIM,
        name: "get_grid_dim",
        nargs: 3,
        map_kinds: &[],
        inline_exit: false,
        body: |_| xyz("%nctaid"),
    },
    HelperDef {
        id: h::GET_SM_ID,
        name: "get_sm_id",
        nargs: 0,
        map_kinds: &[],
        inline_exit: false,
        body: |_| "\tmov.u32 %r1, %smid;\n\tcvt.u64.u32 %rd0, %r1;\n".into(),
    },
    HelperDef {
        id: h::GET_WARP_ID,
        name: "get_warp_id",
        nargs: 0,
        map_kinds: &[],
        inline_exit: false,
        body: |_| {
            "\tmov.u32 %r1, %tid.x;\n\tshr.u32 %r1, %r1, 5;\n\tcvt.u64.u32 %rd0, %r1;\n".into()
        },
    },
    HelperDef {
        id: h::GET_LANE_ID,
        name: "get_lane_id",
        nargs: 0,
        map_kinds: &[],
        inline_exit: false,
        body: |_| "\tmov.u32 %r1, %laneid;\n\tcvt.u64.u32 %rd0, %r1;\n".into(),
    },
    HelperDef {
        id: h::WAIT_UNTIL,
        name: "wait_until",
        nargs: 2,
        map_kinds: &[],
        inline_exit: false,
        body: wait_until,
    },
];

/// The table row of helper `id`.
pub fn def(id: i32) -> Option<&'static HelperDef> {
    HELPERS.iter().find(|d| d.id == id)
}

/// The `.func` name of a helper use.
pub fn func_name(id: i32, map: Option<usize>) -> String {
    match map {
        Some(m) => format!("bpf_h{id}_m{m}"),
        None => format!("bpf_h{id}"),
    }
}

fn signature(name: &str, nargs: u8) -> String {
    let params: Vec<String> = (1..=nargs).map(|i| format!(".param .b64 a{i}")).collect();
    format!(".func (.param .b64 ret0) {name}({})", params.join(", "))
}

/// Register declarations of a helper body (`.func` or inline block).
const DECLS: &str =
    "\t.reg .pred %p<16>;\n\t.reg .b16 %rs<8>;\n\t.reg .b32 %r<40>;\n\t.reg .b64 %rd<88>;\n";

/// Prototypes and bodies of the helpers in `used`.
pub fn generate(used: &BTreeSet<Use>, opts: &JitOptions) -> (Vec<String>, Vec<String>) {
    let mut protos = Vec::new();
    let mut bodies = Vec::new();
    for u in used {
        let Some(d) = def(u.id) else { continue };
        let name = func_name(u.id, u.map);
        let sig = signature(&name, d.nargs);
        let g = Gen {
            opts,
            map: u.map.and_then(|m| opts.maps.get(m)),
            site: Site::default(),
        };
        let mut s = String::new();
        s.push_str(&sig);
        s.push_str("\n{\n");
        s.push_str(DECLS);
        for i in 1..=d.nargs {
            s.push_str(&format!("\tld.param.b64 %rd{i}, [a{i}];\n"));
        }
        s.push_str("\tmov.b64 %rd0, 0;\n");
        s.push_str(&(d.body)(&g));
        s.push_str("$Ldone:\n\tst.param.b64 [ret0], %rd0;\n\tret;\n}\n");
        protos.push(sig);
        bodies.push(s);
    }
    (protos, bodies)
}

/// Module-level declarations the helpers in `used` need, whether called or inlined.
pub fn globals(used: &BTreeSet<Use>) -> Vec<String> {
    used.iter()
        .filter(|u| u.id == h::GET_PRANDOM_U32)
        .take(1)
        .map(|_| ".global .align 8 .b64 bpf_prandom_state[4096];\n".to_string())
        .collect()
}

/// The body of helper use `u` as a block to paste at a call site: its registers are declared
/// inside the block (PTX scopes registers and labels to the enclosing `{ }`, so sites never
/// collide with each other or with the caller) and renamed (`%rd` → `%hd`, `%r` → `%hr`,
/// `%rs` → `%hs`, `%p` → `%hp`) so that the caller's r0..r5 (`%rd0..%rd5`) stay visible for
/// the argument copies and the result. ptxas does not inline `.func` calls (a real `CALL`
/// with the ABI's register saves), so this is how a helper's body reaches the
/// optimiser together with the program's code (constants, the key's stack stores).
pub fn inline_block(u: Use, opts: &JitOptions, site: Site) -> Option<String> {
    let d = def(u.id)?;
    let g = Gen {
        opts,
        map: u.map.and_then(|m| opts.maps.get(m)),
        site,
    };
    let mut body = String::with_capacity(4096);
    body.push_str(DECLS);
    for i in 1..=d.nargs {
        body.push_str(&format!("\tmov.b64 %rd{i}, %RD{i};\n"));
    }
    body.push_str("\tmov.b64 %rd0, 0;\n");
    body.push_str(&(d.body)(&g));
    body.push_str("$Ldone:\n\tmov.b64 %RD0, %rd0;\n");
    let body = body
        .replace("%rd", "%hd")
        .replace("%rs", "%hs")
        .replace("%r", "%hr")
        .replace("%p", "%hp")
        .replace("%RD", "%rd");
    Some(format!("\t{{ // {} inline\n{body}\t}}\n", d.name))
}

/// Replaces `@KEY@` placeholders.
fn fill(t: &str, kv: &[(&str, i64)]) -> String {
    let mut s = t.to_string();
    for (k, v) in kv {
        s = s.replace(&format!("@{k}@"), &v.to_string());
    }
    s
}

fn round_up(n: u64, a: u64) -> u64 {
    n.div_ceil(a) * a
}

/// `values_off` of an array layout.
fn array_values_off(b: &MapBinding) -> u64 {
    round_up(64 + 8 * b.threads.max(1) as u64 * b.max_entries as u64, 64)
}

/// Address of value `idx` of value set `thread` of an array map.
pub fn array_value_addr(b: &MapBinding, thread: u64, idx: u64) -> u64 {
    let stride = round_up(b.value_size as u64, 8);
    b.base_addr
        .wrapping_add(array_values_off(b))
        .wrapping_add(stride * (thread * b.max_entries as u64 + idx))
}

/// Global thread id into `%rd9` (uses `%r30..%r32`, `%rd8`).
const GTID: &str = "\tmov.u32 %r30, %ctaid.x;\n\tmov.u32 %r31, %ntid.x;\n\tmov.u32 %r32, %tid.x;\n\tmul.wide.u32 %rd9, %r30, %r31;\n\tcvt.u64.u32 %rd8, %r32;\n\tadd.s64 %rd9, %rd9, %rd8;\n";

/// Byte copy of `n` bytes from `[src]` to `[dst]` (registers named), with label tag `tag`.
fn copy(src: &str, dst: &str, n: u64, tag: &str) -> String {
    format!(
        "\tmov.b64 %rd40, 0;\n$Lcp{tag}:\n\tsetp.ge.u64 %p10, %rd40, {n};\n\t@%p10 bra $Lcpd{tag};\n\tadd.s64 %rd41, {src}, %rd40;\n\tld.u8 %rs1, [%rd41];\n\tadd.s64 %rd42, {dst}, %rd40;\n\tst.relaxed.sys.u8 [%rd42], %rs1;\n\tadd.s64 %rd40, %rd40, 1;\n\tbra.uni $Lcp{tag};\n$Lcpd{tag}:\n"
    )
}

/// Spin-takes the u32 pid lock at `[addr]`.
fn pid_lock(addr: &str, pid: u32, tag: &str) -> String {
    format!(
        "$Llk{tag}:\n\tatom.acquire.sys.cas.b32 %r20, [{addr}], 0, {pid};\n\tsetp.eq.u32 %p11, %r20, 0;\n\t@%p11 bra $Llkd{tag};\n\tnanosleep.u32 64;\n\tbra.uni $Llk{tag};\n$Llkd{tag}:\n"
    )
}

fn pid_unlock(addr: &str) -> String {
    format!("\tst.release.sys.u32 [{addr}], 0;\n")
}

/// Takes the u64 seqlock at `[%rd11]` (CAS even → odd | pid << 32); odd seq in `%rd12`.
fn seq_lock(pid: u32, owned: bool) -> String {
    let pidw = (pid as i64) << 32;
    if owned {
        return format!(
            "\tld.relaxed.sys.u64 %rd12, [%rd11];\n\tand.b64 %rd12, %rd12, 4294967295;\n\tand.b64 %rd13, %rd12, 1;\n\txor.b64 %rd13, %rd13, 1;\n\tadd.s64 %rd12, %rd12, %rd13;\n\tand.b64 %rd12, %rd12, 4294967295;\n\tor.b64 %rd14, %rd12, {pidw};\n\tst.relaxed.sys.u64 [%rd11], %rd14;\n\tfence.acq_rel.sys;\n"
        );
    }
    format!(
        "$Lsq:\n\tld.relaxed.sys.u64 %rd15, [%rd11];\n\tand.b64 %rd12, %rd15, 4294967295;\n\tand.b64 %rd13, %rd12, 1;\n\tsetp.ne.u64 %p12, %rd13, 0;\n\t@%p12 bra $Lsq;\n\tadd.s64 %rd12, %rd12, 1;\n\tand.b64 %rd12, %rd12, 4294967295;\n\tor.b64 %rd14, %rd12, {pidw};\n\tatom.acquire.sys.cas.b64 %rd16, [%rd11], %rd15, %rd14;\n\tsetp.ne.u64 %p12, %rd16, %rd15;\n\t@%p12 bra $Lsq;\n\tfence.acq_rel.sys;\n"
    )
}

/// Releases the seqlock at `[%rd11]`: store `(odd + 1) & mask` with release.
const SEQ_UNLOCK: &str = "\tadd.s64 %rd12, %rd12, 1;\n\tand.b64 %rd12, %rd12, 4294967295;\n\tst.release.sys.u64 [%rd11], %rd12;\n";

fn map_of<'a>(g: &'a Gen) -> &'a MapBinding {
    g.map.expect("map helpers are generated with a map")
}

/// Array index → flat index in `%rd6`; jumps to `$Ldone` (with r0 as set) when out of range.
fn array_index(b: &MapBinding, site: Site) -> String {
    // The u32 key from the caller's frame when the site knows where it is (ptxas forwards
    // the program's store), else through the pointer.
    let load = match site.key {
        Some(a) if a % 4 == 0 && a + 4 <= site.frame as i64 => {
            format!("ld.local.u32 %r1, [stack+{a}]")
        }
        _ => "ld.u32 %r1, [%rd2]".to_string(),
    };
    let mut s = format!(
        "\t{load};\n\tsetp.ge.u32 %p1, %r1, {};\n\t@%p1 bra $Ldone;\n\tcvt.u64.u32 %rd6, %r1;\n",
        b.max_entries
    );
    if b.kind == MapKind::PerThreadArray {
        s.push_str(GTID);
        s.push_str(&format!(
            "\tsetp.ge.u64 %p2, %rd9, {};\n\t@%p2 bra $Ldone;\n\tmul.lo.s64 %rd9, %rd9, {};\n\tadd.s64 %rd6, %rd6, %rd9;\n",
            b.threads.max(1),
            b.max_entries
        ));
    }
    s
}

fn hash_geometry(b: &MapBinding) -> [(&'static str, i64); 10] {
    let slots = (2 * b.max_entries as u64).max(1).next_power_of_two();
    let locks = slots.min(1024);
    let slots_off = round_up(64 + 4 * locks, 64);
    let key_len = round_up(b.key_size as u64, 8);
    let slot_size = 16 + key_len + round_up(b.value_size as u64, 8);
    [
        ("SLOTS", slots as i64),
        ("SMASK", slots as i64 - 1),
        ("LMASK", locks as i64 - 1),
        ("SLOTBASE", b.base_addr.wrapping_add(slots_off) as i64),
        ("LOCKBASE", b.base_addr.wrapping_add(64) as i64),
        ("COUNT", b.base_addr.wrapping_add(48) as i64),
        ("SSIZE", slot_size as i64),
        ("VOFF", 16 + key_len as i64),
        ("KS", b.key_size as i64),
        ("MAX", b.max_entries as i64),
    ]
}

/// FNV-1a's offset basis and prime, then murmur3's finalizer: `shm_maps::maps::hash::hash_key`
/// bit for bit (the CPU and the GPU share the table).
const FNV_FINAL: &str = "\tshr.u64 %rd23, %rd6, 33;
	xor.b64 %rd6, %rd6, %rd23;
	mul.lo.s64 %rd6, %rd6, -49064778989728563;
	shr.u64 %rd23, %rd6, 33;
	xor.b64 %rd6, %rd6, %rd23;
	mul.lo.s64 %rd6, %rd6, -4265267296055464877;
	shr.u64 %rd23, %rd6, 33;
	xor.b64 %rd6, %rd6, %rd23;
";
const FNV_BASIS: i64 = -3750763034362895579;
const FNV_PRIME: i64 = 1099511628211;

/// First register of the key words (`%rd64..`) of an unrolled probe.
const KEY_REG: usize = 64;
/// Most key words an unrolled probe keeps in registers.
const MAX_KEY_WORDS: usize = 16;

/// The key split into words `(byte offset, bytes)`, each aligned at both ends: in the key's
/// source (the eBPF stack at `stack + at`, 16-byte aligned array; `None`: a pointer of unknown
/// alignment, so bytes) and in the slot (8-byte aligned key). `None` past [`MAX_KEY_WORDS`].
fn key_words(ks: u64, at: Option<i64>) -> Option<Vec<(u64, u64)>> {
    let mut w = Vec::new();
    let mut p = 0;
    while p < ks {
        let c = [8u64, 4, 2, 1]
            .into_iter()
            .find(|&c| {
                p + c <= ks
                    && p % c == 0
                    && at.is_some_and(|a| (a + p as i64).rem_euclid(c as i64) == 0)
            })
            .unwrap_or(1);
        w.push((p, c));
        p += c;
    }
    (w.len() <= MAX_KEY_WORDS).then_some(w)
}

/// Hash of the key into `%rd6`, then the probe: `%rd7` = state address of the live slot
/// holding the key (jumps to `$Lfound`), or a jump to `$Lnotfound`. The key is at `[%rd2]`,
/// or, when the call site knows it (`key_at`), at `[stack + key_at]` in the caller's frame.
///
/// Small keys (up to [`MAX_KEY_WORDS`] words) are loaded once into registers, in 8/4/2-byte
/// words where the alignment is known (bytes otherwise), hashed and compared unrolled; larger
/// ones go through byte loops.
///
/// **Ordering** (the reader side of the shm-maps protocol, `shm-maps/src/maps/hash.rs`):
///
/// | step | access | why |
/// |------|--------|-----|
/// | state of each probed slot | `ld.acquire` | pairs with the inserter's release store of `LIVE`: the key read next is that occupant's (or a later one's), so a mismatch is final for this generation |
/// | key, one word | `ld.acquire` | orders the key read before the re-read of the state (below) |
/// | key, several words or bytes | `ld.relaxed`, then `fence.acq_rel` once all match | the same ordering, paid once per match instead of per word |
/// | state again, on a match only | `ld.relaxed` | a claimer CASes the state, fences (release) and then writes the key: if the key read saw any of a newer occupant's bytes, the re-read sees its claim and the slot is read again |
///
/// A mismatch needs no re-read: the key of the generation whose `LIVE` was acquired differs,
/// and a newer occupant was inserted after that load, so missing it is a lookup ordered
/// before that insert (as in shm-maps, where the re-read on a mismatch only retries).
fn hash_find(b: &MapBinding, lock: Option<u32>, key_at: Option<i64>, frame: u32) -> String {
    let geo = hash_geometry(b);
    let ks = b.key_size as u64;
    let key_at = key_at.filter(|&a| a >= 0 && a + ks as i64 <= frame as i64);
    let mut s = String::new();
    let words = key_words(ks, key_at);
    match &words {
        Some(words) => {
            for (i, &(p, c)) in words.iter().enumerate() {
                let r = KEY_REG + i;
                match key_at {
                    Some(a) => s.push_str(&format!(
                        "\tld.local.u{} %rd{r}, [stack+{}];\n",
                        8 * c,
                        a + p as i64
                    )),
                    None => s.push_str(&format!("\tld.u{} %rd{r}, [%rd2+{p}];\n", 8 * c)),
                }
            }
            s.push_str(&format!("\tmov.b64 %rd6, {FNV_BASIS};\n"));
            for (i, &(_, c)) in words.iter().enumerate() {
                let r = KEY_REG + i;
                for j in 0..c {
                    if c == 1 {
                        s.push_str(&format!("\txor.b64 %rd6, %rd6, %rd{r};\n"));
                    } else {
                        s.push_str(&format!(
                            "\tbfe.u64 %rd22, %rd{r}, {}, 8;\n\txor.b64 %rd6, %rd6, %rd22;\n",
                            8 * j
                        ));
                    }
                    s.push_str(&format!("\tmul.lo.s64 %rd6, %rd6, {FNV_PRIME};\n"));
                }
            }
        }
        None => s.push_str(&format!(
            "\tmov.b64 %rd6, {FNV_BASIS};
	mov.b64 %rd20, 0;
$Lh:
	setp.ge.u64 %p5, %rd20, {ks};
	@%p5 bra $Lhd;
	add.s64 %rd21, %rd2, %rd20;
	ld.u8 %rd22, [%rd21];
	xor.b64 %rd6, %rd6, %rd22;
	mul.lo.s64 %rd6, %rd6, {FNV_PRIME};
	add.s64 %rd20, %rd20, 1;
	bra.uni $Lh;
$Lhd:
"
        )),
    }
    s.push_str(FNV_FINAL);
    if let Some(pid) = lock {
        s.push_str(&stripe_lock(pid));
    }
    s.push_str(
        "\tmov.b64 %rd24, 0;
$Lfl:
	setp.ge.u64 %p6, %rd24, @SLOTS@;
	@%p6 bra $Lnotfound;
	add.s64 %rd25, %rd6, %rd24;
	and.b64 %rd25, %rd25, @SMASK@;
	mul.lo.s64 %rd7, %rd25, @SSIZE@;
	add.s64 %rd7, %rd7, @SLOTBASE@;
$Lfa:
	ld.acquire.sys.u64 %rd8, [%rd7];
	and.b64 %rd26, %rd8, 3;
	setp.eq.u64 %p6, %rd26, 0;
	@%p6 bra $Lnotfound;
	setp.ne.u64 %p6, %rd26, 2;
	@%p6 bra $Lfn;
",
    );
    match &words {
        Some(words) => {
            let sem = if words.len() == 1 {
                "acquire"
            } else {
                "relaxed"
            };
            for (i, &(p, c)) in words.iter().enumerate() {
                s.push_str(&format!(
                    "\tld.{sem}.sys.u{} %rd27, [%rd7+{}];\n\tsetp.ne.u64 %p7, %rd27, %rd{};\n\t@%p7 bra $Lfn;\n",
                    8 * c,
                    16 + p,
                    KEY_REG + i
                ));
            }
            if words.len() > 1 {
                s.push_str("\tfence.acq_rel.sys;\n");
            }
        }
        None => s.push_str(
            "\tmov.b64 %rd27, 0;
$Lfc:
	setp.ge.u64 %p7, %rd27, @KS@;
	@%p7 bra $Lfcd;
	add.s64 %rd28, %rd2, %rd27;
	ld.u8 %r6, [%rd28];
	add.s64 %rd29, %rd7, %rd27;
	ld.relaxed.sys.u8 %r7, [%rd29+16];
	setp.ne.u32 %p7, %r6, %r7;
	@%p7 bra $Lfn;
	add.s64 %rd27, %rd27, 1;
	bra.uni $Lfc;
$Lfcd:
	fence.acq_rel.sys;
",
        ),
    }
    s.push_str(
        "\tld.relaxed.sys.u64 %rd30, [%rd7];
	setp.ne.u64 %p7, %rd30, %rd8;
	@%p7 bra $Lfa;
	bra.uni $Lfound;
$Lfn:
	add.s64 %rd24, %rd24, 1;
	bra.uni $Lfl;
",
    );
    let t = fill(&s, &geo);
    // The probe's acquire loads, fence and stripe lock take the binding's scope: a map bound
    // with `.gpu` lives in device memory that no host touches while programs run, and a
    // `.sys` fence per probe costs a system-wide memory barrier and an L1 invalidation.
    if b.scope == crate::AtomicScope::Sys {
        t
    } else {
        t.replace(".sys", b.scope.ptx())
    }
}

/// The stripe lock address of hash `%rd6` into `%rd10`, then the lock.
fn stripe_lock(pid: u32) -> String {
    format!(
        "\tand.b64 %rd10, %rd6, @SMASK@;\n\tand.b64 %rd10, %rd10, @LMASK@;\n\tshl.b64 %rd10, %rd10, 2;\n\tadd.s64 %rd10, %rd10, @LOCKBASE@;\n{}",
        pid_lock("%rd10", pid, "s")
    )
}

/// The wait of a map in an emulated tier ([`MapBinding::tier`](crate::MapBinding::tier)) before an
/// access of `bytes`: until `%globaltimer` passes `max(start + latency, end)`, `end` being
/// when the tier's link has carried the bytes behind every earlier access. The link's next
/// free time (at `tat_addr`) is raised to `start` (`atom.max`: an idle link restarts now),
/// then the bytes are added to it (`atom.add`); both only raise it, so concurrent accesses
/// queue behind each other and none is lost. The device interpreter does the same
/// (`bpf_tier_wait`). Nothing for a local map.
fn tier_wait(b: &MapBinding, bytes: u64) -> String {
    let Some(t) = b.tier else {
        return String::new();
    };
    let mut s = format!(
        "\tmov.u64 %rd80, %globaltimer;\n\tadd.u64 %rd81, %rd80, {};\n",
        t.latency_ns as i64
    );
    if t.ps_per_byte != 0 {
        let cost = (bytes * t.ps_per_byte).div_ceil(1000).max(1) as i64;
        s.push_str(&format!(
            "\tmov.b64 %rd82, {tat};
\tatom.relaxed.gpu.max.u64 %rd83, [%rd82], %rd80;
\tatom.relaxed.gpu.add.u64 %rd83, [%rd82], {cost};
\tadd.u64 %rd83, %rd83, {cost};
\tmax.u64 %rd81, %rd81, %rd83;
",
            tat = t.tat_addr as i64
        ));
    }
    s.push_str("$Ltierw:\n\tmov.u64 %rd80, %globaltimer;\n\tsetp.lt.u64 %p14, %rd80, %rd81;\n\t@%p14 bra $Ltierw;\n");
    s
}

fn map_lookup(g: &Gen) -> String {
    let b = map_of(g);
    tier_wait(b, b.value_size as u64) + &map_lookup_local(g)
}

fn map_update(g: &Gen) -> String {
    let b = map_of(g);
    tier_wait(b, b.value_size as u64) + &map_update_local(g)
}

fn map_delete(g: &Gen) -> String {
    let b = map_of(g);
    tier_wait(b, b.key_size as u64) + &map_delete_local(g)
}

fn map_lookup_local(g: &Gen) -> String {
    let b = map_of(g);
    match b.kind {
        MapKind::Array | MapKind::PerThreadArray => {
            let mut s = array_index(b, g.site);
            let stride = round_up(b.value_size as u64, 8);
            s.push_str(&format!(
                "\tmul.lo.s64 %rd6, %rd6, {stride};\n\tadd.s64 %rd0, %rd6, {};\n",
                b.base_addr.wrapping_add(array_values_off(b)) as i64
            ));
            s
        }
        MapKind::Hash => {
            let mut s = hash_find(b, None, g.site.key, g.site.frame);
            s.push_str(&fill(
                "$Lnotfound:\n\tbra.uni $Ldone;\n$Lfound:\n\tadd.s64 %rd0, %rd7, @VOFF@;\n",
                &hash_geometry(b),
            ));
            s
        }
        MapKind::RingBuf => "\tmov.b64 %rd0, 0;\n".into(),
    }
}

const FLAGS_CHECK: &str = "\tmov.b64 %rd0, -22;\n\tsetp.gt.u64 %p1, %rd4, 2;\n\t@%p1 bra $Ldone;\n";

fn map_update_local(g: &Gen) -> String {
    let b = map_of(g);
    let pid = g.opts.lock_pid;
    match b.kind {
        MapKind::Array | MapKind::PerThreadArray => {
            let stride = round_up(b.value_size as u64, 8);
            let mut s = String::from(FLAGS_CHECK);
            s.push_str("\tmov.b64 %rd0, -17;\n\tsetp.eq.u64 %p1, %rd4, 1;\n\t@%p1 bra $Ldone;\n\tmov.b64 %rd0, -7;\n");
            s.push_str(&array_index(b, g.site));
            s.push_str(&format!(
                "\tshl.b64 %rd11, %rd6, 3;\n\tadd.s64 %rd11, %rd11, {};\n\tmul.lo.s64 %rd17, %rd6, {stride};\n\tadd.s64 %rd17, %rd17, {};\n",
                b.base_addr.wrapping_add(64) as i64,
                b.base_addr.wrapping_add(array_values_off(b)) as i64
            ));
            s.push_str(&seq_lock(pid, b.kind == MapKind::PerThreadArray));
            s.push_str(&copy("%rd3", "%rd17", b.value_size as u64, "v"));
            s.push_str(SEQ_UNLOCK);
            s.push_str("\tmov.b64 %rd0, 0;\n");
            s
        }
        MapKind::Hash => {
            let geo = hash_geometry(b);
            let mut s = String::from(FLAGS_CHECK);
            s.push_str(&hash_find(b, Some(pid), g.site.key, g.site.frame));
            // Found: update in place under the slot's seqlock.
            s.push_str("$Lfound:\n\tmov.b64 %rd0, -17;\n\tsetp.eq.u64 %p1, %rd4, 1;\n\t@%p1 bra $Lunlock;\n\tadd.s64 %rd11, %rd7, 8;\n");
            s.push_str(&seq_lock(pid, false));
            s.push_str(&fill("\tadd.s64 %rd17, %rd7, @VOFF@;\n", &geo));
            s.push_str(&copy("%rd3", "%rd17", b.value_size as u64, "u"));
            s.push_str(SEQ_UNLOCK);
            s.push_str("\tmov.b64 %rd0, 0;\n\tbra.uni $Lunlock;\n");
            // Not found: reserve a unit of count, claim a slot, fill it, publish LIVE.
            let pidw = (pid as i64) << 32;
            s.push_str(&fill(
                "$Lnotfound:
	mov.b64 %rd0, -2;
	setp.eq.u64 %p1, %rd4, 2;
	@%p1 bra $Lunlock;
	mov.b64 %rd0, -7;
	mov.b64 %rd33, @COUNT@;
$Lrc:
	ld.relaxed.sys.u64 %rd31, [%rd33];
	setp.ge.u64 %p2, %rd31, @MAX@;
	@%p2 bra $Lunlock;
	add.s64 %rd32, %rd31, 1;
	atom.relaxed.sys.cas.b64 %rd34, [%rd33], %rd31, %rd32;
	setp.ne.u64 %p2, %rd34, %rd31;
	@%p2 bra $Lrc;
	mov.b64 %rd24, 0;
$Lcl:
	setp.ge.u64 %p3, %rd24, @SLOTS@;
	@%p3 bra $Lnoslot;
	add.s64 %rd25, %rd6, %rd24;
	and.b64 %rd25, %rd25, @SMASK@;
	mul.lo.s64 %rd7, %rd25, @SSIZE@;
	add.s64 %rd7, %rd7, @SLOTBASE@;
	ld.relaxed.sys.u64 %rd8, [%rd7];
$Lcw:
	and.b64 %rd26, %rd8, 3;
	setp.eq.u64 %p3, %rd26, 0;
	setp.eq.u64 %p4, %rd26, 3;
	or.pred %p3, %p3, %p4;
	@!%p3 bra $Lcn;
	and.b64 %rd35, %rd8, 4294967292;
	add.s64 %rd35, %rd35, 4;
	and.b64 %rd35, %rd35, 4294967292;
	or.b64 %rd35, %rd35, @PIDW1@;
	atom.acquire.sys.cas.b64 %rd36, [%rd7], %rd8, %rd35;
	setp.eq.u64 %p3, %rd36, %rd8;
	@%p3 bra $Lclaimed;
	mov.b64 %rd8, %rd36;
	bra.uni $Lcw;
$Lcn:
	add.s64 %rd24, %rd24, 1;
	bra.uni $Lcl;
$Lnoslot:
	mov.b64 %rd33, @COUNT@;
	atom.relaxed.sys.add.u64 %rd34, [%rd33], -1;
	bra.uni $Lunlock;
$Lclaimed:
	fence.acq_rel.sys;
	ld.relaxed.sys.u64 %rd37, [%rd7+8];
	and.b64 %rd37, %rd37, 4294967295;
	and.b64 %rd38, %rd37, 1;
	add.s64 %rd37, %rd37, %rd38;
	and.b64 %rd37, %rd37, 4294967295;
	st.relaxed.sys.u64 [%rd7+8], %rd37;
	add.s64 %rd17, %rd7, 16;
",
                &[geo.as_slice(), &[("PIDW1", pidw | 1)]].concat(),
            ));
            s.push_str(&copy("%rd2", "%rd17", b.key_size as u64, "k"));
            s.push_str(&fill("\tadd.s64 %rd17, %rd7, @VOFF@;\n", &geo));
            s.push_str(&copy("%rd3", "%rd17", b.value_size as u64, "n"));
            s.push_str("\tand.b64 %rd35, %rd35, 4294967292;\n\tor.b64 %rd35, %rd35, 2;\n\tst.release.sys.u64 [%rd7], %rd35;\n\tmov.b64 %rd0, 0;\n");
            s.push_str("$Lunlock:\n");
            s.push_str(&pid_unlock("%rd10"));
            s
        }
        MapKind::RingBuf => "\tmov.b64 %rd0, -22;\n".into(),
    }
}

fn map_delete_local(g: &Gen) -> String {
    let b = map_of(g);
    match b.kind {
        MapKind::Array | MapKind::PerThreadArray | MapKind::RingBuf => {
            "\tmov.b64 %rd0, -22;\n".into()
        }
        MapKind::Hash => {
            let mut s = hash_find(b, Some(g.opts.lock_pid), g.site.key, g.site.frame);
            s.push_str(&fill(
                "$Lnotfound:
	mov.b64 %rd0, -2;
	bra.uni $Lunlock;
$Lfound:
	ld.relaxed.sys.u64 %rd8, [%rd7];
	and.b64 %rd8, %rd8, 4294967292;
	or.b64 %rd8, %rd8, 3;
	st.release.sys.u64 [%rd7], %rd8;
	mov.b64 %rd33, @COUNT@;
	atom.relaxed.sys.add.u64 %rd34, [%rd33], -1;
	mov.b64 %rd0, 0;
$Lunlock:
",
                &hash_geometry(b),
            ));
            s.push_str(&pid_unlock("%rd10"));
            s
        }
    }
}

/// Ring buffer reservation of `%rd2` bytes under the producer lock. Record data address in
/// `%rd0`; failures jump to `$Lbig` (record too large) or `$Lfull` (no room, lock released).
fn rb_reserve(b: &MapBinding, pid: u32) -> String {
    let size = b.max_entries as i64;
    let base = b.base_addr as i64;
    let mut s = format!(
        "\tsetp.ge.u64 %p1, %rd2, 1073741824;\n\t@%p1 bra $Lbig;\n\tadd.s64 %rd6, %rd2, 15;\n\tand.b64 %rd6, %rd6, -8;\n\tsetp.gt.u64 %p1, %rd6, {half};\n\t@%p1 bra $Lbig;\n\tmov.b64 %rd10, {lock};\n",
        half = size / 2,
        lock = base + 128
    );
    s.push_str(&pid_lock("%rd10", pid, "r"));
    s.push_str(&format!(
        "\tld.relaxed.sys.u64 %rd7, [%rd10+8];
	ld.acquire.sys.u64 %rd8, [%rd10+136];
	and.b64 %rd11, %rd7, {mask};
	add.s64 %rd12, %rd11, %rd6;
	mov.b64 %rd13, 0;
	setp.gt.u64 %p2, %rd12, {size};
	@%p2 sub.s64 %rd13, {size}, %rd11;
	sub.s64 %rd14, %rd7, %rd8;
	add.s64 %rd14, %rd14, %rd13;
	add.s64 %rd14, %rd14, %rd6;
	setp.gt.u64 %p3, %rd14, {size};
	@%p3 bra $Lfullu;
	@!%p2 bra $Lnopad;
	add.s64 %rd15, %rd11, {data};
	mov.b32 %r1, 0;
	st.relaxed.sys.u32 [%rd15+4], %r1;
	cvt.u32.u64 %r2, %rd13;
	sub.s32 %r2, %r2, 8;
	or.b32 %r2, %r2, 1073741824;
	st.relaxed.sys.u32 [%rd15], %r2;
	add.s64 %rd7, %rd7, %rd13;
$Lnopad:
	and.b64 %rd11, %rd7, {mask};
	add.s64 %rd15, %rd11, {data};
	mov.b32 %r1, {pid};
	st.relaxed.sys.u32 [%rd15+4], %r1;
	cvt.u32.u64 %r2, %rd2;
	or.b32 %r2, %r2, -2147483648;
	st.relaxed.sys.u32 [%rd15], %r2;
	add.s64 %rd16, %rd7, %rd6;
	st.release.sys.u64 [%rd10+8], %rd16;
	add.s64 %rd0, %rd15, 8;
	st.release.sys.u32 [%rd10], 0;
	bra.uni $Lreserved;
$Lfullu:
	st.release.sys.u32 [%rd10], 0;
	bra.uni $Lfull;
$Lreserved:
",
        mask = size - 1,
        data = base + 384,
    ));
    s
}

fn ringbuf_reserve(g: &Gen) -> String {
    let b = map_of(g);
    let mut s = String::from("\tsetp.ne.u64 %p1, %rd3, 0;\n\t@%p1 bra $Ldone;\n");
    s.push_str(&rb_reserve(b, g.opts.lock_pid));
    s.push_str("\tbra.uni $Ldone;\n$Lbig:\n$Lfull:\n\tmov.b64 %rd0, 0;\n");
    s
}

fn ringbuf_output(g: &Gen) -> String {
    let b = map_of(g);
    // r1 map, r2 data, r3 size, r4 flags; reserve takes the size in %rd2.
    let mut s = String::from(
        "\tmov.b64 %rd0, -22;\n\tand.b64 %rd5, %rd4, -4;\n\tsetp.ne.u64 %p1, %rd5, 0;\n\t@%p1 bra $Ldone;\n\tmov.b64 %rd18, %rd2;\n\tmov.b64 %rd2, %rd3;\n",
    );
    s.push_str(&rb_reserve(b, g.opts.lock_pid));
    s.push_str("\tmov.b64 %rd19, %rd0;\n");
    s.push_str(&copy("%rd18", "%rd19", 0, "o").replace(
        "setp.ge.u64 %p10, %rd40, 0;",
        "setp.ge.u64 %p10, %rd40, %rd3;",
    ));
    s.push_str("\tld.relaxed.sys.u32 %r3, [%rd19+-8];\n\tand.b32 %r3, %r3, 1073741823;\n\tst.release.sys.u32 [%rd19+-8], %r3;\n\tmov.b64 %rd0, 0;\n\tbra.uni $Ldone;\n$Lbig:\n\tmov.b64 %rd0, -7;\n\tbra.uni $Ldone;\n$Lfull:\n\tmov.b64 %rd0, -11;\n");
    s
}

fn ringbuf_commit(discard: bool) -> String {
    format!(
        "\tld.relaxed.sys.u32 %r3, [%rd1+-8];\n\tand.b32 %r3, %r3, 1073741823;\n{}\tst.release.sys.u32 [%rd1+-8], %r3;\n",
        if discard {
            "\tor.b32 %r3, %r3, 1073741824;\n"
        } else {
            ""
        }
    )
}

fn ringbuf_submit(_: &Gen) -> String {
    ringbuf_commit(false)
}

fn ringbuf_discard(_: &Gen) -> String {
    ringbuf_commit(true)
}

fn globaltimer(_: &Gen) -> String {
    "\tmov.u64 %rd0, %globaltimer;\n".into()
}

/// Helper 520: wait until `%globaltimer` reaches r1 (clamped to 1 s ahead); r2 bit 0: spin
/// only, else `nanosleep` half of what is left while more than 1 µs is left. r0: the time
/// it stopped.
fn wait_until(_: &Gen) -> String {
    "\tmov.u64 %rd3, %globaltimer;\n\tadd.u64 %rd4, %rd3, 1000000000;\n\tmin.u64 %rd1, %rd1, %rd4;\n\tand.b64 %rd5, %rd2, 1;\n\tsetp.ne.u64 %p2, %rd5, 0;\n$Lwt:\n\tmov.u64 %rd0, %globaltimer;\n\tsetp.ge.u64 %p1, %rd0, %rd1;\n\t@%p1 bra $Lwtd;\n\t@%p2 bra $Lwt;\n\tsub.u64 %rd6, %rd1, %rd0;\n\tsetp.le.u64 %p3, %rd6, 1000;\n\t@%p3 bra $Lwt;\n\tshr.u64 %rd6, %rd6, 1;\n\tmin.u64 %rd6, %rd6, 1000000;\n\tcvt.u32.u64 %r1, %rd6;\n\tnanosleep.u32 %r1;\n\tbra.uni $Lwt;\n$Lwtd:\n".into()
}

fn xyz(reg: &str) -> String {
    let mut s = String::new();
    for (i, c) in ["x", "y", "z"].iter().enumerate() {
        let a = i + 1;
        s.push_str(&format!(
            "\tmov.u32 %r{a}, {reg}.{c};\n\tcvt.u64.u32 %rd{t}, %r{a};\n\tsetp.ne.u64 %p{a}, %rd{a}, 0;\n\t@%p{a} st.u64 [%rd{a}], %rd{t};\n",
            t = 10 + a
        ));
    }
    s
}

fn prandom(_: &Gen) -> String {
    format!(
        "{GTID}\tand.b64 %rd10, %rd9, 4095;\n\tshl.b64 %rd10, %rd10, 3;\n\tmov.u64 %rd11, bpf_prandom_state;\n\tadd.s64 %rd10, %rd10, %rd11;\n\tld.global.u64 %rd12, [%rd10];\n\tsetp.ne.u64 %p1, %rd12, 0;\n\t@%p1 bra $Lseeded;\n\tmov.u64 %rd12, %globaltimer;\n\tmul.lo.s64 %rd13, %rd9, -7046029254386353131;\n\txor.b64 %rd12, %rd12, %rd13;\n\tor.b64 %rd12, %rd12, 1;\n$Lseeded:\n\tshl.b64 %rd13, %rd12, 13;\n\txor.b64 %rd12, %rd12, %rd13;\n\tshr.u64 %rd13, %rd12, 7;\n\txor.b64 %rd12, %rd12, %rd13;\n\tshl.b64 %rd13, %rd12, 17;\n\txor.b64 %rd12, %rd12, %rd13;\n\tst.global.u64 [%rd10], %rd12;\n\tshr.u64 %rd0, %rd12, 32;\n"
    )
}

/// Writes one trace record: helper id, fmt address `%rd1`, fmt_len `len`, args `a`.
fn trace_record(g: &Gen, id: i32, len: &str, args: [&str; 3]) -> String {
    if g.opts.trace_buf == 0 {
        return "\t// no trace buffer bound: dropped\n".into();
    }
    let tb = g.opts.trace_buf as i64;
    format!(
        "{GTID}\tmov.b64 %rd10, {tb};
	atom.relaxed.sys.add.u64 %rd11, [%rd10], 1;
	ld.relaxed.sys.u64 %rd12, [%rd10+8];
	setp.eq.u64 %p1, %rd12, 0;
	@%p1 bra $Ldone;
	sub.s64 %rd12, %rd12, 1;
	and.b64 %rd13, %rd11, %rd12;
	shl.b64 %rd13, %rd13, 6;
	add.s64 %rd13, %rd13, %rd10;
	add.s64 %rd13, %rd13, 64;
	mov.b32 %r1, {id};
	st.relaxed.sys.u32 [%rd13+8], %r1;
	cvt.u32.u64 %r2, {len};
	st.relaxed.sys.u32 [%rd13+12], %r2;
	st.relaxed.sys.u64 [%rd13+16], %rd1;
	st.relaxed.sys.u64 [%rd13+24], {a0};
	st.relaxed.sys.u64 [%rd13+32], {a1};
	st.relaxed.sys.u64 [%rd13+40], {a2};
	st.relaxed.sys.u64 [%rd13+48], %rd9;
	mov.u64 %rd14, %globaltimer;
	st.relaxed.sys.u64 [%rd13+56], %rd14;
	add.s64 %rd15, %rd11, 1;
	st.release.sys.u64 [%rd13], %rd15;
",
        a0 = args[0],
        a1 = args[1],
        a2 = args[2]
    )
}

fn trace_printk(g: &Gen) -> String {
    trace_record(g, h::TRACE_PRINTK, "%rd2", ["%rd3", "%rd4", "%rd5"])
}

fn puts(g: &Gen) -> String {
    let mut s = String::from("\tmov.b64 %rd2, 0;\n");
    s.push_str(&trace_record(g, h::PUTS, "%rd2", ["%rd2", "%rd2", "%rd2"]));
    s
}
