//! Helper functions: ids, names and prototypes, defined once.
//!
//! The verifier checks call arguments against [`HelperProto::args`] and types r0 from
//! [`HelperProto::ret`]; the interpreter implements each id (see `interp::helpers`); the
//! disassembler prints names. Ids 1–133 are the Linux ones; 501–511 are the GPU helpers that
//! bpftime defined (see `include/bpftime_super.h`); 520 (`wait_until(deadline_ns, flags)`)
//! is this project's: it waits until `get_globaltimer` reaches the deadline (at most 1 s
//! ahead) and returns the time it stopped; on the GPU flag bit 0 asks for a pure spin on
//! `%globaltimer`, else it `nanosleep`s while more than 1 µs is left (cxl-sim's delay).
//!
//! `get_stack` (user stacks only) and `probe_read_user` need the application's process:
//! they work in host probes (`uprobe/`), where `trace`'s shim gives the interpreter an
//! [`crate::interp::HostAccess`]; elsewhere `get_stack` returns `-EOPNOTSUPP` and
//! `probe_read_user` `-EFAULT` (with the destination zeroed), as a kernel without the
//! feature would.
//!
//! As in Linux, `trace_printk` declares only its format arguments: r3–r5 carry the values
//! to print and are not checked (a program may leave them unset when the format has none).

/// What a helper argument must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgType {
    /// Not used: the register is not read.
    None,
    /// Any initialized scalar.
    Scalar,
    /// A map pointer (from `ld_imm64` with a map relocation).
    ConstMapPtr,
    /// A pointer to `key_size` readable, initialized bytes (key size of the map argument).
    MapKey,
    /// A pointer to `value_size` readable, initialized bytes (value size of the map argument).
    MapValue,
    /// A pointer to readable, initialized memory whose size is the next argument.
    ReadMem,
    /// A scalar with known bounds, greater than zero: the size of the previous argument.
    ConstSize,
    /// A pointer to `8` writable bytes (an out-parameter of type `u64 *`).
    WriteU64,
    /// A pointer into a read-only global-data map (`.rodata`), at a constant offset, with a
    /// NUL byte before the end of the value.
    ConstStr,
    /// A pointer returned by `ringbuf_reserve`, unmodified, not yet released.
    RingbufMem,
    /// A known constant size for an allocation (ring buffer reserve).
    ConstAllocSize,
    /// The program's ctx pointer, unmodified (`bpf_get_stack`'s first argument).
    Ctx,
    /// A pointer to writable memory whose size is the next argument; the helper fills it
    /// (it need not be initialized before).
    WriteMem,
}

/// What a helper returns in r0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetType {
    /// An integer.
    Scalar,
    /// Nothing useful: r0 is unspecified and must not be read.
    Void,
    /// A pointer to a value of the map in argument 1, or NULL.
    MapValueOrNull,
    /// A pointer to `arg2` bytes of ring buffer memory, or NULL; must be submitted or
    /// discarded before the program exits.
    RingbufMemOrNull,
}

/// The prototype of one helper.
#[derive(Clone, Copy, Debug)]
pub struct HelperProto {
    /// Helper id, the `imm` of `call` (or the value of `callx`'s register).
    pub id: i32,
    /// Name without the `bpf_` prefix.
    pub name: &'static str,
    /// Types of r1..r5.
    pub args: [ArgType; 5],
    /// Type of r0 after the call.
    pub ret: RetType,
    /// Whether the call releases the reference held in r1 (`ringbuf_submit`/`discard`).
    pub releases: bool,
    /// Whether the call ends the program (`exit`, id 507).
    pub terminates: bool,
}

