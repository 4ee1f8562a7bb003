//! The application's side of the host-only helpers (`ebpf::interp::HostAccess`):
//! `bpf_get_stack(ctx, buf, size, BPF_F_USER_STACK)` and `bpf_probe_read_user`.
//!
//! **Stacks are unwound with the unwind tables** (`.eh_frame`, glibc's `backtrace`, which
//! uses libgcc's unwinder), not by following frame pointers, which `-O2` builds omit. The
//! walk happens in the shim's wrapper, before the probes run (JIT-compiled probe code has
//! no unwind tables, so a walk from inside the helper would stop there), and only for
//! functions whose probes call `get_stack`. The shim's own frames are dropped: the first
//! address is the return address into the code that called the driver function.
//!
//! Addresses print as `symbol+0xoff` when the dynamic symbol table has a symbol for them
//! (`dladdr`; an executable's own functions are there only when it was linked with
//! `-rdynamic`; C++ names demangled, without parameters), else as `module+0xoff` (for
//! example the CUDA runtime's frames when nvcc linked it statically). [`name`] makes that text; the shim reports it to
//! `trace` once per address.
//!
//! `probe_read_user` reads with `process_vm_readv` on the process itself, so an address
//! that is not mapped gives `-EFAULT`, never a fault in the application.

use std::cell::RefCell;
use std::ffi::{CStr, c_int, c_void};

/// Frames kept per walk.
pub const MAX_FRAMES: usize = 64;

unsafe extern "C" {
    /// glibc `<execinfo.h>`.
    fn backtrace(buffer: *mut *mut c_void, size: c_int) -> c_int;
}

thread_local! {
    static STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// The base address of the object holding `addr` (`dladdr`), 0 if none.
fn object_base(addr: usize) -> usize {
    // SAFETY: dladdr only reads loader data; `info` is a plain out-parameter.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(addr as *const c_void, &mut info) == 0 {
            return 0;
        }
        info.dli_fbase as usize
    }
}

/// Walks the calling thread's stack now and keeps it for [`user_stack`]: return addresses
/// outside the shim, innermost first.
pub fn capture() {
    let mut raw = [std::ptr::null_mut::<c_void>(); MAX_FRAMES + 16];
    // SAFETY: `raw` has room for `len` pointers; backtrace writes at most that many.
    let n = unsafe { backtrace(raw.as_mut_ptr(), raw.len() as c_int) }.max(0) as usize;
    let shim = object_base(capture as *const () as usize);
    let frames: Vec<u64> = raw[..n]
        .iter()
        .map(|&p| p as usize)
        .skip_while(|&a| shim != 0 && object_base(a) == shim)
        .take(MAX_FRAMES)
        .map(|a| a as u64)
        .collect();
    // `trace` prints each address by name: tell it each new one once.
    {
        static NAMED: std::sync::Mutex<Option<std::collections::HashSet<u64>>> =
            std::sync::Mutex::new(None);
        let mut named = NAMED.lock().unwrap_or_else(|p| p.into_inner());
        let set = named.get_or_insert_with(Default::default);
        let new: Vec<_> = frames
            .iter()
            .filter(|&&a| set.insert(a))
            .map(|&a| crate::session::ReportLine::HostFunction {
                name: name(a),
                ip: a,
            })
            .collect();
        if !new.is_empty() {
            super::hooks::report(&new);
        }
    }
    let _ = STACK.try_with(|s| *s.borrow_mut() = frames);
}

/// [`ebpf::interp::HostAccess::user_stack`]: the stack [`capture`] took for this call.
pub fn user_stack(out: &mut [u64]) -> usize {
    STACK
        .try_with(|s| {
            let s = s.borrow();
            let n = s.len().min(out.len());
            out[..n].copy_from_slice(&s[..n]);
            n
        })
        .unwrap_or(0)
}

/// [`ebpf::interp::HostAccess::read_user`].
pub fn read_user(addr: u64, out: &mut [u8]) -> bool {
    if out.is_empty() {
        return true;
    }
    let local = libc::iovec {
        iov_base: out.as_mut_ptr() as *mut c_void,
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: out.len(),
    };
    // SAFETY: the kernel copies from this process's address space into `out` (which we
    // own) and reports unmapped addresses as an error instead of faulting.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == out.len() as isize
}

/// The helpers' access to this process.
pub const HOST: ebpf::interp::HostAccess = ebpf::interp::HostAccess {
    user_stack,
    read_user,
};

/// `symbol+0xoff`, else `module+0xoff`, for an address in this process.
pub fn name(addr: u64) -> String {
    // SAFETY: dladdr only reads loader data; the strings it returns live as long as the
    // objects, which stay loaded while we format them.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(addr as *const c_void, &mut info) == 0 {
            return format!("{addr:#x}");
        }
        if !info.dli_sname.is_null() {
            let s = CStr::from_ptr(info.dli_sname).to_string_lossy();
            return format!(
                "{}+{:#x}",
                demangled(&s),
                addr.wrapping_sub(info.dli_saddr as u64)
            );
        }
        let module = if info.dli_fname.is_null() {
            "?".into()
        } else {
            CStr::from_ptr(info.dli_fname)
                .to_string_lossy()
                .into_owned()
        };
        let base = module.rsplit('/').next().unwrap_or(&module).to_string();
        format!("{base}+{:#x}", addr.wrapping_sub(info.dli_fbase as u64))
    }
}

/// A C++ name demangled, without its parameter list (as `trace` prints kernels); other
/// names as they are.
fn demangled(s: &str) -> String {
    let d = crate::probes::demangle(s);
    d.split_once('(').map_or(d.as_str(), |(b, _)| b).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn inner() -> Vec<u64> {
        capture();
        let mut out = [0u64; MAX_FRAMES];
        let n = user_stack(&mut out);
        out[..n].to_vec()
    }

    #[test]
    fn a_capture_starts_at_the_caller_and_reads_are_safe() {
        let s = inner();
        assert!(s.len() >= 2, "{s:?}");
        // In the test binary the shim's code and its callers are one object, so every frame
        // of it is dropped as the shim's: what is left are the thread's frames in libc.
        assert!(s.iter().all(|&a| a != 0));
        let x = 0x1122_3344_5566_7788u64;
        let mut b = [0u8; 8];
        assert!(read_user(&x as *const u64 as u64, &mut b));
        assert_eq!(u64::from_le_bytes(b), x);
        assert!(!read_user(8, &mut b), "address 8 is not mapped");
        assert!(!read_user(u64::MAX - 3, &mut b));
        assert!(name(s[0]).contains("+0x"), "{}", name(s[0]));
        assert_eq!(demangled("_Z12keep_buffersPPv"), "keep_buffers");
        assert_eq!(demangled("main"), "main");
    }
}
