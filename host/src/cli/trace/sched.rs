//! `trace --kernel-events`: the kernel's side of the timeline. A Linux tracepoint program
//! (`sched.bpf.c`, embedded as `sched.bpf.o`) loaded with aya reports each context switch
//! of CMD's threads. The timeline shows each stretch off the CPU as a span on the thread's
//! track: `off CPU (blocked)` when the thread slept (in a synchronize call, say), `off CPU
//! (preempted)` when it was still runnable.
//!
//! ```text
//! kernel: sched/sched_switch ──▶ sched.bpf.c (tgid filter) ──ring buffer──▶ reader thread
//!         (bpf_ktime_get_ns = CLOCK_MONOTONIC)                                   │
//! trace --timeline: API log + GPU spans + off-CPU spans ◀───────────────────────┘
//! ```
//!
//! It needs root (CAP_BPF and CAP_PERFMON), tracefs and a kernel of 5.8 or later (ring
//! buffer, namespaced pids). Without them, `trace` says why and runs on without kernel
//! events. Nothing here runs in the application. The process followed is CMD, then the
//! process the shim reports as the application once it does (CMD may be a wrapper such
//! as `sh -c`); other processes CMD starts are not followed.

use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);

static ALIGNED: &Aligned<[u8]> = &Aligned(*include_bytes!("sched.bpf.o"));

/// The program's object, built from `sched.bpf.c` by `scripts/build-builtin-probes`, 8-byte
/// aligned (the ELF parser reads its headers in place).
pub const OBJECT: &[u8] = &ALIGNED.0;

/// The `sched_switch` fields the program reads, `(name, offset, size)`, as `sched.bpf.c`'s
/// `struct sched_switch_args` lays them out.
pub const FIELDS: &[(&str, u32, u32)] = &[
    ("prev_pid", 24, 4),
    ("prev_state", 32, 8),
    ("next_pid", 56, 4),
];

/// Where tracefs may be mounted.
const TRACEFS: &[&str] = &["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// One context switch of an application thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    /// CLOCK_MONOTONIC ns.
    pub ts: u64,
    /// The thread.
    pub tid: u32,
    /// The CPU.
    pub cpu: u32,
    /// It left the CPU (else it came back).
    pub out: bool,
    /// When it left: 0 if still runnable (preempted), else its sleep state.
    pub prev_state: i64,
}

impl Switch {
    /// The 32-byte record of `sched.bpf.c`'s `struct sched_event`.
    pub fn from_bytes(b: &[u8]) -> Option<Switch> {
        if b.len() < 32 {
            return None;
        }
        let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
        let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        Some(Switch {
            ts: u64_at(0)?,
            prev_state: u64_at(8)? as i64,
            tid: u32_at(16)?,
            cpu: u32_at(20)?,
            out: u32_at(24)? != 0,
        })
    }
}

/// The program's `struct sched_target`: the tgid to follow in the pid namespace of the
/// nsfs file with this device and inode.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Target {
    tgid: u32,
    pad: u32,
    ns_dev: u64,
    ns_ino: u64,
}

// SAFETY: plain integers, `repr(C)`, no padding the kernel could misread (`pad` is explicit);
// any bit pattern is valid.
unsafe impl aya::Pod for Target {}

/// The state bits of `prev_state` (`TASK_REPORT_MAX - 1`): a preempted thread reports
/// `TASK_REPORT_MAX` itself, which these bits clear.
const STATE_BITS: i64 = 0xff;

/// A stretch of a thread off the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffCpu {
    /// The thread.
    pub tid: u32,
    /// Left the CPU, CLOCK_MONOTONIC ns.
    pub start: u64,
    /// Came back.
    pub end: u64,
    /// It slept (else it was preempted).
    pub blocked: bool,
}

/// Pairs each thread's switch out with its next switch in (`switches` in time order).
/// A switch in with no switch out before it, and a switch out with none after, make no
/// span.
pub fn off_cpu(switches: &[Switch]) -> Vec<OffCpu> {
    let mut open: std::collections::HashMap<u32, &Switch> = Default::default();
    let mut out = Vec::new();
    for s in switches {
        if s.out {
            open.insert(s.tid, s);
        } else if let Some(o) = open.remove(&s.tid)
            && s.ts >= o.ts
        {
            out.push(OffCpu {
                tid: s.tid,
                start: o.ts,
                end: s.ts,
                blocked: o.prev_state & STATE_BITS != 0,
            });
        }
    }
    out.sort_by_key(|o| (o.start, o.tid));
    out
}

