//! Host probes on the exported functions of any shared library the application uses:
//! `uprobe/libfoo.so:function` and `uretprobe/libfoo.so:function` (libcudart.so, libc,
//! the application's own libraries). They get the same ctx as the driver probes of
//! [`super::uprobes`] (`pt_regs` first, so libbpf's `BPF_KPROBE` and `PT_REGS_*` macros
//! work), run in the calling thread through the CPU JIT, on the session's maps.
//!
//! | step | how |
//! |------|-----|
//! | find the function | the loaded object whose file name is `libfoo.so` or starts with `libfoo.so.`, or whose path is the one given; `dlopen(RTLD_NOLOAD)` and `dlsym`; for the executable, its symbol tables |
//! | reach its calls | every GOT slot (`R_X86_64_JUMP_SLOT`, `R_X86_64_GLOB_DAT`) of every loaded object that imports the name and resolves it to that function is pointed at a stub; `dlsym` hands out the stub too |
//! | the stub ([`bpft_sym_stubs`]) | saves the argument registers, runs the entry probes on a `pt_regs` of them (`sp` at the return address, so stack arguments are at `sp + 8`, …), and when exit probes exist swaps the return address for the return stub (the real one goes on a per-thread shadow stack); then jumps to the function |
//! | the return stub | saves `rax`, `rdx`, `xmm0`, `xmm1`, runs the exit probes with `ax` = `rax`, and returns to the real return address |
//!
//! All of this is set up by the shim's constructor, before `main`. A library or function
//! that is not there stops the application right there, with an error naming both.
//!
//! Functions of the executable itself (`uprobe/APP:function`, APP its file name or path;
//! also `uprobe/libcudart.so:function` when no libcudart.so is loaded and the executable
//! has the function, as nvcc links cudart statically by default) are found in its symbol
//! tables, local ones included, and reached by a `jmp` written at
//! their entry to a trampoline near the executable; the instructions it covers run from a
//! thunk (only position-independent prologue instructions are moved: anything else is
//! refused by name before `main`).
//!
//! Limits, said where they apply: x86-64 only; a library loaded after start is patched at
//! the next wrapped driver call or `dlsym` after it appears; a library's direct calls to
//! itself are not seen; at most [`MAX_SYMBOLS`] functions; a thread that leaves a probed function with
//! `longjmp` drops its pending exit probes; processes with user shadow stacks (CET) cannot
//! take exit probes (the return address is swapped).

