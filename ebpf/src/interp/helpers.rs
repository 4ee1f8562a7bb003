//! The helper functions, by id (see [`crate::helpers`] for the prototypes).
//!
//! Every pointer argument is checked against the run's regions before use, exactly like a
//! load or store. GPU helpers (503–511) emulate the launch geometry from the record index:
//!
//! | helper         | value on the CPU                                   |
//! |----------------|----------------------------------------------------|
//! | thread_idx     | `(index % block_dim, 0, 0)`                         |
//! | block_idx      | `(index / block_dim, 0, 0)`                         |
//! | block_dim      | `(block_dim, 1, 1)`                                 |
//! | grid_dim       | `(ceil(n / block_dim), 1, 1)`                       |
//! | warp_id        | `(index % block_dim) / 32`                          |
//! | lane_id        | `index % 32`                                        |
//! | sm_id          | the worker thread id                               |
//! | globaltimer    | nanoseconds since the Unix epoch                    |

use super::exec::{Ctl, Geo, Mem, Resv};
use super::printk::{PrintkError, format_printk};
use super::{Env, ExecError, MAP_HANDLE_BASE, MAX_RESERVATIONS, Vm};
use crate::helpers as h;
use crate::maps::MapOps;
use std::ptr::NonNull;
use std::sync::Arc;

/// `bpf_ktime_get_ns`: `CLOCK_MONOTONIC` in nanoseconds, as the kernel's helper, so host
/// probes, the API log and the GPU's `%globaltimer` (through the shim's calibration) share
/// one timebase.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// `-EINVAL` as a register value.
const EINVAL: u64 = -22i64 as u64;
const EFAULT: u64 = -14i64 as u64;
const EOPNOTSUPP: u64 = -95i64 as u64;

impl Vm {
    fn map_arg(
        &self,
        v: u64,
        pc: usize,
        what: &str,
    ) -> Result<(usize, &Arc<dyn MapOps>), ExecError> {
        let i = v.wrapping_sub(MAP_HANDLE_BASE);
        match self.maps.get(i as usize) {
            Some(m) if i < self.maps.len() as u64 => Ok((i as usize, m)),
            _ => Err(self.error(
                pc,
                format!("{what}: r1 = {v:#x} is not a map (expected a map_idx[] handle)"),
            )),
        }
    }