/// The trace events of `spans` on the tracks of process `pid`'s threads (as the API
/// log's calls are: `tid` is the kernel's thread id).
pub fn events(spans: &[OffCpu], pid: u32) -> Vec<Value> {
    spans
        .iter()
        .map(|o| {
            let name = if o.blocked {
                "off CPU (blocked)"
            } else {
                "off CPU (preempted)"
            };
            json!({"ph": "X", "name": name, "cat": "sched", "pid": pid, "tid": o.tid,
                   "ts": o.start as f64 / 1e3, "dur": (o.end - o.start) as f64 / 1e3})
        })
        .collect()
}

/// Checks the tracepoint's format file text against [`FIELDS`]: `Err` names the first
/// field whose offset or size differs (the program would read the wrong bytes).
pub fn check_format(text: &str) -> Result<(), String> {
    for &(name, off, size) in FIELDS {
        let line = text
            .lines()
            .find(|l| l.contains(&format!(" {name};")))
            .ok_or_else(|| format!("sched_switch has no field `{name}`"))?;
        let num = |key: &str| -> Option<u32> {
            let rest = &line[line.find(key)? + key.len()..];
            rest.split(';').next()?.trim().parse().ok()
        };
        if num("offset:") != Some(off) || num("size:") != Some(size) {
            return Err(format!(
                "sched_switch's `{name}` is not at offset {off}, size {size} on this kernel: `{}`",
                line.trim()
            ));
        }
    }
    Ok(())
}

/// The running bridge: the loaded program and the thread reading its ring buffer.
pub struct Bridge {
    ebpf: aya::Ebpf,
    events: Arc<Mutex<Vec<Switch>>>,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
}

impl Bridge {
    /// Loads and attaches the program (it reports nothing until [`Bridge::follow`]), or
    /// says why it cannot: not root, no tracefs, a kernel that refuses the program.
    pub fn start() -> Result<Bridge, String> {
        let format = TRACEFS
            .iter()
            .find_map(|d| {
                std::fs::read_to_string(format!("{d}/events/sched/sched_switch/format")).ok()
            })
            .ok_or_else(|| {
                "no tracefs with sched/sched_switch (mount it: mount -t tracefs nodev \
                 /sys/kernel/tracing; and run as root)"
                    .to_string()
            })?;
        check_format(&format)?;
        let mut ebpf = aya::Ebpf::load(OBJECT)
            .map_err(|e| format!("cannot load the kernel program (root needed): {e}"))?;
        let prog: &mut aya::programs::TracePoint = ebpf
            .program_mut("sched_switch")
            .ok_or("the embedded object has no sched_switch program")?
            .try_into()
            .map_err(|e| format!("{e}"))?;
        prog.load()
            .map_err(|e| format!("the kernel refused the sched_switch program: {e}"))?;
        prog.attach("sched", "sched_switch")
            .map_err(|e| format!("cannot attach to sched/sched_switch: {e}"))?;
        let ring = aya::maps::RingBuf::try_from(
            ebpf.take_map("sched_events")
                .ok_or("the embedded object has no sched_events map")?,
        )
        .map_err(|e| format!("sched_events: {e}"))?;
        let events = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (events, stop) = (events.clone(), stop.clone());
            std::thread::Builder::new()
                .name("bpftime-kernel-events".into())
                .spawn(move || read(ring, &events, &stop))
                .map_err(|e| format!("cannot start the reader thread: {e}"))?
        };
        Ok(Bridge {
            ebpf,
            events,
            stop,
            reader: Some(reader),
        })
    }

    /// Reports the switches of process `tgid`'s threads (ids as this process sees them,
    /// in its pid namespace) from now on.
    pub fn follow(&mut self, tgid: u32) -> Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        let ns = std::fs::metadata("/proc/self/ns/pid")
            .map_err(|e| format!("cannot stat /proc/self/ns/pid: {e}"))?;
        let mut target: aya::maps::Array<_, Target> = aya::maps::Array::try_from(
            self.ebpf
                .map_mut("sched_target")
                .ok_or("the embedded object has no sched_target map")?,
        )
        .map_err(|e| format!("sched_target: {e}"))?;
        let t = Target {
            tgid,
            pad: 0,
            ns_dev: ns.dev(),
            ns_ino: ns.ino(),
        };
        target
            .set(0, t, 0)
            .map_err(|e| format!("sched_target: {e}"))
    }

    /// Stops (detaching the program) and returns every switch seen, in time order.
    pub fn finish(mut self) -> Vec<Switch> {
        let _ = self.follow(0);
        // What the kernel wrote before the target went to 0 is read before the thread stops.
        std::thread::sleep(Duration::from_millis(20));
        self.stop.store(true, Ordering::Release);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let mut v = std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()));
        v.sort_by_key(|s| s.ts);
        v
    }
}