use super::uprobes::{ARG_OFFSETS, AX, HOST_CTX_SIZE, IP, SP};
use jit::cpu::HostProbe;
use std::cell::RefCell;
use std::ffi::{CStr, CString, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Functions that can be probed at once (the number of stubs).
pub const MAX_SYMBOLS: usize = 32;

/// One probed function.
struct Sym {
    lib: String,
    func: String,
    /// Where the stub jumps to run the function: its address, or for a function of the
    /// executable its relocated first instructions ([`patch_entry`]); 0 while its library
    /// is not loaded.
    addr: AtomicU64,
    /// The function's address (the probes' `PT_REGS_IP`).
    ip: AtomicU64,
    /// A function of the executable, reached by a jump written at its entry.
    inline: bool,
    entry: Vec<Arc<HostProbe>>,
    exit: Vec<Arc<HostProbe>>,
    stacks: bool,
}

static SYMS: OnceLock<Vec<Sym>> = OnceLock::new();

/// Symbols whose library was not loaded yet, and what the last look at the loaded objects
/// saw (see [`poll`]).
struct Scan {
    pending: usize,
    /// Objects whose GOT was patched for every resolved symbol (load biases).
    seen: Vec<u64>,
    /// (count, sum of load biases) of the loaded objects at the last look.
    sig: (usize, u64),
    last: Option<std::time::Instant>,
}

static SCAN: Mutex<Scan> = Mutex::new(Scan {
    pending: 0,
    seen: Vec::new(),
    sig: (0, 0),
    last: None,
});
/// Symbol probes exist (the fast test of [`poll`]).
static ACTIVE: AtomicBool = AtomicBool::new(false);

#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    // MAX_SYMBOLS entry stubs of 16 bytes: the symbol's index in r11, then the common part.
    ".pushsection .text.bpft_sym, \"ax\", @progbits",
    ".balign 16",
    ".globl bpft_sym_stubs",
    ".hidden bpft_sym_stubs",
    "bpft_sym_stubs:",
    ".set bpft_sym_i, 0",
    ".rept 32",
    "endbr64",
    "mov r11d, bpft_sym_i",
    "jmp 2f",
    ".balign 16",
    ".set bpft_sym_i, bpft_sym_i + 1",
    ".endr",
    // The common entry: argument registers (and rax, the vector count of a variadic call;
    // r10, a static chain) saved in a 16-byte aligned block.
    "2:",
    "push rbp",
    "mov rbp, rsp",
    "sub rsp, 208",
    "and rsp, -16",
    "mov [rsp], rdi",
    "mov [rsp + 8], rsi",
    "mov [rsp + 16], rdx",
    "mov [rsp + 24], rcx",
    "mov [rsp + 32], r8",
    "mov [rsp + 40], r9",
    "mov [rsp + 48], rax",
    "mov [rsp + 56], r10",
    "movdqu [rsp + 64], xmm0",
    "movdqu [rsp + 80], xmm1",
    "movdqu [rsp + 96], xmm2",
    "movdqu [rsp + 112], xmm3",
    "movdqu [rsp + 128], xmm4",
    "movdqu [rsp + 144], xmm5",
    "movdqu [rsp + 160], xmm6",
    "movdqu [rsp + 176], xmm7",
    "mov edi, r11d",
    "mov rsi, rsp",
    "lea rdx, [rbp + 8]",
    "call {enter}",
    "mov r11, rax",
    "mov rdi, [rsp]",
    "mov rsi, [rsp + 8]",
    "mov rdx, [rsp + 16]",
    "mov rcx, [rsp + 24]",
    "mov r8, [rsp + 32]",
    "mov r9, [rsp + 40]",
    "mov rax, [rsp + 48]",
    "mov r10, [rsp + 56]",
    "movdqu xmm0, [rsp + 64]",
    "movdqu xmm1, [rsp + 80]",
    "movdqu xmm2, [rsp + 96]",
    "movdqu xmm3, [rsp + 112]",
    "movdqu xmm4, [rsp + 128]",
    "movdqu xmm5, [rsp + 144]",
    "movdqu xmm6, [rsp + 160]",
    "movdqu xmm7, [rsp + 176]",
    "mov rsp, rbp",
    "pop rbp",
    "jmp r11",
    // The return stub: the probed function returned here instead of to its caller.
    ".balign 16",
    ".globl bpft_sym_return",
    ".hidden bpft_sym_return",
    "bpft_sym_return:",
    "endbr64",
    "sub rsp, 8",
    "push rbp",
    "mov rbp, rsp",
    "sub rsp, 64",
    "and rsp, -16",
    "mov [rsp], rax",
    "mov [rsp + 8], rdx",
    "movdqu [rsp + 16], xmm0",
    "movdqu [rsp + 32], xmm1",
    "mov rdi, rsp",
    "lea rsi, [rbp + 8]",
    "call {leave}",
    "mov [rbp + 8], rax",
    "mov rax, [rsp]",
    "mov rdx, [rsp + 8]",
    "movdqu xmm0, [rsp + 16]",
    "movdqu xmm1, [rsp + 32]",
    "mov rsp, rbp",
    "pop rbp",
    "ret",
    ".popsection",
    enter = sym bpft_sym_enter,
    leave = sym bpft_sym_leave,
);

#[cfg(target_arch = "x86_64")]
unsafe extern "C" {
    /// The first of the [`MAX_SYMBOLS`] entry stubs, 16 bytes apart.
    fn bpft_sym_stubs();
    /// The return stub.
    fn bpft_sym_return();
}

const _: () = assert!(MAX_SYMBOLS == 32, "the stub table's .rept count");

/// The entry stub of symbol `i`.
#[cfg(target_arch = "x86_64")]
fn stub(i: usize) -> u64 {
    bpft_sym_stubs as *const () as u64 + 16 * i as u64
}

thread_local! {
    /// Calls with exit probes pending: (the return address's slot, the real return
    /// address, the symbol), innermost last.
    static SHADOW: RefCell<Vec<(u64, u64, u32)>> = const { RefCell::new(Vec::new()) };
}

