//! The control protocol: JSON lines over the service's Unix socket.
//!
//! Each request is one JSON object on one line, tagged by `cmd`; each reply is one line
//! `{"ok": true, "data": ...}` or `{"ok": false, "error": "..."}`. Jobs never go through
//! the socket: they go through the shared-memory queue. The socket carries the control
//! plane: programs, maps, buffers, status and stop.
//!
//! | `cmd`        | fields                                   | `data`                  |
//! |--------------|------------------------------------------|-------------------------|
//! | `load`       | `file`, `object_hex`, `prog?`, `name?`   | [`ProgramInfo`]         |
//! | `replace`    | `name`, `file`, `object_hex`, `prog?`    | [`ProgramInfo`]         |
//! | `unload`     | `prog` (id or name)                      | [`ProgramInfo`]         |
//! | `list`       |                                          | `[ProgramInfo]`         |
//! | `map_dump`   | `map` (`prog:map` or unique `map`)       | [`MapDump`]             |
//! | `map_update` | `map`, `key_hex`, `value_hex`, `flags`   | `null`                  |
//! | `alloc`      | `client`, `generation`, `len`            | `{"off": u64}`          |
//! | `free`       | `client`, `generation`, `off`            | `null`                  |
//! | `status`     |                                          | [`StatusInfo`]          |
//! | `stop`       | `now`                                    | `null`                  |

use serde::{Deserialize, Serialize};

/// A control request.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    /// Verify and install a program.
    Load {
        /// File name, for messages.
        file: String,
        /// The ELF object or raw bytecode, hex-encoded.
        object_hex: String,
        /// Program to take from the object (function or section name).
        prog: Option<String>,
        /// Name to install it under (default: the function name).
        name: Option<String>,
        /// Where maps live, as `MAP=device` or `MAP=shm` (CUDA backend; the default puts
        /// per-thread arrays in GPU memory and every other map in shared memory), or
        /// `MAP=cxl:LATENCY_NS[:GBPS]` (CPU backend: shared memory behind an emulated
        /// slower tier).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        placement: Vec<String>,
    },
    /// Hot-swap the program installed as `name`.
    Replace {
        /// Installed program name.
        name: String,
        /// File name, for messages.
        file: String,
        /// The new ELF object or raw bytecode, hex-encoded.
        object_hex: String,
        /// Program to take from the object.
        prog: Option<String>,
    },
    /// Remove a program.
    Unload {
        /// Id or name.
        prog: String,
    },
    /// List installed programs.
    List,
    /// Dump a map.
    MapDump {
        /// `prog:map`, or a map name that only one program has.
        map: String,
    },
    /// Create or update one map element.
    MapUpdate {
        /// `prog:map`, or a map name that only one program has.
        map: String,
        /// Key bytes, hex.
        key_hex: String,
        /// Value bytes, hex.
        value_hex: String,
        /// `BPF_ANY` (0), `BPF_NOEXIST` (1) or `BPF_EXIST` (2).
        #[serde(default)]
        flags: u64,
    },
    /// Allocate a device-resident buffer (CUDA backend) for a client; reply `{"off": N}`,
    /// an offset into the device arena for jobs with `DEVICE_INPUT`/`DEVICE_OUTPUT`.
    DeviceAlloc {
        /// Client slot.
        client: u32,
        /// Client slot generation.
        generation: u32,
        /// Bytes.
        len: u64,
        /// Which of the service's GPUs (0 on a one-GPU service).
        #[serde(default)]
        device: u32,
    },
    /// Free a device-resident buffer.
    DeviceFree {
        /// Client slot.
        client: u32,
        /// Client slot generation.
        generation: u32,
        /// Device arena offset.
        off: u64,
        /// Which of the service's GPUs.
        #[serde(default)]
        device: u32,
    },
    /// Copy between a client's shared arena buffer and its device buffer.
    DeviceCopy {
        /// Client slot.
        client: u32,
        /// Client slot generation.
        generation: u32,
        /// true: shared → device (upload); false: device → shared.
        to_device: bool,
        /// Shared arena offset.
        shm_off: u64,
        /// Device arena offset.
        dev_off: u64,
        /// Bytes.
        len: u64,
        /// Which of the service's GPUs holds the device buffer.
        #[serde(default)]
        device: u32,
    },
    /// Allocate an arena buffer for a client.
    Alloc {
        /// Client slot.
        client: u32,
        /// Client slot generation.
        generation: u32,
        /// Bytes.
        len: u64,
        /// `cxl:LATENCY_NS[:GBPS]`: jobs reading their input from this buffer fetch each
        /// record through that emulated tier (CPU backend). `None`: local.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        placement: Option<String>,
    },
    /// Free an arena buffer of a client.
    Free {
        /// Client slot.
        client: u32,
        /// Client slot generation.
        generation: u32,
        /// Arena offset from `alloc`.
        off: u64,
    },
    /// Service status.
    Status,
    /// Stop the service.
    Stop {
        /// Cancel queued jobs instead of draining them.
        #[serde(default)]
        now: bool,
    },
}

