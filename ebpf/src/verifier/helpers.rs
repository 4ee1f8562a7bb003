//! Helper calls: r1..r5 checked against [`crate::helpers::HelperProto::args`], r0 typed from
//! the return type, references acquired and released. `callx r<d>` is checked the same way,
//! once `r<d>` is known to hold the id of a helper (a constant scalar on the path).
//!
//! | `ArgType`        | accepted register                                                   |
//! |------------------|---------------------------------------------------------------------|
//! | `Scalar`         | any initialized scalar                                              |
//! | `ConstMapPtr`    | `map_idx[i]`; ringbuf helpers need a ring buffer, others must not   |
//! | `MapKey/Value`   | pointer to `key_size`/`value_size` initialized readable bytes       |
//! | `ReadMem`+`ConstSize` | readable initialized memory for every size in the size's range, size > 0 |
//! | `WriteU64`       | 8 writable bytes (stack bytes become initialized)                   |
//! | `ConstStr`       | constant offset into read-only global data, NUL before value end    |
//! | `RingbufMem`     | the unmodified, null-checked, unreleased `ringbuf_reserve` result   |
//! | `ConstAllocSize` | a known constant > 0                                                |

use super::Fail;
use super::exec::{Explorer, MAX_VAR_OFF, Step, fail};
use super::scalar::Scalar;
use super::state::{ByteKind, Ptr, PtrKind, Reg, Slot, State, slot_of};
use super::{CtxKind, ErrorKind};
use crate::helpers::{self, ArgType, RetType};
use crate::isa::STACK_SIZE;
use crate::program::{MapKind, MapOrigin};

fn kind_name(k: MapKind) -> &'static str {
    match k {
        MapKind::Hash => "hash",
        MapKind::Array => "array",
        MapKind::PerThreadArray => "per-thread array",
        MapKind::RingBuf => "ringbuf",
    }
}