/// The `pt_regs` ctx of a call: arguments from the saved registers, `sp` at the slot of the
/// return address (the stack arguments above it are the caller's, read in place).
fn ctx_of(saved: &[u64; 8], ip: u64, sp: u64) -> [u8; HOST_CTX_SIZE] {
    let mut regs = [0u8; HOST_CTX_SIZE];
    for (v, off) in saved.iter().zip(ARG_OFFSETS) {
        regs[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }
    regs[IP..IP + 8].copy_from_slice(&ip.to_le_bytes());
    regs[SP..SP + 8].copy_from_slice(&sp.to_le_bytes());
    regs
}

/// Called by the entry stub of symbol `i` with the saved registers and the address of the
/// return address's slot; returns the function's address.
///
/// # Safety
/// Called only by the stub: `saved` points to its 8 saved registers, `slot` to the live
/// return address of the call being made.
unsafe extern "C" fn bpft_sym_enter(i: u32, saved: *const [u64; 8], slot: *mut u64) -> u64 {
    let Some(s) = SYMS.get().and_then(|v| v.get(i as usize)) else {
        // Unreachable: stubs are handed out only after SYMS is set. Nothing to run to.
        std::process::abort();
    };
    // SAFETY: the stub's block of saved registers, alive for this call.
    let saved = unsafe { &*saved };
    let addr = s.addr.load(Ordering::Acquire);
    if !s.entry.is_empty() {
        let mut regs = ctx_of(saved, s.ip.load(Ordering::Acquire), slot as u64);
        super::uprobes::run_on(&s.entry, &mut regs, s.stacks);
    }
    #[cfg(target_arch = "x86_64")]
    if !s.exit.is_empty() {
        // SAFETY: `slot` holds this call's return address (the stub's contract).
        let ret = unsafe { slot.read() };
        // A signal handler calling a probed function while this thread is inside its own
        // push or pop finds the stack borrowed: that call runs without exit probes.
        let pushed = SHADOW
            .try_with(|sh| {
                sh.try_borrow_mut()
                    .map(|mut sh| sh.push((slot as u64, ret, i)))
                    .is_ok()
            })
            .unwrap_or(false);
        if pushed {
            // SAFETY: as above; the return stub puts the real address back.
            unsafe { slot.write(bpft_sym_return as *const () as u64) };
        }
    }
    addr
}

/// Called by the return stub with the saved `rax`, `rdx` (and `xmm0`, `xmm1`) and the slot
/// the real return address goes back into; runs the exit probes and returns that address.
///
/// # Safety
/// Called only by the return stub, `saved` pointing to its saved registers.
unsafe extern "C" fn bpft_sym_leave(saved: *const [u64; 2], slot: u64) -> u64 {
    // SAFETY: the return stub's saved registers.
    let rax = unsafe { (*saved)[0] };
    let found = SHADOW.try_with(|sh| {
        let Ok(mut sh) = sh.try_borrow_mut() else {
            return None;
        };
        // Entries below this slot belong to calls a longjmp left: they never return.
        while let Some(&(at, ret, i)) = sh.last() {
            sh.pop();
            if at == slot {
                return Some((ret, i));
            }
        }
        None
    });
    let Ok(Some((ret, i))) = found else {
        // The return address is lost: nothing safe is left to do.
        eprintln!("bpftime-super shim: a probed function returned to an unknown caller");
        std::process::abort();
    };
    if let Some(s) = SYMS.get().and_then(|v| v.get(i as usize)) {
        let mut regs = ctx_of(&[0; 8], s.ip.load(Ordering::Acquire), slot);
        regs[AX..AX + 8].copy_from_slice(&rax.to_le_bytes());
        super::uprobes::run_on(&s.exit, &mut regs, s.stacks);
    }
    ret
}

/// The stub that stands for the function at `f`, if it is probed (for `dlsym`).
pub fn stub_for(f: *mut c_void) -> Option<*mut c_void> {
    #[cfg(target_arch = "x86_64")]
    {
        let syms = SYMS.get()?;
        syms.iter()
            .position(|s| !s.inline && s.addr.load(Ordering::Acquire) == f as u64)
            .map(|i| stub(i) as *mut c_void)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = f;
        None
    }
}

/// A loaded object: its path (empty for the executable), load bias and program headers.
struct Object {
    name: String,
    base: u64,
    phdrs: Vec<libc::Elf64_Phdr>,
}

fn objects() -> Vec<Object> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        out: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid info for this call; `out` is our Vec.
        unsafe {
            let info = &*info;
            let out = &mut *(out as *mut Vec<Object>);
            let name = if info.dlpi_name.is_null() {
                String::new()
            } else {
                CStr::from_ptr(info.dlpi_name)
                    .to_string_lossy()
                    .into_owned()
            };
            let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
            out.push(Object {
                name,
                base: info.dlpi_addr,
                phdrs: phdrs.to_vec(),
            });
        }
        0
    }
    let mut v: Vec<Object> = Vec::new();
    // SAFETY: the callback only reads what the loader hands it, into `v`.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut v as *mut _ as *mut c_void) };
    v
}

/// Whether object `name` is library `lib` (`libfoo.so` matches `libfoo.so.1`; a path
/// matches itself).
fn is_lib(name: &str, lib: &str) -> bool {
    if lib.contains('/') {
        return name == lib;
    }
    let file = name.rsplit('/').next().unwrap_or(name);
    file == lib || file.strip_prefix(lib).is_some_and(|r| r.starts_with('.'))
}

/// The address of `func` in the loaded library `lib`: `Ok(None)` while no such library is
/// loaded, an error when it is and has no such export.
fn find(lib: &str, func: &str, objs: &[Object]) -> Result<Option<u64>, String> {
    let Some(obj) = objs
        .iter()
        .find(|o| !o.name.is_empty() && is_lib(&o.name, lib))
    else {
        return Ok(None);
    };
    let path = CString::new(obj.name.clone()).map_err(|e| e.to_string())?;
    let name = CString::new(func).map_err(|e| e.to_string())?;
    // SAFETY: RTLD_NOLOAD only looks the loaded object up; closed below.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        return Err(format!("uprobe `{lib}:{func}`: cannot open {}", obj.name));
    }
    // SAFETY: a live handle and a NUL-terminated name; the real dlsym (not ours).
    let f = unsafe { super::driver::real_dlsym(h, name.as_ptr()) };
    // SAFETY: the handle from dlopen above.
    unsafe { libc::dlclose(h) };
    if f.is_null() {
        return Err(format!(
            "uprobe `{lib}:{func}`: {} has no exported function `{func}`",
            obj.name
        ));
    }
    Ok(Some(f as u64))
}

