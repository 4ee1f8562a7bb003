//! `trace --timeline FILE`: the host's CUDA calls and the GPU's kernels on one time axis,
//! as a Chrome / Perfetto trace-event JSON file (open it in ui.perfetto.dev or
//! chrome://tracing).
//!
//! ```text
//! API log (CLOCK_MONOTONIC)  ─────────────────────────────┐
//! timeline.bpf.c spans (%globaltimer, by correlation id) ──┼─▶ build() ─▶ traceEvents
//! clock calibrations (offset ± uncertainty, over time) ────┘
//! ```
//!
//! | event | `ph` | where |
//! |-------|------|-------|
//! | each intercepted driver call (copies `cat: copy`, launches `cat: launch`, the rest `cat: api`) | `X` | the app's process, the calling thread |
//! | each kernel launch, first block entry → last block exit, measured on the GPU | `X` | process `GPU`, one track per stream |
//! | launch call → its kernel | `s` / `f` (flow, `id` = correlation id) | from the launch span to the kernel span; none for a launch captured into a graph |
//! | process and track names | `M` | |
//!
//! Copies are the host call's span: for an asynchronous copy, the time to enqueue it. GPU
//! times are moved onto `CLOCK_MONOTONIC` with the calibrations the shim reported,
//! interpolated between them (the two clocks drift apart by about 1 µs per second); the
//! offsets and uncertainties are in `otherData`. Kernels without PTX (SASS-only) have no
//! GPU span, only their launch call. The probe keeps the latest [`TIMELINE_SLOTS`]
//! launches per copy-out of the maps. A kernel node of a CUDA graph keeps the correlation
//! id it got when it was captured or added, so it shows once per node: its latest replay.

use attach::apilog::{ApiEvent, Kind};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The timeline probe's object, built from `timeline.bpf.c` by `scripts/build-builtin-probes`.
pub const OBJECT: &[u8] = include_bytes!("timeline.bpf.o");

/// Slots of the probe's span map (`SLOTS` in `timeline.bpf.c`).
pub const TIMELINE_SLOTS: u32 = 65536;

/// The trace-event `pid` of the GPU's tracks.
pub const GPU_PID: u64 = 0x7fff_fff0;

/// Writes the probe's object into `dir` and returns its path (its maps are then named
/// `timeline:*`).
pub fn write_object(dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let p = dir.join("timeline.bpf.o");
    std::fs::write(&p, OBJECT)?;
    Ok(p)
}

/// One launch as the GPU saw it (`%globaltimer` ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Its correlation id.
    pub corr: u64,
    /// `kernel_id` of the probe ctx.
    pub kernel_id: u64,
    /// Block (0,0,0)'s thread 0 at entry.
    pub start: u64,
    /// The last block's thread 0 at exit.
    pub end: u64,
}

impl Span {
    /// Parses a value of the probe's `spans` map (`None` for an empty slot).
    pub fn from_value(v: &[u8]) -> Option<Span> {
        let w = super::print::words(v);
        let s = Span {
            corr: *w.first()?,
            kernel_id: *w.get(1)?,
            start: *w.get(2)?,
            end: *w.get(3)?,
        };
        (s.corr != 0 && s.start != 0 && s.end >= s.start).then_some(s)
    }
}

/// A calibration the shim reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Calibration {
    /// `%globaltimer − CLOCK_MONOTONIC`, ns.
    pub offset_ns: i64,
    /// ± ns.
    pub uncertainty_ns: u64,
    /// `CLOCK_MONOTONIC` when measured.
    pub at_ns: u64,
}

/// `%globaltimer` → `CLOCK_MONOTONIC`, through the calibrations (sorted by time): the offset
/// is interpolated linearly between the two around the time, and held beyond the ends.
pub fn to_host(cals: &[Calibration], gpu_ns: u64) -> Option<u64> {
    let first = cals.first()?;
    let guess = gpu_ns as i64 - first.offset_ns;
    let offset = match cals.iter().position(|c| c.at_ns as i64 > guess) {
        Some(0) => first.offset_ns,
        None => cals.last()?.offset_ns,
        Some(i) => {
            let (a, b) = (cals[i - 1], cals[i]);
            let span = (b.at_ns - a.at_ns) as f64;
            let f = (guess - a.at_ns as i64) as f64 / span.max(1.0);
            a.offset_ns + ((b.offset_ns - a.offset_ns) as f64 * f).round() as i64
        }
    };
    u64::try_from(gpu_ns as i64 - offset).ok()
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// What went into a timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Host call spans.
    pub calls: usize,
    /// Kernel spans.
    pub kernels: usize,
    /// Launch → kernel flows.
    pub flows: usize,
    /// Off-CPU spans of the app's threads (`--kernel-events`).
    pub off_cpu: usize,
}

