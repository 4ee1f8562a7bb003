//! `trace --mem-trace FILE`: every probed access appends a 32-byte record to a ring in GPU
//! memory, which the shim drains into FILE.
//!
//! ```text
//! device:  STRIPES sub-rings of cap/STRIPES 32-byte records, one per SM (%smid % STRIPES),
//!          then two u64 hole marks per slot; a 256-byte control block per sub-ring:
//!          head @0 (reserved), tail @64 (drained), drops @128
//!                                      (one cuMemAlloc each, in the app's context)
//!   a warp's leader reserves its lanes' slots with one atomic on its SM's head when the
//!   ring has room, else its lanes count themselves dropped; a lane that raced past the
//!   room marks its index a hole (the kernel never waits; SMs never contend on one counter)
//! host:    every flush (--interval), at exit and before the context dies: copy head,
//!          copy the slots [tail, head) out (at most a sub-ring), keep the complete
//!          records, skip the marked holes (their marks copied only when needed), stop at
//!          a record still being written until the next flush; append the records to
//!          FILE, write tail back
//! ```
//!
//! The protocol and why no index is lost are in [`crate::memtrace`].
//!
//! The record, the file header and the control-block offsets are in [`crate::memtrace`].

use crate::memtrace::{
    CTL_BYTES, CTL_DROPS, CTL_HEAD, CTL_TAIL, MIN_SUB, RECORD, STRIPES, Slots, TraceRing,
    drain_one, header,
};

use super::driver::{self, CUDA_SUCCESS, Handle, Hook};
use super::hooks::fn_of as call;
use std::ffi::c_void;
use std::io::Write;

/// The device ring of one context, and where it drains to.
pub struct Ring {
    /// Device address of the ring.
    pub ring: u64,
    /// Device address of the control blocks, [`CTL_BYTES`] apart.
    pub ctl: u64,
    /// Records the ring holds (a power of two, at least [`STRIPES`] × [`MIN_SUB`]).
    pub cap: u64,
    tails: Vec<u64>,
    file: std::fs::File,
    stage: Vec<u8>,
    marks: Vec<u8>,
    out: Vec<u8>,
    /// Records written to the file.
    pub written: u64,
    /// Records dropped, as of the last drain.
    pub drops: u64,
    /// The file written.
    pub path: String,
}

impl Ring {
    /// Allocates a ring of `cap` records (rounded up to a power of two) and its zeroed
    /// control block in the current context, and creates `path` with its header.
    ///
    /// # Safety
    /// A CUDA context must be current; `stream` is a live stream of it.
    pub unsafe fn create(path: &str, cap: u64, stream: Handle) -> Result<Ring, String> {
        let cap = cap.max(STRIPES * MIN_SUB).next_power_of_two();
        // trace creates the file empty; the first process of the app to trace takes it, any
        // other one (a second process using CUDA) writes `FILE.<pid>` instead of clobbering it.
        let taken = std::fs::metadata(path)
            .map(|m| m.len() > 0)
            .unwrap_or(false);
        let path = if taken {
            format!("{path}.{}", std::process::id())
        } else {
            path.to_string()
        };
        let mut file = std::fs::File::create(&path).map_err(|e| format!("create {path}: {e}"))?;
        file.write_all(&header())
            .map_err(|e| format!("write {path}: {e}"))?;
        // SAFETY: real driver entries (caller: a context is current), on device memory
        // just allocated.
        unsafe {
            let alloc: driver::MemAlloc = call(Hook::MemAlloc)?;
            let free: driver::MemFree = call(Hook::MemFree)?;
            let memset: driver::MemsetD8Async = call(Hook::MemsetD8Async)?;
            let sync: driver::StreamSynchronize = call(Hook::StreamSynchronize)?;
            let (mut ring, mut ctl) = (0u64, 0u64);
            // The records, then the hole marks.
            let total = TraceRing {
                ring: 0,
                ctl: 0,
                cap,
            }
            .bytes() as usize;
            super::hooks::check(alloc(&mut ring, total), "cuMemAlloc of the trace ring")?;
            let ctl_bytes = CTL_BYTES * STRIPES as usize;
            if let Err(e) = super::hooks::check(alloc(&mut ctl, ctl_bytes), "cuMemAlloc") {
                free(ring);
                return Err(e);
            }
            // The sequence fields and marks start as all-ones: no slot looks complete or
            // skipped. Set on the device: a ring of gigabytes is ready in milliseconds.
            let mut r = memset(ctl, 0, ctl_bytes, stream);
            if r == CUDA_SUCCESS {
                r = memset(ring, 0xff, total, stream);
            }
            if r != CUDA_SUCCESS || sync(stream) != CUDA_SUCCESS {
                free(ring);
                free(ctl);
                return Err(format!("initialising the trace ring: CUresult {r}"));
            }
            Ok(Ring {
                ring,
                ctl,
                cap,
                tails: vec![0; STRIPES as usize],
                file,
                stage: Vec::new(),
                marks: Vec::new(),
                out: Vec::new(),
                written: 0,
                drops: 0,
                path,
            })
        }
    }

