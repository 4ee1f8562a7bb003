//! `trace --mem-trace FILE`: every probed access appends a 32-byte record to a ring in GPU
//! memory, which the shim drains into FILE.
//!
//! ```text
//! device:  STRIPES sub-rings of cap/STRIPES 32-byte records, one per SM (%smid % STRIPES),
//!          each with a 256-byte control block: head @0 (reserved), tail @64 (drained),
//!          drops @128                          (one cuMemAlloc each, in the app's context)
//!   a warp's leader reserves its lanes' slots with one atomic on its SM's head; a lane
//!   writes its record if idx - tail < cap/STRIPES, else the warp counts it in drops (the
//!   kernel never waits; SMs never contend on one counter)
//! host:    every flush (--interval), at exit and before the context dies: copy head,
//!          copy [tail, head) out, keep the records whose two sequence fields are their
//!          index (a record still being written stops the drain until the next flush),
//!          append them to FILE, write tail back
//! ```
//!
//! The record, the file header and the control-block offsets are in [`crate::memtrace`].

use crate::memtrace::{
    CTL_BYTES, CTL_DROPS, CTL_HEAD, CTL_TAIL, RECORD, STRIPES, complete_prefix, header,
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
    /// Records the ring holds (a power of two, at least [`STRIPES`] × 1024).
    pub cap: u64,
    tails: Vec<u64>,
    file: std::fs::File,
    stage: Vec<u8>,
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
        let cap = cap.max(STRIPES * 1024).next_power_of_two();
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
        // SAFETY: real driver entries (caller: a context is current); the zero source
        // outlives the synchronised stream.
        unsafe {
            let alloc: driver::MemAlloc = call(Hook::MemAlloc)?;
            let free: driver::MemFree = call(Hook::MemFree)?;
            let htod: driver::MemcpyHtoDAsync = call(Hook::MemcpyHtoDAsync)?;
            let sync: driver::StreamSynchronize = call(Hook::StreamSynchronize)?;
            let (mut ring, mut ctl) = (0u64, 0u64);
            super::hooks::check(
                alloc(&mut ring, cap as usize * RECORD),
                "cuMemAlloc of the trace ring",
            )?;
            let ctl_bytes = CTL_BYTES * STRIPES as usize;
            if let Err(e) = super::hooks::check(alloc(&mut ctl, ctl_bytes), "cuMemAlloc") {
                free(ring);
                return Err(e);
            }
            // The ring's sequence fields start as all-ones: no slot looks complete.
            let ones = vec![0xffu8; (cap as usize * RECORD).min(1 << 24)];
            let mut off = 0usize;
            let total = cap as usize * RECORD;
            let zeros = vec![0u8; ctl_bytes];
            let mut r = htod(ctl, zeros.as_ptr() as *const c_void, ctl_bytes, stream);
            while r == CUDA_SUCCESS && off < total {
                let n = ones.len().min(total - off);
                r = htod(ring + off as u64, ones.as_ptr() as *const c_void, n, stream);
                off += n;
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
            for k in 0..STRIPES as usize {
                let head = word(k * CTL_BYTES + CTL_HEAD as usize);
                let tail = self.tails[k];
                // Reservations past the sub-ring's room were dropped, not written.
                let end = head.min(tail + sub);
                if end <= tail {
                    continue;
                }
                let n = (end - tail) as usize;
                self.stage.resize(n * RECORD, 0);
                let base = self.ring + k as u64 * sub * RECORD as u64;
                let first = (tail % sub) as usize;
                let run1 = n.min(sub as usize - first);
                dtoh(
                    self.stage.as_mut_ptr() as *mut c_void,
                    base + (first * RECORD) as u64,
                    run1 * RECORD,
                    stream,
                );
                if run1 < n {
                    dtoh(
                        self.stage.as_mut_ptr().add(run1 * RECORD) as *mut c_void,
                        base,
                        (n - run1) * RECORD,
                        stream,
                    );
                }
                if sync(stream) != CUDA_SUCCESS {
                    return;
                }
                let done = complete_prefix(&self.stage, tail);
                if done == 0 {
                    continue;
                }
                if self.file.write_all(&self.stage[..done * RECORD]).is_err() {
                    return;
                }
                self.written += done as u64;
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