/// The dynamic section's tables of `o`.
struct Dynamic {
    symtab: u64,
    strtab: u64,
    relocs: Vec<(u64, u64)>, // (address, size) of RELA tables
}

fn dynamic(o: &Object) -> Option<Dynamic> {
    let ph = o.phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC)?;
    let mut d = Dynamic {
        symtab: 0,
        strtab: 0,
        relocs: Vec::new(),
    };
    let (mut jmprel, mut pltsz, mut rela, mut relasz) = (0, 0, 0, 0);
    // Elf64_Dyn: a tag and a value, 8 bytes each.
    let mut p = (o.base + ph.p_vaddr) as *const [u64; 2];
    // The loader relocates these pointers in place on x86-64; an unrelocated one (below
    // the load bias) gets the bias added.
    let fix = |v: u64| if v < o.base { v + o.base } else { v };
    loop {
        // SAFETY: PT_DYNAMIC of a loaded object: an array of Elf64_Dyn ending in DT_NULL.
        let [tag, val] = unsafe { p.read() };
        match tag {
            0 => break,
            5 => d.strtab = fix(val), // DT_STRTAB
            6 => d.symtab = fix(val), // DT_SYMTAB
            23 => jmprel = fix(val),  // DT_JMPREL
            2 => pltsz = val,         // DT_PLTRELSZ
            7 => rela = fix(val),     // DT_RELA
            8 => relasz = val,        // DT_RELASZ
            _ => {}
        }
        // SAFETY: still inside the array (DT_NULL not reached).
        p = unsafe { p.add(1) };
    }
    if d.symtab == 0 || d.strtab == 0 {
        return None;
    }
    d.relocs.push((jmprel, pltsz));
    d.relocs.push((rela, relasz));
    Some(d)
}

/// Points every GOT slot of `o` that imports `func` (and holds `addr`, or a lazy stub of
/// this object while the global lookup gives `addr`) at `to`.
fn patch(o: &Object, func: &str, addr: u64, global: u64, to: u64) {
    let Some(d) = dynamic(o) else { return };
    let relro = o
        .phdrs
        .iter()
        .find(|p| p.p_type == libc::PT_GNU_RELRO)
        .map(|p| (o.base + p.p_vaddr, o.base + p.p_vaddr + p.p_memsz));
    let in_object = |v: u64| {
        o.phdrs.iter().any(|p| {
            p.p_type == libc::PT_LOAD
                && v >= o.base + p.p_vaddr
                && v < o.base + p.p_vaddr + p.p_memsz
        })
    };
    for &(table, size) in &d.relocs {
        if table == 0 {
            continue;
        }
        for k in 0..size / 24 {
            // SAFETY: a RELA table of a loaded object, `size` bytes long.
            let r = unsafe { ((table + 24 * k) as *const libc::Elf64_Rela).read() };
            let kind = (r.r_info & 0xffff_ffff) as u32;
            if kind != 7 && kind != 6 {
                continue; // R_X86_64_JUMP_SLOT, R_X86_64_GLOB_DAT only
            }
            let si = r.r_info >> 32;
            // SAFETY: the symbol table entry the relocation names, and its NUL-terminated
            // name in the string table.
            let name = unsafe {
                let sym = ((d.symtab + 24 * si) as *const libc::Elf64_Sym).read();
                CStr::from_ptr((d.strtab + sym.st_name as u64) as *const libc::c_char)
            };
            if name.to_bytes() != func.as_bytes() {
                continue;
            }
            let at = o.base + r.r_offset;
            // SAFETY: the GOT slot the relocation names, inside the object.
            let cur = unsafe { (at as *const u64).read_volatile() };
            if !(cur == addr || (global == addr && in_object(cur))) {
                continue; // bound to another definition of the name
            }
            let page = at & !4095;
            // SAFETY: the GOT page of a loaded object; made writable for the store, and read
            // only again when it lies in the object's RELRO range (the loader's choice).
            unsafe {
                if libc::mprotect(
                    page as *mut c_void,
                    4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                ) != 0
                {
                    continue;
                }
                (at as *mut u64).write_volatile(to);
                if relro.is_some_and(|(lo, hi)| at >= lo && at < hi) {
                    libc::mprotect(page as *mut c_void, 4096, libc::PROT_READ);
                }
            }
        }
    }
}