/// The trace-event document: `events` from the API log, `spans` from the probe, kernel
/// names by `kernel_id`, the app's `pid`, and `kernel` events already on the host clock
/// (the off-CPU spans of `--kernel-events`).
pub fn build(
    events: &[ApiEvent],
    spans: &[Span],
    cals: &[Calibration],
    names: &BTreeMap<u64, String>,
    pid: u32,
    kernel: Vec<Value>,
) -> (Value, Counts) {
    let mut out: Vec<Value> = Vec::new();
    let mut counts = Counts {
        off_cpu: kernel.len(),
        ..Counts::default()
    };
    out.extend(kernel);
    out.push(
        json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
        "args": {"name": format!("host (pid {pid})")}}),
    );
    out.push(
        json!({"ph": "M", "name": "process_name", "pid": GPU_PID, "tid": 0,
        "args": {"name": "GPU"}}),
    );
    // Launch calls by correlation id: where a flow starts, and the kernel's stream.
    let mut launches: HashMap<u64, &ApiEvent> = HashMap::new();
    let mut streams: BTreeMap<u64, u64> = BTreeMap::new();
    for e in events {
        let name = attach::api::call_name(e.call);
        let cat = match e.kind {
            k if k.is_copy() => "copy",
            Kind::Launch => "launch",
            _ => "api",
        };
        let mut args = json!({"result": e.result});
        if e.kind.is_copy() || matches!(e.kind, Kind::Alloc | Kind::Managed | Kind::HostAlloc) {
            args["bytes"] = json!(e.bytes);
        }
        if e.kind.is_copy() {
            args["direction"] = json!(format!("{:?}", e.kind));
        }
        if e.kind == Kind::Launch {
            args["threads"] = json!(e.bytes);
            args["stream"] = json!(format!("{:#x}", e.stream));
            if e.dst != 0 {
                args["correlation_id"] = json!(e.dst);
                launches.insert(e.dst, e);
            }
            if e.flags & attach::apilog::FLAG_CAPTURED != 0 {
                args["captured"] = json!(true);
            }
            let next = streams.len() as u64;
            streams.entry(e.stream).or_insert(next);
        }
        out.push(
            json!({"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": e.tid,
            "ts": us(e.start_ns), "dur": us(e.dur_ns), "args": args}),
        );
        counts.calls += 1;
    }
    for (s, tid) in &streams {
        out.push(
            json!({"ph": "M", "name": "thread_name", "pid": GPU_PID, "tid": tid,
            "args": {"name": format!("stream {s:#x}")}}),
        );
    }
    for s in spans {
        let (Some(start), Some(end)) = (to_host(cals, s.start), to_host(cals, s.end)) else {
            continue;
        };
        let launch = launches.get(&s.corr);
        let tid = launch
            .and_then(|l| streams.get(&l.stream))
            .copied()
            .unwrap_or(0);
        let name = names
            .get(&s.kernel_id)
            .cloned()
            .unwrap_or_else(|| format!("kernel {:#x}", s.kernel_id));
        out.push(
            json!({"ph": "X", "name": name, "cat": "kernel", "pid": GPU_PID, "tid": tid,
            "ts": us(start), "dur": us(end.saturating_sub(start)),
            "args": {"correlation_id": s.corr, "gpu_start_ns": s.start, "gpu_end_ns": s.end}}),
        );
        counts.kernels += 1;
        // A captured launch's kernel runs at the graph's launches, not after this call.
        if let Some(l) = launch.filter(|l| l.flags & attach::apilog::FLAG_CAPTURED == 0) {
            out.push(
                json!({"ph": "s", "name": "launch", "cat": "launch", "id": s.corr,
                "pid": pid, "tid": l.tid, "ts": us(l.start_ns)}),
            );
            out.push(
                json!({"ph": "f", "bp": "e", "name": "launch", "cat": "launch",
                "id": s.corr, "pid": GPU_PID, "tid": tid, "ts": us(start)}),
            );
            counts.flows += 1;
        }
    }
    let doc = json!({
        "traceEvents": out,
        "displayTimeUnit": "ns",
        "otherData": {
            "clock": "CLOCK_MONOTONIC (µs); GPU %globaltimer moved by the calibrations",
            "calibrations": cals,
        },
    });
    (doc, counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_interpolated_between_calibrations_and_held_beyond() {
        let cals = [
            Calibration {
                offset_ns: 1000,
                uncertainty_ns: 5,
                at_ns: 10_000,
            },
            Calibration {
                offset_ns: 2000,
                uncertainty_ns: 5,
                at_ns: 20_000,
            },
        ];
        assert_eq!(to_host(&cals, 5_000 + 1000), Some(5_000));
        assert_eq!(to_host(&cals, 15_000 + 1000), Some(15_000 - 500));
        assert_eq!(to_host(&cals, 30_000 + 2000), Some(30_000));
        assert_eq!(to_host(&[], 1), None);
    }

    /// The trace-event format's rules for the phases used here (the Trace Event Format
    /// document): every event has a phase, a name, integer pid and tid; complete events
    /// have a timestamp and a non-negative duration in µs; flow starts and finishes pair up
    /// by id, a finish binds to its enclosing slice (`bp: e`) and is not before its start;
    /// metadata events carry `args.name`.
    fn validate(doc: &Value) -> Result<(), String> {
        let evs = doc["traceEvents"]
            .as_array()
            .ok_or("no traceEvents array")?;
        let mut flows: HashMap<u64, (Option<f64>, Option<f64>)> = HashMap::new();
        for (i, e) in evs.iter().enumerate() {
            let bad = |what: &str| Err(format!("event {i} {e}: {what}"));
            let ph = e["ph"].as_str().ok_or(format!("event {i}: no ph"))?;
            if e["name"].as_str().is_none() || !e["pid"].is_u64() || !e["tid"].is_u64() {
                return bad("name, pid and tid are required");
            }
            match ph {
                "X" => {
                    let (Some(ts), Some(dur)) = (e["ts"].as_f64(), e["dur"].as_f64()) else {
                        return bad("X needs ts and dur");
                    };
                    if ts < 0.0 || dur < 0.0 {
                        return bad("negative time");
                    }
                }
                "s" | "f" => {
                    let (Some(id), Some(ts)) = (e["id"].as_u64(), e["ts"].as_f64()) else {
                        return bad("flow needs id and ts");
                    };
                    let f = flows.entry(id).or_default();
                    let slot = if ph == "s" { &mut f.0 } else { &mut f.1 };
                    if slot.replace(ts).is_some() {
                        return bad("flow id used twice");
                    }
                    if ph == "f" && e["bp"] != "e" {
                        return bad("flow finish must bind to its slice");
                    }
                }
                "M" => {
                    if e["args"]["name"].as_str().is_none() {
                        return bad("metadata needs args.name");
                    }
                }
                _ => return bad("unexpected phase"),
            }
        }
        for (id, f) in flows {
            match f {
                (Some(s), Some(f)) if s <= f => {}
                _ => return Err(format!("flow {id} unpaired or finishing before it starts")),
            }
        }
        Ok(())
    }

    fn launch_event(start_ns: u64, corr: u64, stream: u64) -> ApiEvent {
        let mut e = ApiEvent::new(attach::api::Api::LaunchKernel as u16, Kind::Launch);
        e.start_ns = start_ns;
        e.dur_ns = 3_000;
        e.dst = corr;
        e.stream = stream;
        e.tid = 42;
        e
    }

    #[test]
    fn launches_and_kernels_line_up_through_the_calibration() {
        // GPU clock = host + 5 s, drifting by 1 µs per second; two streams; one launch
        // whose kernel has no span (SASS-only), one span with no launch call in the log.
        let off = 5_000_000_000i64;
        let cals = [
            Calibration {
                offset_ns: off,
                uncertainty_ns: 700,
                at_ns: 1_000_000_000,
            },
            Calibration {
                offset_ns: off + 1_000,
                uncertainty_ns: 650,
                at_ns: 2_000_000_000,
            },
        ];
        let mut copy = ApiEvent::new(attach::api::Api::MemcpyHtoD as u16, Kind::HtoD);
        (copy.start_ns, copy.dur_ns, copy.bytes, copy.tid) = (1_100_000_000, 50_000, 4096, 42);
        let events = [
            copy,
            launch_event(1_200_000_000, 1, 0),
            launch_event(1_500_000_000, 2, 0x77),
            launch_event(1_600_000_000, 3, 0),
        ];
        let gpu = |host: u64, drift: i64| (host as i64 + off + drift) as u64;
        let spans = [
            Span {
                corr: 1,
                kernel_id: 9,
                start: gpu(1_200_008_000, 200),
                end: gpu(1_200_058_000, 200),
            },
            Span {
                corr: 2,
                kernel_id: 9,
                start: gpu(1_500_006_000, 500),
                end: gpu(1_500_026_000, 500),
            },
            Span {
                corr: 4,
                kernel_id: 8,
                start: gpu(1_700_000_000, 700),
                end: gpu(1_700_001_000, 700),
            },
        ];
        let names = BTreeMap::from([(9u64, "vectorAdd".to_string())]);
        // One off-CPU span of the app's main thread (`--kernel-events`), on its track.
        let off = super::super::sched::events(
            &[super::super::sched::OffCpu {
                tid: 1234,
                start: 1_000_000_000,
                end: 1_000_500_000,
                blocked: true,
            }],
            1234,
        );
        let (doc, counts) = build(&events, &spans, &cals, &names, 1234, off);
        validate(&doc).unwrap();
        assert_eq!(
            counts,
            Counts {
                calls: 4,
                kernels: 3,
                flows: 2,
                off_cpu: 1
            }
        );
        let evs = doc["traceEvents"].as_array().unwrap();
        let kernel = |corr: u64| {
            evs.iter()
                .find(|e| e["cat"] == "kernel" && e["args"]["correlation_id"] == corr)
                .unwrap()
        };
        // Each kernel starts after its launch call, 8 and 6 µs later within the drift, on
        // its stream's track, and named.
        let k1 = kernel(1);
        assert!(
            (k1["ts"].as_f64().unwrap() - 1_200_008.0).abs() < 0.1,
            "{k1}"
        );
        assert!((k1["dur"].as_f64().unwrap() - 50.0).abs() < 0.01, "{k1}");
        assert_eq!(k1["name"], "vectorAdd");
        let k2 = kernel(2);
        assert!(
            (k2["ts"].as_f64().unwrap() - 1_500_006.0).abs() < 0.1,
            "{k2}"
        );
        assert_ne!(k1["tid"], k2["tid"]);
        assert_eq!(kernel(4)["name"], "kernel 0x8");
        let copies: Vec<&Value> = evs.iter().filter(|e| e["cat"] == "copy").collect();
        assert_eq!(copies.len(), 1);
        assert_eq!(copies[0]["args"]["bytes"], 4096);
        // The validator itself refuses what breaks the format.
        let mut broken = doc.clone();
        broken["traceEvents"][3]["dur"] = json!(-1.0);
        assert!(validate(&broken).is_err());
        let mut unpaired = doc.clone();
        let evs = unpaired["traceEvents"].as_array_mut().unwrap();
        let f = evs.iter().position(|e| e["ph"] == "f").unwrap();
        evs.remove(f);
        assert!(validate(&unpaired).is_err());
    }

    #[test]
    fn the_embedded_object_loads_and_reads_the_launch_fields() {
        let dir = std::env::temp_dir().join(format!("bpftime-timeline-{}", std::process::id()));
        let p = write_object(&dir).unwrap();
        let set = attach::ProbeSet::load(&[&p]).unwrap();
        assert_eq!(set.probes.len(), 2);
        assert!(set.reads_launch());
        let names: Vec<&String> = set.objects[0].maps.keys().collect();
        assert_eq!(names, ["spans"]);
        assert_eq!(set.objects[0].maps["spans"].max_entries, TIMELINE_SLOTS);
        let _ = std::fs::remove_dir_all(dir);
    }
}