impl Explorer<'_> {
    /// `callx r<d>`: `r<d>` must be a known constant naming a helper; the call is then
    /// checked as `call` of that helper. The value is demanded precise, so pruning never
    /// merges paths that would call different helpers here.
    pub(super) fn callx(&mut self, st: &mut State, pc: usize, d: usize) -> Result<Step, Fail> {
        let s = match self.read_reg(st, pc, d)? {
            Reg::Scalar(s) => s,
            r => {
                return Err(fail(
                    pc,
                    ErrorKind::Helper,
                    format!(
                        "R{d} type={}, expected a scalar helper id for callx",
                        r.type_name()
                    ),
                ));
            }
        };
        self.demand(st, d);
        let Some(v) = s.as_const() else {
            return Err(fail(
                pc,
                ErrorKind::Helper,
                format!(
                    "R{d} callx needs a known constant helper id, found {s}: set it with a constant on every path"
                ),
            ));
        };
        match helpers::callx_id(v).filter(|&id| helpers::proto(id).is_some()) {
            Some(id) => self.call_helper(st, pc, id),
            None => Err(fail(
                pc,
                ErrorKind::Helper,
                format!(
                    "R{d} callx of unknown helper {}: no helper has this id",
                    v as i64
                ),
            )),
        }
    }

    pub(super) fn call_helper(&mut self, st: &mut State, pc: usize, id: i32) -> Result<Step, Fail> {
        let proto = helpers::proto(id)
            .ok_or_else(|| fail(pc, ErrorKind::Structure, format!("unknown helper {id}")))?;
        let hname = proto.name;
        let mut map: Option<u32> = None;
        let mut ref_arg: Option<u32> = None;
        let mut alloc: Option<u64> = None;
        for i in 0..5 {
            let r = i + 1;
            let at = proto.args[i];
            if at == ArgType::None {
                continue;
            }
            let reg = self.read_reg(st, pc, r)?;
            let wrong = |expected: &str| {
                fail(
                    pc,
                    ErrorKind::Helper,
                    format!(
                        "R{r} type={}, expected {expected} (argument {r} of {hname})",
                        reg.type_name()
                    ),
                )
            };
            match at {
                ArgType::None => {}
                ArgType::Scalar => {
                    if !matches!(reg, Reg::Scalar(_)) {
                        return Err(wrong("scalar"));
                    }
                }
                ArgType::ConstMapPtr => {
                    let Reg::Ptr(Ptr {
                        kind: PtrKind::Map { map: m },
                        ..
                    }) = reg
                    else {
                        return Err(wrong("map pointer"));
                    };
                    let md = &self.prog.maps[m as usize];
                    let rb_helper = matches!(
                        id,
                        helpers::RINGBUF_OUTPUT
                            | helpers::RINGBUF_RESERVE
                            | helpers::RINGBUF_SUBMIT
                            | helpers::RINGBUF_DISCARD
                    );
                    if rb_helper != (md.kind == MapKind::RingBuf) {
                        return Err(fail(
                            pc,
                            ErrorKind::Helper,
                            format!(
                                "R{r} map '{}' of kind {} is not allowed for {hname} (expected {})",
                                md.name,
                                kind_name(md.kind),
                                if rb_helper {
                                    "a ringbuf map"
                                } else {
                                    "a hash or array map"
                                }
                            ),
                        ));
                    }
                    if id != helpers::MAP_LOOKUP_ELEM {
                        self.note_map_value_use(m as usize);
                        self.note_map_write(m as usize);
                        self.note_map_atomic(m as usize);
                    }
                    map = Some(m);
                }
                ArgType::MapKey | ArgType::MapValue => {
                    let Some(m) = map else {
                        return Err(wrong("map pointer in an earlier argument"));
                    };
                    let md = &self.prog.maps[m as usize];
                    let (sz, what) = if at == ArgType::MapKey {
                        (md.key_size, "pointer to map key")
                    } else {
                        (md.value_size, "pointer to map value")
                    };
                    self.helper_mem(st, pc, r, reg, sz as u64, false, what)?;
                }
                ArgType::ReadMem | ArgType::WriteMem => {
                    let sr = r + 1;
                    let size = self.read_reg(st, pc, sr)?;
                    let Reg::Scalar(s) = size else {
                        return Err(fail(
                            pc,
                            ErrorKind::Helper,
                            format!("R{sr} type={}, expected a scalar size", size.type_name()),
                        ));
                    };
                    self.demand(st, sr);
                    self.check_size(pc, sr, &s)?;
                    let (write, what) = if at == ArgType::WriteMem {
                        (true, "pointer to writable memory")
                    } else {
                        (false, "pointer to readable memory")
                    };
                    self.helper_mem(st, pc, r, reg, s.umax, write, what)?;
                }
                ArgType::Ctx => {
                    // A probe's (or a memory block's) ctx is plain memory, the only
                    // memory pointer without a reference id there.
                    let probe =
                        matches!(self.opts.ctx, CtxKind::Probe { .. } | CtxKind::Mem { .. });
                    let is_ctx = matches!(reg, Reg::Ptr(p)
                        if p.off == 0 && p.const_var() == Some(0)
                            && (p.kind == PtrKind::Ctx
                                || (probe && matches!(p.kind, PtrKind::Mem { .. }) && p.ref_id == 0)));
                    if !is_ctx {
                        return Err(wrong("the ctx pointer (unmodified r1 of the program)"));
                    }
                }
                ArgType::ConstSize => {
                    let Reg::Scalar(s) = reg else {
                        return Err(wrong("scalar size"));
                    };
                    self.demand(st, r);
                    self.check_size(pc, r, &s)?;
                }
                ArgType::WriteU64 => {
                    self.helper_mem(
                        st,
                        pc,
                        r,
                        reg,
                        8,
                        true,
                        "pointer to 8 writable bytes (u64 *)",
                    )?;
                }
                ArgType::ConstStr => self.const_str(pc, r, reg)?,
                ArgType::RingbufMem => {
                    let Reg::Ptr(p) = reg else {
                        return Err(wrong("ringbuf memory from ringbuf_reserve"));
                    };
                    match p.kind {
                        PtrKind::MemOrNull { .. } => {
                            return Err(fail(
                                pc,
                                ErrorKind::Helper,
                                format!(
                                    "R{r} type=mem_or_null, expected ringbuf memory: null-check the ringbuf_reserve result first"
                                ),
                            ));
                        }
                        PtrKind::Mem { .. } if p.ref_id != 0 => {}
                        _ => return Err(wrong("ringbuf memory from ringbuf_reserve")),
                    }
                    if p.off != 0 || p.const_var() != Some(0) {
                        return Err(fail(
                            pc,
                            ErrorKind::Helper,
                            format!(
                                "R{r} ringbuf memory must be passed unmodified: found off={}",
                                p.off
                            ),
                        ));
                    }
                    if !st.refs.iter().any(|(id, _)| *id == p.ref_id) {
                        return Err(fail(
                            pc,
                            ErrorKind::Reference,
                            format!(
                                "R{r} double release: reference id={} was already submitted or discarded",
                                p.ref_id
                            ),
                        ));
                    }
                    ref_arg = Some(p.ref_id);
                }
                ArgType::ConstAllocSize => {
                    let Reg::Scalar(s) = reg else {
                        return Err(wrong("constant size"));
                    };
                    self.demand(st, r);
                    match s.as_const() {
                        Some(v) if v > 0 && v <= MAX_VAR_OFF as u64 => alloc = Some(v),
                        _ => {
                            return Err(fail(
                                pc,
                                ErrorKind::Helper,
                                format!(
                                    "R{r} expected a known constant size > 0 for {hname}, found {s}"
                                ),
                            ));
                        }
                    }
                }
            }
        }
        if proto.releases
            && let Some(rid) = ref_arg
        {
            st.refs.retain(|(id, _)| *id != rid);
        }
        let fr = st.cur_mut();
        for r in 1..=5 {
            fr.regs[r] = Reg::NotInit;
        }
        let r0 = match proto.ret {
            RetType::Scalar => Reg::Scalar(Scalar::unknown()),
            RetType::Void => Reg::NotInit,
            RetType::MapValueOrNull => {
                let m = map.expect("lookup has a map argument");
                let mut p = Ptr::new(PtrKind::MapValueOrNull { map: m }, 0);
                p.id = self.fresh_id();
                Reg::Ptr(p)
            }
            RetType::RingbufMemOrNull => {
                let size = alloc.expect("reserve has a size argument");
                let mut p = Ptr::new(PtrKind::MemOrNull { size }, 0);
                p.id = self.fresh_id();
                p.ref_id = p.id;
                st.refs.push((p.id, pc));
                Reg::Ptr(p)
            }
        };
        st.cur_mut().regs[0] = r0;
        if proto.terminates {
            self.check_refs(st, pc)?;
            return Ok(Step::End);
        }
        Ok(Step::Next(pc + 1))
    }

    fn check_size(&self, pc: usize, r: usize, s: &Scalar) -> Result<(), Fail> {
        if s.umin == 0 {
            return Err(fail(
                pc,
                ErrorKind::Helper,
                format!("R{r} size may be zero ({s}), expected a size > 0"),
            ));
        }
        if s.umax > MAX_VAR_OFF as u64 {
            return Err(fail(
                pc,
                ErrorKind::Helper,
                format!("R{r} size is unbounded ({s}), expected a bounded size"),
            ));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn helper_mem(
        &mut self,
        st: &mut State,
        pc: usize,
        r: usize,
        reg: Reg,
        size: u64,
        write: bool,
        what: &str,
    ) -> Result<(), Fail> {
        let Reg::Ptr(p) = reg else {
            return Err(fail(
                pc,
                ErrorKind::Helper,
                format!("R{r} type={}, expected {what}", reg.type_name()),
            ));
        };
        match p.kind {
            PtrKind::MapValueOrNull { .. } | PtrKind::MemOrNull { .. } => Err(fail(
                pc,
                ErrorKind::Helper,
                format!(
                    "R{r} type={}, expected {what}: possible NULL pointer, expected a null check first",
                    p.kind.name()
                ),
            )),
            PtrKind::Stack { frame } => {
                let frame = frame as usize;
                let bounded = p.var.smin >= -MAX_VAR_OFF && p.var.smax <= MAX_VAR_OFF;
                let (o, hi) = if bounded {
                    (p.off + p.var.smin, p.off + p.var.smax + size as i64)
                } else {
                    (i64::MIN, i64::MAX)
                };
                if o < -(STACK_SIZE as i64) || hi > 0 {
                    let at = match p.const_var() {
                        Some(v) => format!("{}", p.off.wrapping_add(v)),
                        None => format!("{}+[{},{}]", p.off, p.var.smin, p.var.smax),
                    };
                    return Err(fail(
                        pc,
                        ErrorKind::Access,
                        format!(
                            "invalid stack access off {at} size {size} for R{r} ({what}): outside the {STACK_SIZE}-byte frame"
                        ),
                    ));
                }
                self.note_depth(st, frame, o);
                // The helper reaches these bytes through a pointer: they stay in memory.
                self.share_stack(o, hi);
                let fr = &mut st.frames[frame];
                if write {
                    if size == 8 && o % 8 == 0 && p.const_var().is_some() {
                        *fr.slot_mut(slot_of(o).0) = Slot::Spill(Reg::Scalar(Scalar::unknown()));
                    } else {
                        for i in o..hi {
                            let (idx, b) = slot_of(i);
                            let slot = fr.slot_mut(idx);
                            if let Slot::Spill(Reg::Ptr(_)) = slot {
                                return Err(fail(
                                    pc,
                                    ErrorKind::Pointer,
                                    format!(
                                        "R{r} helper would overwrite part of a spilled pointer"
                                    ),
                                ));
                            }
                            let mut bytes = slot.bytes();
                            bytes[b] = ByteKind::Misc;
                            *slot = Slot::Bytes(bytes);
                        }
                    }
                    return Ok(());
                }
                for i in o..hi {
                    let (idx, b) = slot_of(i);
                    let slot = fr.slot(idx);
                    if let Slot::Spill(Reg::Ptr(_)) = slot {
                        return Err(fail(
                            pc,
                            ErrorKind::Pointer,
                            format!("R{r} {what} contains a spilled pointer at stack off {}", i),
                        ));
                    }
                    if slot.bytes()[b] == ByteKind::Invalid {
                        return Err(fail(
                            pc,
                            ErrorKind::Uninit,
                            format!(
                                "invalid read from stack off {o}+{} size {size} (uninitialized) for R{r} ({what})",
                                i - o
                            ),
                        ));
                    }
                }
                Ok(())
            }
            PtrKind::MapValue { map } => {
                self.note_map_value_use(map as usize);
                if write {
                    self.note_map_write(map as usize);
                }
                let m = &self.prog.maps[map as usize];
                if write && !m.writable_by_prog() {
                    return Err(fail(
                        pc,
                        ErrorKind::Access,
                        format!(
                            "cannot write into read-only map '{}' (read-only global data)",
                            m.name
                        ),
                    ));
                }
                self.bounds(
                    pc,
                    r,
                    &p,
                    0,
                    size,
                    m.value_size as u64,
                    "map value",
                    "value_size",
                )
            }
            PtrKind::Data if write => Err(fail(
                pc,
                ErrorKind::Access,
                format!("R{r} cannot write into input data: input data is read-only"),
            )),
            PtrKind::Data | PtrKind::Out => self.pkt_bounds(pc, r, &p, 0, size),
            PtrKind::Mem { size: limit } => {
                self.check_ref_live(st, pc, r, &p)?;
                // A helper may read any of it.
                self.note_ctx_read(&p, -p.off, limit);
                self.bounds(pc, r, &p, 0, size, limit, "mem", "mem size")
            }
            _ => Err(fail(
                pc,
                ErrorKind::Helper,
                format!("R{r} type={}, expected {what}", p.kind.name()),
            )),
        }
    }

    fn const_str(&self, pc: usize, r: usize, reg: Reg) -> Result<(), Fail> {
        let expected = "pointer to a constant string in read-only global data";
        let Reg::Ptr(Ptr {
            kind: PtrKind::MapValue { map },
            off,
            var,
            ..
        }) = reg
        else {
            return Err(fail(
                pc,
                ErrorKind::Helper,
                format!("R{r} type={}, expected {expected}", reg.type_name()),
            ));
        };
        let md = &self.prog.maps[map as usize];
        if md.writable_by_prog() || !matches!(md.origin, MapOrigin::GlobalData { .. }) {
            return Err(fail(
                pc,
                ErrorKind::Helper,
                format!(
                    "R{r} expected {expected} (.rodata), found writable map '{}'",
                    md.name
                ),
            ));
        }
        let Some(v) = var.as_const() else {
            return Err(fail(
                pc,
                ErrorKind::Helper,
                format!("R{r} {expected}: the offset must be constant, found {var}"),
            ));
        };
        let o = off.saturating_add(v as i64);
        let vs = md.value_size as i64;
        if o < 0 || o >= vs {
            return Err(fail(
                pc,
                ErrorKind::Access,
                format!(
                    "R{r} string offset {o} outside the value of '{}' ({vs} bytes)",
                    md.name
                ),
            ));
        }
        let init = md.init.as_deref().unwrap_or(&[]);
        let has_nul = (o..vs).any(|i| init.get(i as usize).copied().unwrap_or(0) == 0);
        if !has_nul {
            return Err(fail(
                pc,
                ErrorKind::Helper,
                format!(
                    "R{r} string at offset {o} of '{}' is not NUL-terminated within the value ({vs} bytes)",
                    md.name
                ),
            ));
        }
        Ok(())
    }
}