/// Sets the symbol probes up (the shim's constructor calls this before `main`). A probe
/// naming a library or a function that is not there ends the process with an error naming
/// both; one that cannot be compiled is reported and left out.
pub fn install() {
    let Ok(Some(cfg)) = crate::session::SessionConfig::from_env() else {
        return;
    };
    if !cfg.symbol_probes {
        return;
    }
    let fail = |what: String| -> ! {
        eprintln!("bpftime-super: {what}");
        super::hooks::report(&[crate::session::ReportLine::Warning { what }]);
        std::process::exit(127);
    };
    if cfg!(not(target_arch = "x86_64")) {
        fail("host probes on library functions need x86-64".into());
    }
    let Some((probes, region_name)) = super::hooks::host_probe_inputs() else {
        return; // the session itself is off (reported by `hooks`)
    };
    let region = match shm_maps::ShmRegion::open(&region_name) {
        Ok(r) => Arc::new(r),
        Err(e) => fail(format!("host probes: region `{region_name}`: {e}")),
    };
    let objs = objects();
    let mut syms: Vec<Sym> = Vec::new();
    // Functions of the executable: (entry, thunk), patched once the stubs can run.
    let mut entries: Vec<Entry> = Vec::new();
    for p in &probes.probes {
        let Some((lib, func)) = &p.host_sym else {
            continue;
        };
        let i = match syms.iter().position(|s| &s.lib == lib && &s.func == func) {
            Some(i) => i,
            None => {
                if syms.len() == MAX_SYMBOLS {
                    fail(format!(
                        "uprobe `{lib}:{func}`: at most {MAX_SYMBOLS} library functions can be probed at once"
                    ));
                }
                let i = syms.len();
                // cudart is linked statically by default (nvcc): with no libcudart.so
                // loaded, its functions are the executable's own.
                let static_cudart = lib.starts_with("libcudart")
                    && !objs
                        .iter()
                        .any(|o| !o.name.is_empty() && is_lib(&o.name, lib))
                    && find_in_exe(lib, func, &objs).is_ok();
                if static_cudart {
                    super::hooks::report(&[crate::session::ReportLine::Warning {
                        what: format!(
                            "uprobe `{lib}:{func}`: no {lib} is loaded; probing the executable's statically linked `{func}`"
                        ),
                    }]);
                }
                let exe = static_cudart || exe_match(lib);
                let found = if exe {
                    find_in_exe(lib, func, &objs).and_then(|f| {
                        near_thunk(i, f, &objs)
                            .map(|e| {
                                let t = e.thunk;
                                entries.push(e);
                                Some(t)
                            })
                            .map_err(|e| format!("uprobe `{lib}:{func}`: {e}"))
                    })
                } else {
                    find(lib, func, &objs)
                };
                let addr = match found {
                    Ok(Some(a)) => a,
                    Ok(None) => {
                        super::hooks::report(&[crate::session::ReportLine::Warning {
                            what: format!(
                                "uprobe `{lib}:{func}`: `{lib}` is not loaded yet; its calls are probed from the first driver call or dlsym after it is"
                            ),
                        }]);
                        0
                    }
                    Err(e) => fail(e),
                };
                let ip = entries.last().filter(|_| exe).map_or(addr, |e| e.f);
                syms.push(Sym {
                    lib: lib.clone(),
                    func: func.clone(),
                    addr: AtomicU64::new(addr),
                    ip: AtomicU64::new(ip),
                    inline: exe,
                    entry: Vec::new(),
                    exit: Vec::new(),
                    stacks: false,
                });
                syms.len() - 1
            }
        };
        match super::uprobes::compile(&probes, p, &region) {
            Ok((hp, walks)) => {
                let s = &mut syms[i];
                s.stacks |= walks;
                if p.site == crate::probes::SiteKind::HostExit {
                    s.exit.push(hp);
                } else {
                    s.entry.push(hp);
                }
            }
            Err(what) => super::hooks::report(&[crate::session::ReportLine::Warning {
                what: format!("host probe `{}` disabled: {what}", p.program.name),
            }]),
        }
    }
    let pending = syms
        .iter()
        .filter(|s| s.addr.load(Ordering::Relaxed) == 0)
        .count();
    if syms.is_empty() || SYMS.set(syms).is_err() {
        return;
    }
    lock_scan().pending = pending;
    #[cfg(target_arch = "x86_64")]
    for e in &entries {
        if let Err(e) = patch_entry(e) {
            fail(e);
        }
    }
    ACTIVE.store(true, Ordering::Release);
    rescan(true, false);
    // The region stays mapped for the probes' maps (they hold offsets into it).
    std::mem::forget(region);
}

fn lock_scan() -> std::sync::MutexGuard<'static, Scan> {
    SCAN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Looks again at the loaded objects when they changed (at most every 10 ms): resolves
/// symbols whose library has appeared, and patches the GOTs of objects not patched yet.
/// The shim calls this from every wrapped driver call and from `dlsym`; it costs an atomic
/// load when there are no symbol probes.
pub fn poll() {
    if ACTIVE.load(Ordering::Relaxed) {
        rescan(false, true);
    }
}

/// [`poll`] without the 10 ms spacing: `dlsym` is rare, and often follows the `dlopen` of
/// the very library a probe waits for.
pub fn poll_now() {
    if ACTIVE.load(Ordering::Relaxed) {
        rescan(false, false);
    }
}

