//! The hot loop and the memory checks.
//!
//! Memory checks: the live stack (`[stack_lo, top)`, all active frames) is tested first with
//! one subtraction and one comparison; anything else goes to [`Mem::slow`], which walks the
//! run's fixed regions (ctx, input, output or mem block), the map value regions and the live
//! ring buffer reservations.

use super::decode::{Op, Slot, aop};
use super::{Env, ExecError, FRAME_SIZE, MAX_FRAMES, Region, Vm};
use crate::helpers;
use crate::program::JobCtx;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A live ring buffer reservation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Resv {
    pub start: u64,
    pub len: u64,
    pub map: usize,
}

/// The regions of one run.
pub(crate) struct Mem<'a> {
    pub stack_lo: u64,
    pub stack_span: u64,
    pub fixed: [Region; 3],
    pub maps: &'a [Region],
    /// The last non-stack region a load hit: `(start, len)`, `len == 0` when none.
    pub hot_r: (u64, u64),
    /// The last writable non-stack region a store hit.
    pub hot_w: (u64, u64),
}

#[inline(always)]
fn within(a: u64, n: u64, start: u64, len: u64) -> bool {
    n <= len && a.wrapping_sub(start) <= len - n
}

impl Mem<'_> {
    /// Fast path: `n` bytes at `a` inside the live stack (`n` <= 8 in the hot loop).
    #[inline(always)]
    pub fn stack(&self, a: u64, n: u64) -> bool {
        a.wrapping_sub(self.stack_lo) <= self.stack_span - n
    }

    /// Whether `n` bytes (any `n`) at `a` are inside the live stack.
    #[inline(always)]
    pub fn stack_range(&self, a: u64, n: u64) -> bool {
        within(a, n, self.stack_lo, self.stack_span)
    }

    /// Second fast path: the region the last load (or store) outside the stack hit.
    #[inline(always)]
    pub fn hot(&self, a: u64, n: u64, write: bool) -> bool {
        let (start, len) = if write { self.hot_w } else { self.hot_r };
        within(a, n, start, len)
    }

    /// Forgets the cached regions (when a ring buffer reservation is released).
    pub fn forget_hot(&mut self) {
        self.hot_r = (0, 0);
        self.hot_w = (0, 0);
    }

    /// Whether `n` bytes at `a` may be accessed (any region); caches the region found.
    #[inline(never)]
    pub fn slow(&mut self, a: u64, n: u64, write: bool, resv: &[Resv]) -> bool {
        if within(a, n, self.stack_lo, self.stack_span) {
            return true;
        }
        let mut hit = None;
        for r in self.fixed.iter().chain(self.maps) {
            if within(a, n, r.start, r.len) {
                if write && !r.writable {
                    return false;
                }
                hit = Some((r.start, r.len));
                break;
            }
        }
        if hit.is_none() {
            hit = resv
                .iter()
                .find(|r| within(a, n, r.start, r.len))
                .map(|r| (r.start, r.len));
        }
        match hit {
            Some(h) => {
                if write {
                    self.hot_w = h;
                } else {
                    self.hot_r = h;
                }
                true
            }
            None => false,
        }
    }

    /// Whether `n` bytes at `a` may be accessed, without touching the caches.
    pub fn allowed(&self, a: u64, n: u64, write: bool, resv: &[Resv]) -> bool {
        if within(a, n, self.stack_lo, self.stack_span) {
            return true;
        }
        for r in self.fixed.iter().chain(self.maps) {
            if within(a, n, r.start, r.len) {
                return !write || r.writable;
            }
        }
        resv.iter().any(|r| within(a, n, r.start, r.len))
    }

    /// The region containing `a`: `(end, writable, name)`.
    pub fn region_of(&self, a: u64, resv: &[Resv]) -> Option<(u64, bool, &'static str)> {
        if within(a, 1, self.stack_lo, self.stack_span) {
            return Some((self.stack_lo + self.stack_span, true, "stack"));
        }
        for r in self.fixed.iter().chain(self.maps) {
            if within(a, 1, r.start, r.len) {
                return Some((r.start + r.len, r.writable, r.name));
            }
        }
        resv.iter()
            .find(|r| within(a, 1, r.start, r.len))
            .map(|r| (r.start + r.len, true, "ring buffer record"))
    }

    /// Checks an access, with the error message the spec asks for.
    #[inline]
    pub fn check(&self, a: u64, n: u64, write: bool, resv: &[Resv]) -> Result<(), String> {
        if n == 0 || within(a, n, self.stack_lo, self.stack_span) || self.allowed(a, n, write, resv)
        {
            Ok(())
        } else {
            Err(self.describe(a, n, write, resv))
        }
    }

    #[cold]
    pub fn describe(&self, a: u64, n: u64, write: bool, resv: &[Resv]) -> String {
        let what = if write { "write" } else { "read" };
        let why = if write && self.allowed(a, n, false, resv) {
            let name = self.region_of(a, resv).map(|r| r.2).unwrap_or("region");
            format!("{name} is read-only")
        } else {
            match self.region_of(a, resv) {
                Some((end, _, name)) => {
                    format!("runs past the end of the {name}, {} bytes left", end - a)
                }
                None => "not in any region".to_string(),
            }
        };
        format!("invalid memory access: {what} of {n} bytes at {a:#x} ({why})")
    }

    /// Reads a NUL-terminated string (without the NUL) from readable memory.
    pub fn cstr(&self, a: u64, resv: &[Resv]) -> Result<Vec<u8>, String> {
        let Some((end, _, name)) = self.region_of(a, resv) else {
            return Err(format!(
                "invalid memory access: string at {a:#x} (not in any region)"
            ));
        };
        // SAFETY: [a, end) lies inside one region, which is readable memory.
        let bytes = unsafe { std::slice::from_raw_parts(a as *const u8, (end - a) as usize) };
        match bytes.iter().position(|&b| b == 0) {
            Some(p) => Ok(bytes[..p].to_vec()),
            None => Err(format!(
                "string at {a:#x} is not NUL-terminated before the end of the {name}"
            )),
        }
    }
}