/// A reply line.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the request succeeded.
    pub ok: bool,
    /// The result, when `ok`.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
    /// What went wrong, when not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A map as the service holds it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MapInfo {
    /// Name within its program.
    pub name: String,
    /// Kind (`hash`, `array`, `per_thread_array`, `ring_buf`).
    pub kind: String,
    /// Key size.
    pub key_size: u32,
    /// Value size.
    pub value_size: u32,
    /// Entries.
    pub max_entries: u32,
    /// `shm` (the shared region), `device` (GPU memory, CUDA backend), or
    /// `cxl:LATENCY_NS[:GBPS]` (the shared region, every helper access paying an emulated
    /// tier: `device::tier`).
    #[serde(default)]
    pub placement: String,
}

/// An installed program.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProgramInfo {
    /// Id used in job descriptors.
    pub id: u32,
    /// Installed name.
    pub name: String,
    /// Version, from 1; bumped by `replace`.
    pub version: u32,
    /// ELF section.
    pub section: String,
    /// Source file.
    pub file: String,
    /// Instruction count (linked).
    pub insns: usize,
    /// Its maps.
    pub maps: Vec<MapInfo>,
    /// Where it runs on the GPU (`interp`, `native`, `host`); absent on the CPU backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// CPU engine that runs it (`interp` or `jit`; `interp` after a JIT fallback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// Compile time of its native code in µs (JIT engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_us: Option<u64>,
}

/// A map's contents.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MapDump {
    /// `prog:map`.
    pub map: String,
    /// `(key hex, value hex)` pairs.
    pub entries: Vec<(String, String)>,
}

/// Latency percentiles in ns.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
}

/// Service status.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StatusInfo {
    /// Region name.
    pub name: String,
    /// Backend in use.
    pub backend: String,
    /// Worker threads.
    pub workers: usize,
    /// Seconds since start.
    pub uptime_s: f64,
    /// Installed programs.
    pub programs: Vec<ProgramInfo>,
    /// Jobs waiting in the queue.
    pub queue_depth: u64,
    /// Queue capacity.
    pub queue_capacity: u64,
    /// Jobs completed (any status).
    pub jobs_done: u64,
    /// Jobs completed with an error.
    pub jobs_failed: u64,
    /// Records run successfully.
    pub records: u64,
    /// Records whose program failed.
    pub records_failed: u64,
    /// Attached clients.
    pub clients: u32,
    /// Arena bytes in use.
    pub arena_used: u64,
    /// Arena size.
    pub arena_size: u64,
    /// Submit-to-completion latency.
    pub latency: Latency,
    /// The GPU side (CUDA backend only): device, generation, swaps, faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<serde_json::Value>,
    /// What `run --recover` got back from a dead service's region (absent when the
    /// service started on a new region).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered: Option<RecoveryInfo>,
    /// One entry per job queue: per GPU on a multi-GPU service (`run --devices`), else
    /// the one queue.
    #[serde(default)]
    pub queues: Vec<QueueInfo>,
}

/// One job queue in `status`: on a multi-GPU service, one GPU's share of the work.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct QueueInfo {
    /// Queue index (the `device` a job names with `job_flags::on_device`).
    pub queue: u32,
    /// CUDA device ordinal serving it (CUDA backend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i32>,
    /// Jobs waiting in it.
    pub depth: u64,
    /// Jobs queued or running (what clients route by).
    pub load: u64,
    /// Jobs submitted to it since start.
    pub submitted: u64,
    /// Jobs of it finished.
    pub done: u64,
    /// Jobs this GPU's backend completed (GPU and host runs).
    #[serde(default)]
    pub jobs_done: u64,
    /// The GPU side of this device (as `gpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<serde_json::Value>,
}

/// What a service started with `--recover` found in the region it adopted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryInfo {
    /// Pid of the service that died.
    pub from_pid: u32,
    /// Programs installed again, at their ids and versions.
    pub programs: u64,
    /// Their maps, contents kept.
    pub maps: u64,
    /// Client buffers kept in the arena.
    pub buffers: u64,
    /// Jobs in the queue after recovery (run by the new workers), `requeued_jobs`
    /// included.
    pub queued_jobs: u64,
    /// Jobs a dead worker had taken and not started, queued again.
    #[serde(default)]
    pub requeued_jobs: u64,
    /// Jobs that were running or taken, ended with `SERVICE_RESTARTED`.
    pub ended_jobs: u64,
    /// Programs that could not be installed again, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}