fn rescan(force: bool, spaced: bool) {
    let Ok(mut sc) = SCAN.try_lock() else {
        return; // another thread is at it (or this one, from a probe's helper)
    };
    let now = std::time::Instant::now();
    if spaced
        && sc
            .last
            .is_some_and(|t| now.duration_since(t).as_millis() < 10)
    {
        return;
    }
    sc.last = Some(now);
    let objs = objects();
    let sig = (
        objs.len(),
        objs.iter().fold(0u64, |a, o| a.wrapping_add(o.base)),
    );
    if !force && sig == sc.sig {
        return;
    }
    sc.sig = sig;
    let Some(syms) = SYMS.get() else { return };
    if sc.pending > 0 {
        for s in syms.iter().filter(|s| s.addr.load(Ordering::Relaxed) == 0) {
            match find(&s.lib, &s.func, &objs) {
                Ok(Some(a)) => {
                    s.ip.store(a, Ordering::Release);
                    s.addr.store(a, Ordering::Release);
                    sc.pending -= 1;
                    sc.seen.clear(); // every object may import it: patch them all again
                }
                Ok(None) => {}
                Err(what) => {
                    // The library came with no such export: its probes stay off.
                    super::hooks::report(&[crate::session::ReportLine::Warning { what }]);
                    sc.pending -= 1;
                }
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        // Our own object keeps its real calls (the probes' helpers may call libc).
        let me = own_object(&objs);
        // Per symbol: its address, and what the global lookup gives for its name (a lazy
        // GOT slot is patched only when that is the probed definition).
        let targets: Vec<(usize, u64, u64)> = syms
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.inline) // reached at its entry instead
            .filter_map(|(i, s)| {
                let addr = s.addr.load(Ordering::Acquire);
                (addr != 0).then(|| {
                    let global = CString::new(s.func.as_str()).map_or(0, |c| {
                        // SAFETY: RTLD_DEFAULT lookup of a NUL-terminated name (the real
                        // dlsym).
                        unsafe { super::driver::real_dlsym(libc::RTLD_DEFAULT, c.as_ptr()) as u64 }
                    });
                    (i, addr, global)
                })
            })
            .collect();
        for o in objs.iter().filter(|o| Some(o.base) != me) {
            if sc.seen.contains(&o.base) {
                continue;
            }
            sc.seen.push(o.base);
            for &(i, addr, global) in &targets {
                patch(o, &syms[i].func, addr, global, stub(i));
            }
        }
    }
}

/// Whether `lib` names the executable itself (its path, or its file name).
fn exe_match(lib: &str) -> bool {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return false;
    };
    let exe = exe.display().to_string();
    if lib.contains('/') {
        exe == lib
    } else {
        exe.rsplit('/').next() == Some(lib)
    }
}

/// The address of function `func` of the executable, from its symbol tables (local
/// functions included, as long as it is not stripped).
fn find_in_exe(lib: &str, func: &str, objs: &[Object]) -> Result<u64, String> {
    use object::{Object as _, ObjectSymbol};
    let bytes =
        std::fs::read("/proc/self/exe").map_err(|e| format!("uprobe `{lib}:{func}`: {e}"))?;
    let file = object::File::parse(&*bytes).map_err(|e| format!("uprobe `{lib}:{func}`: {e}"))?;
    let value = file
        .symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.name() == Ok(func) && s.kind() == object::SymbolKind::Text && s.is_definition())
        .map(|s| s.address())
        .ok_or_else(|| {
            format!("uprobe `{lib}:{func}`: the executable has no function `{func}` in its symbol tables (stripped?)")
        })?;
    let base = objs
        .iter()
        .find(|o| o.name.is_empty())
        .map_or(0, |o| o.base);
    Ok(base + value)
}

/// Bytes from a ModRM byte to the end of its displacement (SIB included), or `None` for a
/// RIP-relative operand, which would not survive the move.
fn modrm_len(c: &[u8]) -> Option<usize> {
    let m = *c.first()?;
    let (md, rm) = (m >> 6, m & 7);
    let sib = rm == 4 && md != 3;
    let base5 = sib && c.get(1).is_some_and(|s| s & 7 == 5);
    Some(match md {
        3 => 1,
        0 if rm == 5 => return None, // [rip + disp32]
        0 => 1 + sib as usize + if base5 { 4 } else { 0 },
        1 => 2 + sib as usize,
        _ => 5 + sib as usize,
    })
}

