//! Maps as the interpreter sees them: the [`MapOps`] trait and the in-process maps.
//!
//! The interpreter only ever talks to a map through [`MapOps`], in raw bytes, so the same
//! program runs against in-process storage (this module), shared memory, or a GPU backend.
//! A value pointer returned by [`MapOps::lookup`] stays valid for the map's lifetime, and
//! [`MapOps::regions`] names the address ranges such pointers fall into, which is what the
//! interpreter's memory checks allow. As in the kernel, programs on several threads access
//! value memory through raw pointers without locks; only the map's own bookkeeping (hash
//! index, ring buffer positions) is synchronised.
//!
//! | kind             | storage                                 | key            | module      |
//! |------------------|-----------------------------------------|----------------|-------------|
//! | `Array`          | `max_entries` values, zeroed or `init`   | `u32` index    | [`array`](mod@array)   |
//! | `PerThreadArray` | one array per thread (`thread` selects) | `u32` index    | [`array`](mod@array)   |
//! | `Hash`           | preallocated value slab + locked index  | `key_size` raw | [`hash`]    |
//! | `RingBuf`        | power-of-two data area, 8-byte headers  | none           | [`ringbuf`] |

pub mod array;
pub mod hash;
mod raw;
pub mod ringbuf;

use crate::program::{MapDef, MapKind};
use std::ptr::NonNull;
use std::sync::Arc;

/// `BPF_ANY`: create or update.
pub const BPF_ANY: u64 = 0;
/// `BPF_NOEXIST`: create only.
pub const BPF_NOEXIST: u64 = 1;
/// `BPF_EXIST`: update only.
pub const BPF_EXIST: u64 = 2;

/// A failed map operation, with the errno the helper returns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// No such key (`-ENOENT`).
    #[error("no such element")]
    NotFound,
    /// The key exists and `BPF_NOEXIST` was asked for (`-EEXIST`).
    #[error("element already exists")]
    Exists,
    /// The map is full, or an index or size is beyond its capacity (`-E2BIG`).
    #[error("{0}")]
    TooBig(String),
    /// A ring buffer has no room right now (`-EAGAIN`, as `bpf_ringbuf_output` in Linux).
    #[error("ring buffer full")]
    Again,
    /// Out of memory while creating storage (`-ENOMEM`).
    #[error("out of memory: {0}")]
    NoMem(String),
    /// A bad argument: flags, key or value sizes, a bad definition (`-EINVAL`).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The operation does not apply to this map kind (`-EOPNOTSUPP`).
    #[error("operation not supported: {0}")]
    NotSupported(String),
}

impl MapError {
    /// The negative errno a helper returns for this error.
    pub fn errno(&self) -> i64 {
        match self {
            MapError::NotFound => -2,
            MapError::Exists => -17,
            MapError::TooBig(_) => -7,
            MapError::Again => -11,
            MapError::NoMem(_) => -12,
            MapError::Invalid(_) => -22,
            MapError::NotSupported(_) => -95,
        }
    }
}

/// A live map, as the interpreter (and tools) use it.
///
/// Everything is raw bytes. Value pointers must stay valid (and inside [`MapOps::regions`])
/// for as long as the map lives; a deleted hash entry's storage may be reused but never
/// freed.
pub trait MapOps: Send + Sync {
    /// The definition.
    fn def(&self) -> &MapDef;

    /// The value storage for `key`, or `None` when absent. `thread` selects the slot set of
    /// per-thread maps and is ignored by the others.
    fn lookup(&self, key: &[u8], thread: usize) -> Option<NonNull<u8>>;

    /// Creates or updates `key` with `value` under `flags` (`BPF_ANY`, `BPF_NOEXIST`,
    /// `BPF_EXIST`).
    fn update(&self, key: &[u8], value: &[u8], flags: u64, thread: usize) -> Result<(), MapError>;

    /// Deletes `key`.
    fn delete(&self, key: &[u8]) -> Result<(), MapError>;

    /// Reserves `size` bytes of a ring buffer record; `None` when full or not a ring buffer.
    fn ringbuf_reserve(&self, size: u64) -> Option<NonNull<u8>> {
        let _ = size;
        None
    }

    /// Submits (`discard == false`) or discards a record from [`MapOps::ringbuf_reserve`].
    /// Pointers that are not live reservations are ignored.
    fn ringbuf_commit(&self, ptr: NonNull<u8>, discard: bool) {
        let _ = (ptr, discard);
    }

    /// Copies `data` into a new ring buffer record.
    fn ringbuf_output(&self, data: &[u8], flags: u64) -> Result<(), MapError> {
        let _ = (data, flags);
        Err(MapError::NotSupported(format!(
            "ringbuf_output on {:?} map `{}`",
            self.def().kind,
            self.def().name
        )))
    }

    /// Address ranges `(start, len)` where this map's value pointers point.
    fn regions(&self) -> Vec<(usize, usize)>;

    /// For an array whose values all threads share: `(address of value 0, stride,
    /// entries)`, such that `lookup(k)` is `value 0 + k * stride` for every `k < entries`
    /// and `None` otherwise. Native code uses it to look up without a call; `None` (the
    /// default) makes it call [`MapOps::lookup`].
    fn array_layout(&self) -> Option<(usize, usize, u32)> {
        None
    }

    /// Every `(key, value)` pair, for dumps. Per-thread maps give the values of all threads
    /// concatenated, thread 0 first. Ring buffers give nothing.
    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)>;

    /// Consumes every submitted ring buffer record, in order, skipping discarded ones.
    fn drain_ringbuf(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }
}

/// Largest value size accepted (as Linux's `KMALLOC_MAX_SIZE`-ish bound, kept modest).
pub const MAX_VALUE_SIZE: u32 = 1 << 20;
/// Largest total storage one map may ask for, in bytes.
pub const MAX_MAP_BYTES: u64 = 1 << 32;

/// Creates in-process storage for a map definition; `threads` is the slot-set count of
/// per-thread arrays (at least 1).
pub fn create_local(def: &MapDef, threads: usize) -> Result<Arc<dyn MapOps>, MapError> {
    Ok(match def.kind {
        MapKind::Array => Arc::new(array::ArrayMap::new(def, 1)?),
        MapKind::PerThreadArray => Arc::new(array::ArrayMap::new(def, threads)?),
        MapKind::Hash => Arc::new(hash::HashMap::new(def)?),
        MapKind::RingBuf => Arc::new(ringbuf::RingBuf::new(def)?),
    })
}

/// Rounds `n` up to a multiple of 8.
pub(crate) fn round8(n: u64) -> u64 {
    (n + 7) & !7
}