    /// Checks `n` bytes at `a` and borrows them as a slice.
    #[inline(always)]
    fn bytes<'m>(
        &self,
        mem: &Mem,
        resv: &[Resv],
        a: u64,
        n: u64,
        pc: usize,
        what: &str,
    ) -> Result<&'m [u8], ExecError> {
        if n == 0 {
            return Ok(&[]);
        }
        if !mem.stack_range(a, n) && !mem.allowed(a, n, false, resv) {
            return Err(self.bad_arg(mem, resv, a, n, pc, what));
        }
        // SAFETY: the check proved [a, a+n) is one readable region, alive for the run.
        Ok(unsafe { std::slice::from_raw_parts(a as *const u8, n as usize) })
    }

    #[cold]
    #[inline(never)]
    fn bad_arg(
        &self,
        mem: &Mem,
        resv: &[Resv],
        a: u64,
        n: u64,
        pc: usize,
        what: &str,
    ) -> ExecError {
        self.error(pc, format!("{what}: {}", mem.describe(a, n, false, resv)))
    }

    /// Checks that `[a, a + n)` is memory the program may write (stack, map value,
    /// output, ring buffer reservation).
    fn writable(
        &self,
        mem: &Mem,
        env: &Env,
        a: u64,
        n: u64,
        pc: usize,
        what: &str,
    ) -> Result<(), ExecError> {
        if n == 0 || mem.stack_range(a, n) {
            return Ok(());
        }
        mem.check(a, n, true, &env.resv)
            .map_err(|m| self.error(pc, format!("{what}: {m}")))
    }

    fn write3(
        &self,
        regs: &[u64; 16],
        mem: &Mem,
        env: &Env,
        vals: [u64; 3],
        pc: usize,
        what: &str,
    ) -> Result<(), ExecError> {
        for (i, v) in vals.into_iter().enumerate() {
            let p = regs[1 + i];
            if p == 0 {
                continue;
            }
            mem.check(p, 8, true, &env.resv)
                .map_err(|m| self.error(pc, format!("{what}: argument {}: {m}", i + 1)))?;
            // SAFETY: checked writable 8 bytes.
            unsafe { (p as *mut u64).write_unaligned(v) };
        }
        Ok(())
    }

    /// Calls helper `id` with r1..r5, sets r0.
    pub(crate) fn call_helper(
        &self,
        id: i32,
        regs: &mut [u64; 16],
        mem: &mut Mem,
        env: &mut Env,
        pc: usize,
        geo: Geo,
    ) -> Result<Ctl, ExecError> {
        let bd = env.block_dim.max(1);
        let r0 = match id {
            h::MAP_LOOKUP_ELEM => {
                let (i, m) = self.map_arg(regs[1], pc, "map_lookup_elem")?;
                let ks = self.map_sizes[i].0;
                let key = self.bytes(mem, &env.resv, regs[2], ks, pc, "map_lookup_elem key")?;
                m.lookup(key, env.thread)
                    .map(|p| p.as_ptr() as u64)
                    .unwrap_or(0)
            }
            h::MAP_UPDATE_ELEM => {
                let (i, m) = self.map_arg(regs[1], pc, "map_update_elem")?;
                let (ks, vs) = self.map_sizes[i];
                let key = self.bytes(mem, &env.resv, regs[2], ks, pc, "map_update_elem key")?;
                let val = self.bytes(mem, &env.resv, regs[3], vs, pc, "map_update_elem value")?;
                match m.update(key, val, regs[4], env.thread) {
                    Ok(()) => 0,
                    Err(e) => e.errno() as u64,
                }
            }
            h::MAP_DELETE_ELEM => {
                let (i, m) = self.map_arg(regs[1], pc, "map_delete_elem")?;
                let ks = self.map_sizes[i].0;
                let key = self.bytes(mem, &env.resv, regs[2], ks, pc, "map_delete_elem key")?;
                match m.delete(key) {
                    Ok(()) => 0,
                    Err(e) => e.errno() as u64,
                }
            }
            h::KTIME_GET_NS => monotonic_ns(),
            h::TRACE_PRINTK => {
                let fmt =
                    self.bytes(mem, &env.resv, regs[1], regs[2], pc, "trace_printk format")?;
                let args = [regs[3], regs[4], regs[5]];
                match format_printk(fmt, &args, |p| mem.cstr(p, &env.resv)) {
                    Ok(s) => {
                        let n = s.len() as u64;
                        env.emit(&s);
                        n
                    }
                    Err(PrintkError::Format(_)) => EINVAL,
                    Err(PrintkError::Memory(m)) => {
                        return Err(self.error(pc, format!("trace_printk %s: {m}")));
                    }
                }
            }
            h::GET_PRANDOM_U32 => env.next_random() as u64,
            h::RINGBUF_OUTPUT => {
                let (_, m) = self.map_arg(regs[1], pc, "ringbuf_output")?;
                let data =
                    self.bytes(mem, &env.resv, regs[2], regs[3], pc, "ringbuf_output data")?;
                match m.ringbuf_output(data, regs[4]) {
                    Ok(()) => 0,
                    Err(e) => e.errno() as u64,
                }
            }
            h::RINGBUF_RESERVE => {
                let (i, m) = self.map_arg(regs[1], pc, "ringbuf_reserve")?;
                if regs[3] != 0 || env.resv.len() >= MAX_RESERVATIONS {
                    0
                } else {
                    match m.ringbuf_reserve(regs[2]) {
                        Some(p) => {
                            env.resv.push(Resv {
                                start: p.as_ptr() as u64,
                                len: regs[2],
                                map: i,
                            });
                            p.as_ptr() as u64
                        }
                        None => 0,
                    }
                }
            }
            h::RINGBUF_SUBMIT | h::RINGBUF_DISCARD => {
                let name = if id == h::RINGBUF_SUBMIT {
                    "ringbuf_submit"
                } else {
                    "ringbuf_discard"
                };
                let Some(k) = env.resv.iter().position(|r| r.start == regs[1]) else {
                    return Err(self.error(
                        pc,
                        format!(
                            "{name}: r1 = {:#x} is not a live ring buffer reservation",
                            regs[1]
                        ),
                    ));
                };
                let r = env.resv.swap_remove(k);
                mem.forget_hot();
                if let Some(p) = NonNull::new(r.start as *mut u8) {
                    self.maps[r.map].ringbuf_commit(p, id == h::RINGBUF_DISCARD);
                }
                0
            }
            h::PUTS => {
                let s = mem
                    .cstr(regs[1], &env.resv)
                    .map_err(|m| self.error(pc, format!("puts: {m}")))?;
                env.emit(&String::from_utf8_lossy(&s));
                0
            }
            h::GET_GLOBALTIMER => env.clock.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0)
            }),
            h::GET_BLOCK_IDX => {
                self.write3(regs, mem, env, [geo.index / bd, 0, 0], pc, "get_block_idx")?;
                0
            }
            h::GET_BLOCK_DIM => {
                self.write3(regs, mem, env, [bd, 1, 1], pc, "get_block_dim")?;
                0
            }
            h::GET_THREAD_IDX => {
                self.write3(regs, mem, env, [geo.index % bd, 0, 0], pc, "get_thread_idx")?;
                0
            }
            h::GET_GRID_DIM => {
                self.write3(
                    regs,
                    mem,
                    env,
                    [geo.n.div_ceil(bd), 1, 1],
                    pc,
                    "get_grid_dim",
                )?;
                0
            }
            h::MEMBAR | h::MEMBAR_GPU => {
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                0
            }
            h::EXIT => {
                regs[0] = 0;
                return Ok(Ctl::Exit);
            }
            h::GET_SM_ID => env.thread as u64,
            h::GET_WARP_ID => (geo.index % bd) / 32,
            h::GET_LANE_ID => geo.index % 32,
            h::WAIT_UNTIL => wait_until(regs[1]),
            // As Linux: the process id (tgid) high, the thread id low.
            h::GET_CURRENT_PID_TGID => {
                (rustix::process::getpid().as_raw_nonzero().get() as u64) << 32
                    | rustix::thread::gettid().as_raw_nonzero().get() as u64
            }
            h::GET_STACK => {
                let (buf, size, flags) = (regs[2], regs[3], regs[4]);
                self.writable(mem, env, buf, size, pc, "get_stack buffer")?;
                // SAFETY: `buf..buf+size` is writable program memory (checked above).
                let out = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, size as usize) };
                out.fill(0);
                const USER_STACK: u64 = 1 << 8;
                match env.host {
                    None => EOPNOTSUPP,
                    Some(_)
                        if flags & USER_STACK == 0
                            || flags >> 9 != 0
                            || !size.is_multiple_of(8) =>
                    {
                        EINVAL
                    }
                    Some(host) => {
                        let skip = (flags & 0xff) as usize;
                        let mut frames = [0u64; 128];
                        let n = (host.user_stack)(&mut frames).min(frames.len());
                        let kept = &frames[skip.min(n)..n];
                        let k = kept.len().min(out.len() / 8);
                        for (i, a) in kept[..k].iter().enumerate() {
                            out[8 * i..8 * i + 8].copy_from_slice(&a.to_le_bytes());
                        }
                        8 * k as u64
                    }
                }
            }
            h::PROBE_READ_USER => {
                let (dst, size, src) = (regs[1], regs[2], regs[3]);
                self.writable(mem, env, dst, size, pc, "probe_read_user destination")?;
                // SAFETY: `dst..dst+size` is writable program memory (checked above).
                let out = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, size as usize) };
                match env.host {
                    Some(host) if (host.read_user)(src, out) => 0,
                    _ => {
                        out.fill(0);
                        EFAULT
                    }
                }
            }
            other => return Err(self.error(pc, h::unknown_helper_message(other as i64))),
        };
        regs[0] = r0;
        Ok(Ctl::Next)
    }
}

/// Helper 520 on the CPU: spins until the `get_globaltimer` clock reaches `deadline` (at
/// most 1 s from now), and returns the time it stopped.
fn wait_until(deadline: u64) -> u64 {
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    };
    let start = now();
    let deadline = deadline.min(start.saturating_add(1_000_000_000));
    let mut t = start;
    while t < deadline {
        std::hint::spin_loop();
        t = now();
    }
    t
}