/// How many bytes of whole instructions at the start of `code` cover the 5 a `jmp rel32`
/// needs, for the prologues compilers emit: `endbr64`, pushes, moves, arithmetic and
/// `lea` on registers and on stack or register-based memory, nops. Anything else (a
/// RIP-relative operand, a branch) is refused, naming the byte.
fn prologue_len(code: &[u8]) -> Result<usize, String> {
    let mut at = 0;
    while at < 5 {
        let c = &code[at..];
        let refuse = || {
            format!(
                "byte {:#04x} at +{at} starts an instruction the shim does not relocate",
                c[0]
            )
        };
        let o = usize::from(matches!(c[0], 0x40..=0x4f)); // a REX prefix
        let op = c[o];
        let len = match (c[0], op) {
            (0xf3, _) if c[1..4] == [0x0f, 0x1e, 0xfa] => 4, // endbr64
            (0x90, _) => 1,
            (0x66, _) if c[1] == 0x90 => 2, // xchg ax, ax (other 0x66 forms: refused)
            (0x0f, _) if c[1] == 0x1f && c[2] == 0x44 && c[3] == 0 => 5, // nopl 0(rax,rax)
            (0x0f, _) if c[1] == 0x1f && c[2] == 0x40 => 4, // nopl 0(rax)
            (_, 0x50..=0x57) => o + 1,      // push reg
            (_, 0xb8..=0xbf) => o + if c[0] & 0x48 == 0x48 { 9 } else { 5 }, // mov reg, imm
            // reg <-> r/m moves and arithmetic, lea, movsxd
            (
                _,
                0x01 | 0x03 | 0x09 | 0x0b | 0x21 | 0x23 | 0x29 | 0x2b | 0x31 | 0x33 | 0x39 | 0x3b
                | 0x63 | 0x85 | 0x89 | 0x8b | 0x8d,
            ) => o + 1 + modrm_len(&c[o + 1..]).ok_or_else(refuse)?,
            (_, 0x83 | 0xc6) => o + 2 + modrm_len(&c[o + 1..]).ok_or_else(refuse)?, // imm8
            (_, 0x81 | 0xc7) => o + 5 + modrm_len(&c[o + 1..]).ok_or_else(refuse)?, // imm32
            (_, 0x0f) if c[o + 1] == 0xaf => o + 2 + modrm_len(&c[o + 2..]).ok_or_else(refuse)?,
            _ => return Err(refuse()),
        };
        at += len;
    }
    Ok(at)
}

/// A function of the executable reached by a jump at its entry.
struct Entry {
    /// The function.
    f: u64,
    /// Its thunk: the relocated first instructions, then a jump back.
    thunk: u64,
    /// Bytes of whole instructions moved (at least the jump's 5).
    len: usize,
}