/// Record geometry for the GPU helpers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geo {
    pub index: u64,
    pub n: u64,
}

/// What a helper tells the loop.
pub(crate) enum Ctl {
    Next,
    Exit,
}

/// A saved caller frame of a local call.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Frame {
    ret: usize,
    saved: [u64; 4],
}

impl Vm {
    /// Runs one record of an offload job: r1 points to a read-only [`JobCtx`] whose
    /// `data..data_end` is `input` (read-only) and `out..out_end` is `output`.
    pub fn run_job(
        &self,
        input: &[u8],
        output: &mut [u8],
        index: u64,
        n: u64,
        args: [u64; 4],
        env: &mut Env,
    ) -> Result<u64, ExecError> {
        let ctx = Region::job_ctx(input, output, index, n, args);
        let ctx_addr = &ctx as *const JobCtx as u64;
        let fixed = Region::job(ctx_addr, &ctx);
        let r = self.run(ctx_addr, 0, fixed, Geo { index, n }, env);
        // Keep `ctx` (and the slices) alive until the run is over.
        std::hint::black_box(&ctx);
        match r {
            Ok(v) => Ok(v),
            Err(e) => Err(*e),
        }
    }

    /// Runs with r1 pointing to `mem` (read/write) and r2 = its length.
    pub fn run_mem(&self, mem: &mut [u8], env: &mut Env) -> Result<u64, ExecError> {
        let start = mem.as_mut_ptr() as u64;
        let fixed = Region::mem(start, mem.len() as u64);
        match self.run(start, mem.len() as u64, fixed, Geo { index: 0, n: 1 }, env) {
            Ok(v) => Ok(v),
            Err(e) => Err(*e),
        }
    }

    fn run(
        &self,
        r1: u64,
        r2: u64,
        fixed: [Region; 3],
        geo: Geo,
        env: &mut Env,
    ) -> Result<u64, Box<ExecError>> {
        env.resv.clear();
        let words = env.stack.len();
        debug_assert_eq!(words * 8, MAX_FRAMES * FRAME_SIZE);
        env.stack[words - FRAME_SIZE / 8..].fill(0);
        let top = env.stack.as_mut_ptr() as u64 + (words * 8) as u64;
        let mut mem = Mem {
            stack_lo: top - FRAME_SIZE as u64,
            stack_span: FRAME_SIZE as u64,
            fixed,
            maps: &self.map_regions,
            hot_r: (0, 0),
            hot_w: (0, 0),
        };
        let mut regs = [0u64; 16];
        regs[1] = r1;
        regs[2] = r2;
        regs[10] = top;
        let mut budget = env.max_insns;
        let result = self.exec(&mut regs, &mut mem, &mut budget, geo, env);
        env.last_insns = env.max_insns - budget;
        for r in env.resv.drain(..) {
            if let Some(p) = NonNull::new(r.start as *mut u8) {
                self.maps[r.map].ringbuf_commit(p, true);
            }
        }
        result
    }

