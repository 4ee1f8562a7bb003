//! A zeroed, 8-byte aligned heap buffer with a stable address, written through raw pointers.
//!
//! Map storage is shared by many interpreter threads that write values through raw pointers
//! (exactly like BPF programs do in the kernel), so it is not a Rust slice owned by anyone.

use super::MapError;
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

/// Owned raw storage.
pub(crate) struct RawBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer is plain bytes with no thread affinity; concurrent access through the
// pointers it hands out is the program's business, as for kernel map memory.
unsafe impl Send for RawBuf {}
// SAFETY: as above; `&RawBuf` only exposes the address.
unsafe impl Sync for RawBuf {}

impl RawBuf {
    /// A zeroed buffer of `len` bytes (at least 8).
    pub(crate) fn zeroed(len: u64) -> Result<RawBuf, MapError> {
        if len > super::MAX_MAP_BYTES {
            return Err(MapError::TooBig(format!(
                "map needs {len} bytes, more than the limit of {}",
                super::MAX_MAP_BYTES
            )));
        }
        let len = usize::try_from(len.max(8)).map_err(|_| MapError::NoMem("size".into()))?;
        let layout = Layout::from_size_align(len, 8)
            .map_err(|e| MapError::Invalid(format!("layout: {e}")))?;
        // SAFETY: layout has non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(|| MapError::NoMem(format!("{len} bytes")))?;
        Ok(RawBuf { ptr, layout })
    }

    /// Start address.
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }

    /// Pointer to byte `off` (`off == len` gives the one-past-the-end pointer of an empty
    /// record); the caller keeps `off` in bounds.
    pub(crate) fn at(&self, off: usize) -> NonNull<u8> {
        debug_assert!(off <= self.len());
        // SAFETY: callers pass offsets inside the allocation or one past its end.
        unsafe { self.ptr.add(off) }
    }

    /// Copies `src` to byte `off`.
    pub(crate) fn write(&self, off: usize, src: &[u8]) {
        assert!(off + src.len() <= self.len(), "RawBuf write out of bounds");
        // SAFETY: bounds checked above; src cannot overlap our private allocation unless the
        // caller passes a pointer into the map itself, which `copy` (memmove) tolerates.
        unsafe { std::ptr::copy(src.as_ptr(), self.ptr.as_ptr().add(off), src.len()) }
    }

    /// Copies `len` bytes from byte `off`.
    pub(crate) fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len(), "RawBuf read out of bounds");
        let mut v = vec![0u8; len];
        // SAFETY: bounds checked above; v is a fresh allocation.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), v.as_mut_ptr(), len) }
        v
    }
}

impl Drop for RawBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