/// Writes, into a page within ±2 GB of `f` (one 128-byte slot per symbol `i`), a jump to
/// stub `i` and, after it, the thunk that runs `f`'s relocated first instructions and jumps
/// back to the rest of `f`.
#[cfg(target_arch = "x86_64")]
fn near_thunk(i: usize, f: u64, objs: &[Object]) -> Result<Entry, String> {
    static PAGE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // SAFETY: `f` is the entry of a function of the executable: its first bytes are mapped
    // (16 cover the longest prologue run the decoder accepts).
    let code = unsafe { std::slice::from_raw_parts(f as *const u8, 16) };
    let n = prologue_len(code).map_err(|e| format!("function at {f:#x}: {e}"))?;
    let mut page = PAGE.load(Ordering::Relaxed);
    if page == 0 {
        page = near_page(f, objs).ok_or("no free page within 2 GB of the executable")?;
        PAGE.store(page, Ordering::Relaxed);
    }
    let slot = page + 128 * i as u64;
    let abs_jmp = |to: u64| {
        let mut v = vec![0xff, 0x25, 0, 0, 0, 0];
        v.extend_from_slice(&to.to_le_bytes());
        v
    };
    let mut bytes = abs_jmp(stub(i));
    bytes.resize(16, 0xcc);
    bytes.extend_from_slice(&code[..n]);
    bytes.extend(abs_jmp(f + n as u64));
    // SAFETY: our own page (writable until `patch_entry` seals it); the slot is 128 bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), slot as *mut u8, bytes.len()) };
    Ok(Entry {
        f,
        thunk: slot + 16,
        len: n,
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn near_thunk(_: usize, _: u64, _: &[Object]) -> Result<Entry, String> {
    Err("x86-64 only".into())
}

/// A fresh read-write page within ±2 GB of `f`: after the executable's last segment, or
/// before its first.
#[cfg(target_arch = "x86_64")]
fn near_page(f: u64, objs: &[Object]) -> Option<u64> {
    let exe = objs.iter().find(|o| o.name.is_empty())?;
    let loads = exe.phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD);
    let end = loads
        .clone()
        .map(|p| exe.base + p.p_vaddr + p.p_memsz)
        .max()?;
    let start = loads.map(|p| exe.base + p.p_vaddr).min()?;
    let step = 1u64 << 16;
    let up = (0..4096u64).map(|k| ((end + step - 1) & !(step - 1)) + k * step);
    let down = (1..4096u64).filter_map(|k| (start & !(step - 1)).checked_sub(k * step));
    for at in up.chain(down) {
        if at.abs_diff(f) > (1 << 31) - 4096 {
            continue;
        }
        // SAFETY: a fresh anonymous mapping at a free address (NOREPLACE); unmapped never.
        let p = unsafe {
            libc::mmap(
                at as *mut c_void,
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            if p as u64 == at {
                return Some(at);
            }
            // SAFETY: the mapping just made (an old kernel ignored NOREPLACE).
            unsafe { libc::munmap(p, 4096) };
        }
    }
    None
}

/// Seals the trampoline page and writes `jmp rel32` to it at `f`'s entry (the rest of the
/// relocated instructions becomes `int3`). Runs before `main`, with one thread.
#[cfg(target_arch = "x86_64")]
fn patch_entry(e: &Entry) -> Result<(), String> {
    let (f, n) = (e.f, e.len);
    let slot = e.thunk - 16; // the jump to the stub
    let page = slot & !4095;
    // SAFETY: the trampoline page is ours.
    if unsafe { libc::mprotect(page as *mut c_void, 4096, libc::PROT_READ | libc::PROT_EXEC) } != 0
    {
        return Err("cannot make the trampoline page executable".into());
    }
    let rel = slot as i64 - (f as i64 + 5);
    let rel = i32::try_from(rel).map_err(|_| "the trampoline is out of jump range".to_string())?;
    let mut bytes = vec![0xe9];
    bytes.extend_from_slice(&rel.to_le_bytes());
    bytes.resize(n, 0xcc);
    let lo = f & !4095;
    let hi = (f + n as u64 - 1) & !4095;
    let len = (hi - lo + 4096) as usize;
    // SAFETY: the executable's text pages holding `f`'s entry, writable for the store and
    // executable again after; no other thread runs yet (the shim's constructor).
    unsafe {
        if libc::mprotect(
            lo as *mut c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
        ) != 0
        {
            return Err(format!("cannot write the entry of the function at {f:#x}"));
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), f as *mut u8, n);
        libc::mprotect(lo as *mut c_void, len, libc::PROT_READ | libc::PROT_EXEC);
    }
    Ok(())
}

/// The load bias of the object holding this code (the shim), to leave its GOT alone.
fn own_object(objs: &[Object]) -> Option<u64> {
    let here = own_object as *const () as u64;
    objs.iter()
        .find(|o| {
            o.phdrs.iter().any(|p| {
                p.p_type == libc::PT_LOAD
                    && here >= o.base + p.p_vaddr
                    && here < o.base + p.p_vaddr + p.p_memsz
            })
        })
        .map(|o| o.base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prologues_are_measured_in_whole_instructions_or_refused() {
        // endbr64; push rbp; mov rbp, rsp
        assert_eq!(
            prologue_len(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0, 0]),
            Ok(5)
        );
        // push r15; push r14; push rbx; sub rsp, 0x20
        assert_eq!(
            prologue_len(&[0x41, 0x57, 0x41, 0x56, 0x53, 0x48, 0x83, 0xec, 0x20, 0]),
            Ok(5)
        );
        // lea rax, [rip + x] (RIP-relative): refused, naming the byte
        let e = prologue_len(&[0x48, 0x8d, 0x05, 1, 2, 3, 4, 0, 0, 0]).unwrap_err();
        assert!(e.contains("0x48") && e.contains("+0"), "{e}");
        // push rbp; jmp: the branch is refused
        assert!(prologue_len(&[0x55, 0xe9, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        // -O0: push rbp; mov rbp, rsp; mov [rbp - 8], rdi
        assert_eq!(
            prologue_len(&[0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0x7d, 0xf8, 0, 0]),
            Ok(8)
        );
        // mov rax, rdi; imul rax, rsi
        assert_eq!(
            prologue_len(&[0x48, 0x89, 0xf8, 0x48, 0x0f, 0xaf, 0xc6, 0, 0, 0]),
            Ok(7)
        );
        // sub rsp, 0x1000 (imm32); mov [rsp + 8], rbx (SIB)
        assert_eq!(
            prologue_len(&[
                0x48, 0x81, 0xec, 0, 0x10, 0, 0, 0x48, 0x89, 0x5c, 0x24, 0x08
            ]),
            Ok(7)
        );
        // mov rax, [rip + x]: refused
        assert!(prologue_len(&[0x48, 0x8b, 0x05, 1, 2, 3, 4, 0, 0, 0]).is_err());
    }

    #[test]
    fn library_names_match_their_versions_and_paths() {
        assert!(is_lib("/usr/lib/libfoo.so.1", "libfoo.so"));
        assert!(is_lib("/usr/lib/libfoo.so", "libfoo.so"));
        assert!(!is_lib("/usr/lib/libfoobar.so", "libfoo.so"));
        assert!(!is_lib("/usr/lib/libfoo.so1", "libfoo.so"));
        assert!(is_lib("/opt/x/libfoo.so.2", "/opt/x/libfoo.so.2"));
        assert!(!is_lib("/opt/y/libfoo.so.2", "/opt/x/libfoo.so.2"));
    }

    #[test]
    fn libc_functions_are_found_and_missing_ones_named() {
        let objs = objects();
        let a = find("libc.so", "getpid", &objs).expect("getpid in libc");
        assert_eq!(a, Some(libc::getpid as *const () as u64));
        let e = find("libc.so", "no_such_function_here", &objs).unwrap_err();
        assert!(
            e.contains("libc.so:no_such_function_here") && e.contains("no exported function"),
            "{e}"
        );
        assert_eq!(find("libnotloaded.so", "f", &objs), Ok(None));
    }
}