    #[cold]
    #[inline(never)]
    fn limit_error(&self, pc: usize, max: u64) -> Box<ExecError> {
        Box::new(self.error(
            pc,
            format!("instruction limit exceeded ({max} instructions)"),
        ))
    }

    #[cold]
    #[inline(never)]
    fn mem_fault(&self, pc: usize, a: u64, n: u64, write: bool, mem: &Mem, env: &Env) -> ExecError {
        self.error(pc, mem.describe(a, n, write, &env.resv))
    }

    #[inline(always)]
    fn exec(
        &self,
        regs: &mut [u64; 16],
        mem: &mut Mem,
        budget: &mut u64,
        geo: Geo,
        env: &mut Env,
    ) -> Result<u64, Box<ExecError>> {
        // The error is boxed so the hot function returns in registers; a by-value
        // `ExecError` (over 100 bytes) costs a stack copy on every successful run.
        let code: &[Slot] = &self.code;
        let last = code.len() - 1;
        let mut depth = 0usize;
        let mut pc = 0usize;
        let mut left = *budget;

        macro_rules! fault {
            ($msg:expr) => {{
                *budget = left;
                return Err(Box::new(self.error(pc - 1, $msg)));
            }};
        }
        macro_rules! access {
            ($a:expr, $n:expr, $w:expr) => {{
                let a = $a;
                if !mem.stack(a, $n) && !mem.hot(a, $n, $w) && !mem.slow(a, $n, $w, &env.resv) {
                    *budget = left;
                    return Err(Box::new(self.mem_fault(pc - 1, a, $n, $w, mem, env)));
                }
                a
            }};
        }

        // The budget is charged a straight-line run at a time, on entry (see
        // `decode::run_lengths`): at the start, and after every jump, call and return.
        let run_len: &[u32] = &self.run_len;
        macro_rules! charge {
            ($at:expr) => {{
                // SAFETY: `pc` is a valid slot index here (see the loop invariant below) and
                // run_len has one entry per slot.
                let c = unsafe { *run_len.get_unchecked(pc) } as u64;
                if left < c {
                    *budget = 0;
                    return Err(self.limit_error($at, env.max_insns));
                }
                left -= c;
            }};
        }
        if left < run_len[0] as u64 {
            *budget = 0;
            return Err(self.limit_error(0, env.max_insns));
        }
        left -= run_len[0] as u64;

        loop {
            // Every pc the loop reaches is < code.len(): jump targets were validated at
            // decode time and the last slot is a Fault sentinel that never falls through.
            debug_assert!(pc <= last);
            // SAFETY: see above.
            let s = unsafe { *code.get_unchecked(pc) };
            let at = pc;
            pc += 1;

            let d = (s.dst & 15) as usize;
            let r = (s.src & 15) as usize;
            let imm = s.imm;
            match s.op {
                Op::Add64I => regs[d] = regs[d].wrapping_add(imm),
                Op::Add64R => regs[d] = regs[d].wrapping_add(regs[r]),
                Op::Sub64I => regs[d] = regs[d].wrapping_sub(imm),
                Op::Sub64R => regs[d] = regs[d].wrapping_sub(regs[r]),
                Op::Mul64I => regs[d] = regs[d].wrapping_mul(imm),
                Op::Mul64R => regs[d] = regs[d].wrapping_mul(regs[r]),
                Op::Div64I => regs[d] = regs[d].checked_div(imm).unwrap_or(0),
                Op::Div64R => regs[d] = regs[d].checked_div(regs[r]).unwrap_or(0),
                Op::Sdiv64I => regs[d] = sdiv64(regs[d], imm),
                Op::Sdiv64R => regs[d] = sdiv64(regs[d], regs[r]),
                Op::Or64I => regs[d] |= imm,
                Op::Or64R => regs[d] |= regs[r],
                Op::And64I => regs[d] &= imm,
                Op::And64R => regs[d] &= regs[r],
                Op::Lsh64I => regs[d] <<= imm & 63,
                Op::Lsh64R => regs[d] <<= regs[r] & 63,
                Op::Rsh64I => regs[d] >>= imm & 63,
                Op::Rsh64R => regs[d] >>= regs[r] & 63,
                Op::Neg64 => regs[d] = regs[d].wrapping_neg(),
                Op::Mod64I => regs[d] = regs[d].checked_rem(imm).unwrap_or(regs[d]),
                Op::Mod64R => regs[d] = regs[d].checked_rem(regs[r]).unwrap_or(regs[d]),
                Op::Smod64I => regs[d] = smod64(regs[d], imm),
                Op::Smod64R => regs[d] = smod64(regs[d], regs[r]),
                Op::Xor64I => regs[d] ^= imm,
                Op::Xor64R => regs[d] ^= regs[r],
                Op::Mov64I => regs[d] = imm,
                Op::Mov64R => regs[d] = regs[r],
                Op::Movsx8to64 => regs[d] = regs[r] as i8 as i64 as u64,
                Op::Movsx16to64 => regs[d] = regs[r] as i16 as i64 as u64,
                Op::Movsx32to64 => regs[d] = regs[r] as i32 as i64 as u64,
                Op::Arsh64I => regs[d] = ((regs[d] as i64) >> (imm & 63)) as u64,
                Op::Arsh64R => regs[d] = ((regs[d] as i64) >> (regs[r] & 63)) as u64,

                Op::Add32I => regs[d] = (regs[d] as u32).wrapping_add(imm as u32) as u64,
                Op::Add32R => regs[d] = (regs[d] as u32).wrapping_add(regs[r] as u32) as u64,
                Op::Sub32I => regs[d] = (regs[d] as u32).wrapping_sub(imm as u32) as u64,
                Op::Sub32R => regs[d] = (regs[d] as u32).wrapping_sub(regs[r] as u32) as u64,
                Op::Mul32I => regs[d] = (regs[d] as u32).wrapping_mul(imm as u32) as u64,
                Op::Mul32R => regs[d] = (regs[d] as u32).wrapping_mul(regs[r] as u32) as u64,
                Op::Div32I => regs[d] = div32(regs[d], imm),
                Op::Div32R => regs[d] = div32(regs[d], regs[r]),
                Op::Sdiv32I => regs[d] = sdiv32(regs[d], imm),
                Op::Sdiv32R => regs[d] = sdiv32(regs[d], regs[r]),
                Op::Or32I => regs[d] = (regs[d] as u32 | imm as u32) as u64,
                Op::Or32R => regs[d] = (regs[d] as u32 | regs[r] as u32) as u64,
                Op::And32I => regs[d] = (regs[d] as u32 & imm as u32) as u64,
                Op::And32R => regs[d] = (regs[d] as u32 & regs[r] as u32) as u64,
                Op::Lsh32I => regs[d] = ((regs[d] as u32) << (imm & 31)) as u64,
                Op::Lsh32R => regs[d] = ((regs[d] as u32) << (regs[r] & 31)) as u64,
                Op::Rsh32I => regs[d] = ((regs[d] as u32) >> (imm & 31)) as u64,
                Op::Rsh32R => regs[d] = ((regs[d] as u32) >> (regs[r] & 31)) as u64,
                Op::Neg32 => regs[d] = (regs[d] as u32).wrapping_neg() as u64,
                Op::Mod32I => regs[d] = mod32(regs[d], imm),
                Op::Mod32R => regs[d] = mod32(regs[d], regs[r]),
                Op::Smod32I => regs[d] = smod32(regs[d], imm),
                Op::Smod32R => regs[d] = smod32(regs[d], regs[r]),
                Op::Xor32I => regs[d] = (regs[d] as u32 ^ imm as u32) as u64,
                Op::Xor32R => regs[d] = (regs[d] as u32 ^ regs[r] as u32) as u64,
                Op::Mov32I => regs[d] = imm as u32 as u64,
                Op::Mov32R => regs[d] = regs[r] as u32 as u64,
                Op::Movsx8to32 => regs[d] = regs[r] as i8 as i32 as u32 as u64,
                Op::Movsx16to32 => regs[d] = regs[r] as i16 as i32 as u32 as u64,
                Op::Arsh32I => regs[d] = ((regs[d] as i32) >> (imm & 31)) as u32 as u64,
                Op::Arsh32R => regs[d] = ((regs[d] as i32) >> (regs[r] & 31)) as u32 as u64,

                Op::Trunc16 => regs[d] = regs[d] as u16 as u64,
                Op::Trunc32 => regs[d] = regs[d] as u32 as u64,
                Op::Nop => {}
                Op::Swap16 => regs[d] = (regs[d] as u16).swap_bytes() as u64,
                Op::Swap32 => regs[d] = (regs[d] as u32).swap_bytes() as u64,
                Op::Swap64 => regs[d] = regs[d].swap_bytes(),

                Op::LdImm64 => {
                    regs[d] = imm;
                    pc += 1;
                }

                Op::Ldx8 => {
                    let a = access!(regs[r].wrapping_add(s.off as i64 as u64), 1, false);
                    // SAFETY: the access check above proved [a, a+1) readable.
                    regs[d] = unsafe { (a as *const u8).read() } as u64;
                }
                Op::Ldx16 => {
                    let a = access!(regs[r].wrapping_add(s.off as i64 as u64), 2, false);
                    // SAFETY: checked readable.
                    regs[d] = unsafe { (a as *const u16).read_unaligned() } as u64;
                }
                Op::Ldx32 => {
                    let a = access!(regs[r].wrapping_add(s.off as i64 as u64), 4, false);
                    // SAFETY: checked readable.
                    regs[d] = unsafe { (a as *const u32).read_unaligned() } as u64;
                }
                Op::Ldx64 => {
                    let a = access!(regs[r].wrapping_add(s.off as i64 as u64), 8, false);
                    // SAFETY: checked readable.
                    regs[d] = unsafe { (a as *const u64).read_unaligned() };
                }
                Op::Ldxs8 => {
                    let a = access!(regs[r].wrapping_add(s.off as i64 as u64), 1, false);
                    // SAFETY: checked readable.
                    regs[d] = unsafe { (a as *const i8).read() } as i64 as u64;
                }
                Op::Ldxs16 => {
                    let a = access!(regs[r].wrapping_add(s.off as i64 as u64), 2, false);
                    // SAFETY: checked readable.
                    regs[d] = unsafe { (a as *const i16).read_unaligned() } as i64 as u64;
                }
                Op::Ldxs32 => {
                    let a = access!(regs[r].wrapping_add(s.off as i64 as u64), 4, false);
                    // SAFETY: checked readable.
                    regs[d] = unsafe { (a as *const i32).read_unaligned() } as i64 as u64;
                }
                Op::St8 | Op::Stx8 => {
                    let v = if s.op == Op::St8 { imm } else { regs[r] };
                    let a = access!(regs[d].wrapping_add(s.off as i64 as u64), 1, true);
                    // SAFETY: the access check above proved [a, a+1) writable.
                    unsafe { (a as *mut u8).write(v as u8) };
                }
                Op::St16 | Op::Stx16 => {
                    let v = if s.op == Op::St16 { imm } else { regs[r] };
                    let a = access!(regs[d].wrapping_add(s.off as i64 as u64), 2, true);
                    // SAFETY: checked writable.
                    unsafe { (a as *mut u16).write_unaligned(v as u16) };
                }
                Op::St32 | Op::Stx32 => {
                    let v = if s.op == Op::St32 { imm } else { regs[r] };
                    let a = access!(regs[d].wrapping_add(s.off as i64 as u64), 4, true);
                    // SAFETY: checked writable.
                    unsafe { (a as *mut u32).write_unaligned(v as u32) };
                }
                Op::St64 | Op::Stx64 => {
                    let v = if s.op == Op::St64 { imm } else { regs[r] };
                    let a = access!(regs[d].wrapping_add(s.off as i64 as u64), 8, true);
                    // SAFETY: checked writable.
                    unsafe { (a as *mut u64).write_unaligned(v) };
                }
                Op::Atomic32 => {
                    let a = access!(regs[d].wrapping_add(s.off as i64 as u64), 4, true);
                    if !a.is_multiple_of(4) {
                        fault!(format!("misaligned atomic access: 4 bytes at {a:#x}"));
                    }
                    // SAFETY: checked writable, 4-aligned; eBPF memory is shared plain memory
                    // that other threads access atomically too.
                    let at = unsafe { AtomicU32::from_ptr(a as *mut u32) };
                    let v = regs[r] as u32;
                    let o = Ordering::SeqCst;
                    let old = match s.aux & !aop::FETCH {
                        aop::ADD => at.fetch_add(v, o),
                        aop::OR => at.fetch_or(v, o),
                        aop::AND => at.fetch_and(v, o),
                        aop::XOR => at.fetch_xor(v, o),
                        aop::XCHG => at.swap(v, o),
                        _ => match at.compare_exchange(regs[0] as u32, v, o, o) {
                            Ok(x) | Err(x) => x,
                        },
                    };
                    if s.aux & !aop::FETCH == aop::CMPXCHG {
                        regs[0] = old as u64;
                    } else if s.aux & aop::FETCH != 0 {
                        regs[r] = old as u64;
                    }
                }
                Op::Atomic64 => {
                    let a = access!(regs[d].wrapping_add(s.off as i64 as u64), 8, true);
                    if !a.is_multiple_of(8) {
                        fault!(format!("misaligned atomic access: 8 bytes at {a:#x}"));
                    }
                    // SAFETY: checked writable, 8-aligned.
                    let at = unsafe { AtomicU64::from_ptr(a as *mut u64) };
                    let v = regs[r];
                    let o = Ordering::SeqCst;
                    let old = match s.aux & !aop::FETCH {
                        aop::ADD => at.fetch_add(v, o),
                        aop::OR => at.fetch_or(v, o),
                        aop::AND => at.fetch_and(v, o),
                        aop::XOR => at.fetch_xor(v, o),
                        aop::XCHG => at.swap(v, o),
                        _ => match at.compare_exchange(regs[0], v, o, o) {
                            Ok(x) | Err(x) => x,
                        },
                    };
                    if s.aux & !aop::FETCH == aop::CMPXCHG {
                        regs[0] = old;
                    } else if s.aux & aop::FETCH != 0 {
                        regs[r] = old;
                    }
                }

                Op::Ja => {
                    pc = s.off as usize;
                    charge!(at);
                }
                Op::Jeq64I => {
                    jump(&mut pc, s.off, regs[d] == imm);
                    charge!(at);
                }
                Op::Jeq64R => {
                    jump(&mut pc, s.off, regs[d] == regs[r]);
                    charge!(at);
                }
                Op::Jgt64I => {
                    jump(&mut pc, s.off, regs[d] > imm);
                    charge!(at);
                }
                Op::Jgt64R => {
                    jump(&mut pc, s.off, regs[d] > regs[r]);
                    charge!(at);
                }
                Op::Jge64I => {
                    jump(&mut pc, s.off, regs[d] >= imm);
                    charge!(at);
                }
                Op::Jge64R => {
                    jump(&mut pc, s.off, regs[d] >= regs[r]);
                    charge!(at);
                }
                Op::Jset64I => {
                    jump(&mut pc, s.off, regs[d] & imm != 0);
                    charge!(at);
                }
                Op::Jset64R => {
                    jump(&mut pc, s.off, regs[d] & regs[r] != 0);
                    charge!(at);
                }
                Op::Jne64I => {
                    jump(&mut pc, s.off, regs[d] != imm);
                    charge!(at);
                }
                Op::Jne64R => {
                    jump(&mut pc, s.off, regs[d] != regs[r]);
                    charge!(at);
                }
                Op::Jsgt64I => {
                    jump(&mut pc, s.off, (regs[d] as i64) > imm as i64);
                    charge!(at);
                }
                Op::Jsgt64R => {
                    jump(&mut pc, s.off, (regs[d] as i64) > regs[r] as i64);
                    charge!(at);
                }
                Op::Jsge64I => {
                    jump(&mut pc, s.off, (regs[d] as i64) >= imm as i64);
                    charge!(at);
                }
                Op::Jsge64R => {
                    jump(&mut pc, s.off, (regs[d] as i64) >= regs[r] as i64);
                    charge!(at);
                }
                Op::Jlt64I => {
                    jump(&mut pc, s.off, regs[d] < imm);
                    charge!(at);
                }
                Op::Jlt64R => {
                    jump(&mut pc, s.off, regs[d] < regs[r]);
                    charge!(at);
                }
                Op::Jle64I => {
                    jump(&mut pc, s.off, regs[d] <= imm);
                    charge!(at);
                }
                Op::Jle64R => {
                    jump(&mut pc, s.off, regs[d] <= regs[r]);
                    charge!(at);
                }
                Op::Jslt64I => {
                    jump(&mut pc, s.off, (regs[d] as i64) < imm as i64);
                    charge!(at);
                }
                Op::Jslt64R => {
                    jump(&mut pc, s.off, (regs[d] as i64) < regs[r] as i64);
                    charge!(at);
                }
                Op::Jsle64I => {
                    jump(&mut pc, s.off, (regs[d] as i64) <= imm as i64);
                    charge!(at);
                }
                Op::Jsle64R => {
                    jump(&mut pc, s.off, (regs[d] as i64) <= regs[r] as i64);
                    charge!(at);
                }
                Op::Jeq32I => {
                    jump(&mut pc, s.off, regs[d] as u32 == imm as u32);
                    charge!(at);
                }
                Op::Jeq32R => {
                    jump(&mut pc, s.off, regs[d] as u32 == regs[r] as u32);
                    charge!(at);
                }
                Op::Jgt32I => {
                    jump(&mut pc, s.off, regs[d] as u32 > imm as u32);
                    charge!(at);
                }
                Op::Jgt32R => {
                    jump(&mut pc, s.off, regs[d] as u32 > regs[r] as u32);
                    charge!(at);
                }
                Op::Jge32I => {
                    jump(&mut pc, s.off, regs[d] as u32 >= imm as u32);
                    charge!(at);
                }
                Op::Jge32R => {
                    jump(&mut pc, s.off, regs[d] as u32 >= regs[r] as u32);
                    charge!(at);
                }
                Op::Jset32I => {
                    jump(&mut pc, s.off, regs[d] as u32 & imm as u32 != 0);
                    charge!(at);
                }
                Op::Jset32R => {
                    jump(&mut pc, s.off, regs[d] as u32 & regs[r] as u32 != 0);
                    charge!(at);
                }
                Op::Jne32I => {
                    jump(&mut pc, s.off, regs[d] as u32 != imm as u32);
                    charge!(at);
                }
                Op::Jne32R => {
                    jump(&mut pc, s.off, regs[d] as u32 != regs[r] as u32);
                    charge!(at);
                }
                Op::Jsgt32I => {
                    jump(&mut pc, s.off, (regs[d] as i32) > imm as i32);
                    charge!(at);
                }
                Op::Jsgt32R => {
                    jump(&mut pc, s.off, (regs[d] as i32) > regs[r] as i32);
                    charge!(at);
                }
                Op::Jsge32I => {
                    jump(&mut pc, s.off, (regs[d] as i32) >= imm as i32);
                    charge!(at);
                }
                Op::Jsge32R => {
                    jump(&mut pc, s.off, (regs[d] as i32) >= regs[r] as i32);
                    charge!(at);
                }
                Op::Jlt32I => {
                    jump(&mut pc, s.off, (regs[d] as u32) < imm as u32);
                    charge!(at);
                }
                Op::Jlt32R => {
                    jump(&mut pc, s.off, (regs[d] as u32) < regs[r] as u32);
                    charge!(at);
                }
                Op::Jle32I => {
                    jump(&mut pc, s.off, regs[d] as u32 <= imm as u32);
                    charge!(at);
                }
                Op::Jle32R => {
                    jump(&mut pc, s.off, regs[d] as u32 <= regs[r] as u32);
                    charge!(at);
                }
                Op::Jslt32I => {
                    jump(&mut pc, s.off, (regs[d] as i32) < imm as i32);
                    charge!(at);
                }
                Op::Jslt32R => {
                    jump(&mut pc, s.off, (regs[d] as i32) < regs[r] as i32);
                    charge!(at);
                }
                Op::Jsle32I => {
                    jump(&mut pc, s.off, (regs[d] as i32) <= imm as i32);
                    charge!(at);
                }
                Op::Jsle32R => {
                    jump(&mut pc, s.off, (regs[d] as i32) <= regs[r] as i32);
                    charge!(at);
                }

                Op::Call | Op::Callx => {
                    let id = if s.op == Op::Call {
                        imm as u32 as i32
                    } else {
                        match helpers::callx_id(regs[d]) {
                            Some(id) => id,
                            None => fault!(helpers::unknown_helper_message(regs[d] as i64)),
                        }
                    };
                    *budget = left;
                    match self.call_helper(id, regs, mem, env, pc - 1, geo) {
                        Ok(Ctl::Next) => {}
                        Ok(Ctl::Exit) => {
                            *budget = left;
                            return Ok(0);
                        }
                        Err(e) => return Err(Box::new(e)),
                    }
                }
                Op::CallLocal => {
                    if depth + 1 >= MAX_FRAMES {
                        fault!(format!("call stack too deep (max {MAX_FRAMES} frames)"));
                    }
                    env.frames[depth] = Frame {
                        ret: pc,
                        saved: [regs[6], regs[7], regs[8], regs[9]],
                    };
                    depth += 1;
                    regs[10] -= FRAME_SIZE as u64;
                    mem.stack_lo -= FRAME_SIZE as u64;
                    mem.stack_span += FRAME_SIZE as u64;
                    // SAFETY: the new frame [stack_lo, stack_lo + FRAME_SIZE) is inside
                    // env.stack (depth < MAX_FRAMES), which nothing else borrows now.
                    unsafe { std::ptr::write_bytes(mem.stack_lo as *mut u8, 0, FRAME_SIZE) };
                    pc = s.off as usize;
                    charge!(at);
                }
                Op::Exit => {
                    if depth == 0 {
                        *budget = left;
                        return Ok(regs[0]);
                    }
                    depth -= 1;
                    let f = env.frames[depth];
                    regs[6..10].copy_from_slice(&f.saved);
                    regs[10] += FRAME_SIZE as u64;
                    mem.stack_lo += FRAME_SIZE as u64;
                    mem.stack_span -= FRAME_SIZE as u64;
                    pc = f.ret;
                    charge!(at);
                }
                Op::Fault => {
                    if pc - 1 == last {
                        fault!("fell off the end of the program (no exit)".to_string());
                    }
                    fault!("executed the second slot of a ld_imm64".to_string());
                }
            }
        }
    }
}