fn read(
    mut ring: aya::maps::RingBuf<aya::maps::MapData>,
    events: &Mutex<Vec<Switch>>,
    stop: &AtomicBool,
) {
    loop {
        // Read the flag before draining: what the kernel wrote before `finish` set it is
        // drained in this round.
        let last = stop.load(Ordering::Acquire);
        let mut got = Vec::new();
        while let Some(item) = ring.next() {
            if let Some(s) = Switch::from_bytes(&item) {
                got.push(s);
            }
        }
        if !got.is_empty() {
            events.lock().unwrap_or_else(|p| p.into_inner()).extend(got);
        }
        if last {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sw(ts: u64, tid: u32, out: bool, prev_state: i64) -> Switch {
        Switch {
            ts,
            tid,
            cpu: 0,
            out,
            prev_state,
        }
    }

    #[test]
    fn each_switch_out_pairs_with_the_threads_next_switch_in() {
        let v = [
            sw(10, 7, false, 0),    // came back before any out: no span
            sw(20, 7, true, 1),     // 7 sleeps (S)
            sw(25, 8, true, 0x100), // 8 preempted (TASK_REPORT_MAX)
            sw(30, 8, false, 0),
            sw(50, 7, false, 0),
            sw(60, 8, true, 1), // never back: no span
        ];
        assert_eq!(
            off_cpu(&v),
            [
                OffCpu {
                    tid: 7,
                    start: 20,
                    end: 50,
                    blocked: true
                },
                OffCpu {
                    tid: 8,
                    start: 25,
                    end: 30,
                    blocked: false
                },
            ]
        );
        let ev = events(&off_cpu(&v), 42);
        assert_eq!(ev[0]["name"], "off CPU (blocked)");
        assert_eq!(
            (ev[0]["pid"].clone(), ev[0]["tid"].clone()),
            (json!(42), json!(7))
        );
        assert_eq!(ev[1]["dur"], json!(0.005));
    }

    #[test]
    fn records_decode_as_the_program_writes_them() {
        let mut b = Vec::new();
        b.extend_from_slice(&123u64.to_le_bytes());
        b.extend_from_slice(&(-1i64).to_le_bytes());
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(
            Switch::from_bytes(&b),
            Some(sw(123, 9, true, -1)).map(|mut s| {
                s.cpu = 3;
                s
            })
        );
        assert_eq!(
            Switch::from_bytes(&b[..31]),
            None,
            "short records are dropped"
        );
    }

    #[test]
    fn the_format_file_must_match_the_programs_layout() {
        let good = "\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
                    \tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
                    \tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n";
        assert_eq!(check_format(good), Ok(()));
        let moved = good.replace("offset:56", "offset:60");
        let e = check_format(&moved).unwrap_err();
        assert!(e.contains("next_pid") && e.contains("offset 56"), "{e}");
        assert!(
            check_format("")
                .unwrap_err()
                .contains("no field `prev_pid`")
        );
    }

    #[test]
    fn the_embedded_object_has_the_program_and_its_maps() {
        // (The project's own loader takes offload programs; this one is the kernel's, with
        // an LRU hash: read its ELF directly.)
        use object::{Object, ObjectSection, ObjectSymbol};
        let f = object::File::parse(OBJECT).unwrap();
        assert!(
            f.sections()
                .any(|s| s.name() == Ok("tracepoint/sched/sched_switch")),
            "the program's section"
        );
        assert!(
            f.section_by_name(".BTF").is_some(),
            "BTF kept (aya reads the maps from it)"
        );
        let syms: Vec<&str> = f.symbols().filter_map(|s| s.name().ok()).collect();
        for m in ["sched_switch", "sched_target", "sched_tids", "sched_events"] {
            assert!(syms.contains(&m), "{m}: {syms:?}");
        }
    }
}