    /// Copies the complete records since the last drain to the file (on `stream`, in the
    /// current context) and hands their slots back to the producers.
    ///
    /// # Safety
    /// The ring's context is current and alive; `stream` belongs to it.
    pub unsafe fn drain(&mut self, stream: Handle) {
        // SAFETY: real driver entries; all host buffers are live locals or `self.stage`,
        // sized for the copies.
        unsafe {
            let (Ok(dtoh), Ok(htod), Ok(sync)) = (
                call::<driver::MemcpyDtoHAsync>(Hook::MemcpyDtoHAsync),
                call::<driver::MemcpyHtoDAsync>(Hook::MemcpyHtoDAsync),
                call::<driver::StreamSynchronize>(Hook::StreamSynchronize),
            ) else {
                return;
            };
            let ctl_bytes = CTL_BYTES * STRIPES as usize;
            let mut ctl = vec![0u8; ctl_bytes];
            dtoh(ctl.as_mut_ptr() as *mut c_void, self.ctl, ctl_bytes, stream);
            if sync(stream) != CUDA_SUCCESS {
                return;
            }
            let word = |o: usize| u64::from_le_bytes(ctl[o..o + 8].try_into().unwrap_or([0; 8]));
            let sub = self.cap / STRIPES;
            self.drops = (0..STRIPES as usize)
                .map(|k| word(k * CTL_BYTES + CTL_DROPS as usize))
                .sum();
            let layout = TraceRing {
                ring: self.ring,
                ctl: self.ctl,
                cap: self.cap,
            };
            for k in 0..STRIPES as usize {
                let head = word(k * CTL_BYTES + CTL_HEAD as usize);
                let tail = self.tails[k];
                let (records, marks) = (
                    self.ring + k as u64 * sub * RECORD as u64,
                    layout.marks_of(k as u64),
                );
                let mut copy = |which: Slots, first: usize, n: usize, dst: &mut [u8]| {
                    let (src, slots, size) = match which {
                        Slots::Records => (records, sub as usize, RECORD),
                        Slots::Marks => (marks, layout.mark_slots() as usize, 8),
                    };
                    // (Inside the block's SAFETY: the runs lie in the ring and in `dst`,
                    // which outlives the synchronisation right after.)
                    copy_slots(dtoh, dst, src, first, n, slots, size, stream);
                    sync(stream) == CUDA_SUCCESS
                };
                let Some(done) = drain_one(
                    &layout,
                    tail,
                    head,
                    &mut copy,
                    &mut self.stage,
                    &mut self.marks,
                    &mut self.out,
                ) else {
                    return;
                };
                if done == 0 {
                    continue;
                }
                if self.file.write_all(&self.out).is_err() {
                    return;
                }
                self.written += (self.out.len() / RECORD) as u64;
                self.tails[k] = tail + done as u64;
                let t = self.tails[k].to_le_bytes();
                htod(
                    self.ctl + (k * CTL_BYTES) as u64 + CTL_TAIL,
                    t.as_ptr() as *const c_void,
                    8,
                    stream,
                );
                sync(stream);
            }
        }
    }
}

/// Copies `n` slots of `size` bytes of a ring of `slots`, from slot `first` on (wrapping),
/// into `dst`, on `stream`.
///
/// # Safety
/// `dtoh` is the driver's; `src` is a device ring of `slots` slots in the current context;
/// `dst` holds `n * size` bytes and outlives the stream's next synchronisation.
#[allow(clippy::too_many_arguments)]
unsafe fn copy_slots(
    dtoh: driver::MemcpyDtoHAsync,
    dst: &mut [u8],
    src: u64,
    first: usize,
    n: usize,
    slots: usize,
    size: usize,
    stream: Handle,
) {
    let run1 = n.min(slots - first);
    // SAFETY: the caller's contract; both runs lie inside `dst` and the ring.
    unsafe {
        dtoh(
            dst.as_mut_ptr() as *mut c_void,
            src + (first * size) as u64,
            run1 * size,
            stream,
        );
        if run1 < n {
            dtoh(
                dst.as_mut_ptr().add(run1 * size) as *mut c_void,
                src,
                (n - run1) * size,
                stream,
            );
        }
    }
}