/// A taken conditional jump. The opaque `black_box` keeps LLVM from turning the jump into a
/// `cmov` on `pc`: a data-dependent `pc` would serialize the fetch of the next slot on the
/// comparison, where a predicted branch lets the CPU run ahead.
#[inline(always)]
fn jump(pc: &mut usize, target: i32, cond: bool) {
    if cond {
        *pc = target as usize;
        std::hint::black_box(());
    }
}

#[inline(always)]
fn sdiv64(x: u64, y: u64) -> u64 {
    if y == 0 {
        0
    } else {
        (x as i64).wrapping_div(y as i64) as u64
    }
}

#[inline(always)]
fn smod64(x: u64, y: u64) -> u64 {
    if y == 0 {
        x
    } else {
        (x as i64).wrapping_rem(y as i64) as u64
    }
}

#[inline(always)]
fn div32(x: u64, y: u64) -> u64 {
    (x as u32).checked_div(y as u32).unwrap_or(0) as u64
}

#[inline(always)]
fn mod32(x: u64, y: u64) -> u64 {
    let (x, y) = (x as u32, y as u32);
    if y == 0 { x as u64 } else { (x % y) as u64 }
}

#[inline(always)]
fn sdiv32(x: u64, y: u64) -> u64 {
    if y as u32 == 0 {
        0
    } else {
        (x as i32).wrapping_div(y as i32) as u32 as u64
    }
}

#[inline(always)]
fn smod32(x: u64, y: u64) -> u64 {
    if y as u32 == 0 {
        x as u32 as u64
    } else {
        (x as i32).wrapping_rem(y as i32) as u32 as u64
    }
}