macro_rules! helpers {
    ($($id:literal $konst:ident $name:literal ($($arg:ident),*) -> $ret:ident $(, $flag:ident)?;)*) => {
        $(#[doc = concat!("`bpf_", $name, "`")] pub const $konst: i32 = $id;)*
        /// Every helper this runtime provides.
        pub static HELPERS: &[HelperProto] = &[
            $(HelperProto {
                id: $id,
                name: $name,
                args: pad([$(ArgType::$arg),*]),
                ret: RetType::$ret,
                releases: false $(|| str_eq(stringify!($flag), "releases"))?,
                terminates: false $(|| str_eq(stringify!($flag), "terminates"))?,
            },)*
        ];
    };
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn pad<const N: usize>(a: [ArgType; N]) -> [ArgType; 5] {
    let mut out = [ArgType::None; 5];
    let mut i = 0;
    while i < N {
        out[i] = a[i];
        i += 1;
    }
    out
}

helpers! {
    1 MAP_LOOKUP_ELEM "map_lookup_elem" (ConstMapPtr, MapKey) -> MapValueOrNull;
    2 MAP_UPDATE_ELEM "map_update_elem" (ConstMapPtr, MapKey, MapValue, Scalar) -> Scalar;
    3 MAP_DELETE_ELEM "map_delete_elem" (ConstMapPtr, MapKey) -> Scalar;
    5 KTIME_GET_NS "ktime_get_ns" () -> Scalar;
    6 TRACE_PRINTK "trace_printk" (ReadMem, ConstSize) -> Scalar;
    7 GET_PRANDOM_U32 "get_prandom_u32" () -> Scalar;
    14 GET_CURRENT_PID_TGID "get_current_pid_tgid" () -> Scalar;
    67 GET_STACK "get_stack" (Ctx, WriteMem, ConstSize, Scalar) -> Scalar;
    112 PROBE_READ_USER "probe_read_user" (WriteMem, ConstSize, Scalar) -> Scalar;
    130 RINGBUF_OUTPUT "ringbuf_output" (ConstMapPtr, ReadMem, ConstSize, Scalar) -> Scalar;
    131 RINGBUF_RESERVE "ringbuf_reserve" (ConstMapPtr, ConstAllocSize, Scalar) -> RingbufMemOrNull;
    132 RINGBUF_SUBMIT "ringbuf_submit" (RingbufMem, Scalar) -> Void, releases;
    133 RINGBUF_DISCARD "ringbuf_discard" (RingbufMem, Scalar) -> Void, releases;
    501 PUTS "puts" (ConstStr) -> Scalar;
    502 GET_GLOBALTIMER "get_globaltimer" () -> Scalar;
    503 GET_BLOCK_IDX "get_block_idx" (WriteU64, WriteU64, WriteU64) -> Void;
    504 GET_BLOCK_DIM "get_block_dim" (WriteU64, WriteU64, WriteU64) -> Void;
    505 GET_THREAD_IDX "get_thread_idx" (WriteU64, WriteU64, WriteU64) -> Void;
    506 MEMBAR "membar" () -> Void;
    507 EXIT "exit" () -> Void, terminates;
    508 GET_GRID_DIM "get_grid_dim" (WriteU64, WriteU64, WriteU64) -> Void;
    509 GET_SM_ID "get_sm_id" () -> Scalar;
    510 GET_WARP_ID "get_warp_id" () -> Scalar;
    511 GET_LANE_ID "get_lane_id" () -> Scalar;
    520 WAIT_UNTIL "wait_until" (Scalar, Scalar) -> Scalar;
    521 MEMBAR_GPU "membar_gpu" () -> Void;
}

/// Helpers that need the application's process (host probes); the GPU has none of them.
pub const HOST_ONLY: &[i32] = &[GET_STACK, PROBE_READ_USER, GET_CURRENT_PID_TGID];

/// Helpers whose answer says where the program runs (the GPU thread's block, thread, grid,
/// SM, warp or lane): a program that calls one gets other values on the host than on the
/// GPU, so the CUDA backend never lets the host stand in for the GPU on its jobs.
pub const PLACE_DEPENDENT: &[i32] = &[
    GET_BLOCK_IDX,
    GET_BLOCK_DIM,
    GET_THREAD_IDX,
    GET_GRID_DIM,
    GET_SM_ID,
    GET_WARP_ID,
    GET_LANE_ID,
];

/// The prototype of helper `id`, if this runtime has it.
pub fn proto(id: i32) -> Option<&'static HelperProto> {
    HELPERS.iter().find(|h| h.id == id)
}

/// The helper id a `callx` calls when its register holds `v`: the register's value read as a
/// signed 64-bit number, when it fits in 32 bits (the width of `call`'s `imm`). `None`: no
/// helper can have that id.
pub fn callx_id(v: u64) -> Option<i32> {
    i32::try_from(v as i64).ok()
}

/// The error of a call of a helper this runtime does not have (`id` as the program gave it:
/// `call`'s `imm`, or `callx`'s register as a signed number). One text for every engine.
pub fn unknown_helper_message(id: i64) -> String {
    format!("unknown helper id {id}")
}

/// The prototype of the helper called `name` (without `bpf_`).
pub fn by_name(name: &str) -> Option<&'static HelperProto> {
    HELPERS.iter().find(|h| h.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_lookup() {
        assert!(proto(RINGBUF_SUBMIT).unwrap().releases);
        assert!(proto(RINGBUF_DISCARD).unwrap().releases);
        assert!(!proto(RINGBUF_RESERVE).unwrap().releases);
        assert!(proto(EXIT).unwrap().terminates);
        assert!(!proto(MEMBAR).unwrap().terminates);
        assert_eq!(by_name("get_lane_id").unwrap().id, 511);
        assert!(proto(4).is_none());
    }

    #[test]
    fn callx_ids_are_signed_32_bit_values() {
        assert_eq!(callx_id(5), Some(5));
        assert_eq!(callx_id(u64::MAX), Some(-1));
        assert_eq!(callx_id(i32::MAX as u64), Some(i32::MAX));
        assert_eq!(callx_id(1 << 31), None);
        assert_eq!(callx_id(1 << 32 | 5), None);
        assert_eq!(
            unknown_helper_message(1 << 32),
            "unknown helper id 4294967296"
        );
    }
}
