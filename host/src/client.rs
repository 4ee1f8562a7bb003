//! The client library: attach to a running service by name, submit jobs through shared
//! memory, and drive the control plane over its socket. No CUDA is involved.
//!
//! ```no_run
//! use host::client::{Client, Job, Wait};
//! let mut c = Client::connect("bpftime-super")?;
//! let prog = c.load_file("examples/vec_add.bpf.o".as_ref(), None)?;
//! let input = c.alloc(8 * 4)?;
//! c.write(&input, 0, &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0, 0, 8, 0, 0, 0])?;
//! let output = c.alloc(4 * 4)?;
//! let t = c.submit(&Job::new(prog.id, 4).input(&input, 8).output(&output, 4), Wait::No)?;
//! let done = c.wait(t, std::time::Duration::from_secs(1))?;
//! assert!(done.ok());
//! # Ok::<(), host::client::ClientError>(())
//! ```
//!
//! A job's buffers must not be touched between `submit` and the completion: the service
//! reads and writes them in place.

use crate::protocol::{MapDump, ProgramInfo, Reply, Request, StatusInfo};
use crate::service::socket_path;
use shm_maps::client::{ClientId, attach, detach};
use shm_maps::layout::{INLINE_MAX, INLINE_WORDS, completion_state, job_flags, state, status};
use shm_maps::region::monotonic_ns;
use shm_maps::{JobDesc, ShmRegion};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Client failures.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The region could not be opened.
    #[error("cannot attach to service `{name}`")]
    Region {
        /// Service name.
        name: String,
        /// Why.
        #[source]
        source: shm_maps::RegionError,
    },
    /// Every client slot is taken.
    #[error(transparent)]
    NoSlot(#[from] shm_maps::client::NoClientSlot),
    /// The control socket failed.
    #[error("control socket {path}: {what}")]
    Socket {
        /// Socket path.
        path: String,
        /// What was attempted.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The service answered with an error.
    #[error("{0}")]
    Service(String),
    /// The service's answer could not be understood.
    #[error("bad reply from the service: {0}")]
    Protocol(String),
    /// A file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// Path.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The queue is full.
    #[error("queue full: {capacity} jobs are waiting; retry, or submit with Wait::Block")]
    QueueFull {
        /// Queue capacity.
        capacity: u64,
    },
    /// A job's device-resident input and output buffers are on different GPUs.
    #[error(
        "the job's device-resident input is on GPU {0} and its output on GPU {1}; a job runs on one GPU"
    )]
    BuffersOnTwoDevices(u32, u32),
    /// A job names a GPU the service does not run.
    #[error("the job asks for GPU {device}, the service runs {devices} (devices 0..{devices})")]
    NoSuchDevice {
        /// The device asked for.
        device: u32,
        /// GPUs (job queues) the service has.
        devices: u32,
    },
    /// Every completion slot of this client is in use.
    #[error("{0} jobs already in flight from this client; wait for some first")]
    TooManyInFlight(u32),
    /// Timed out waiting.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The service is stopping or gone.
    #[error("the service is not accepting jobs (state {0})")]
    NotRunning(u32),
    /// The service process died while this client waited on it.
    #[error(
        "service `{name}` (pid {pid}) died; restart it with `bpftime-super run --persistent --name {name} --recover`, which keeps its programs, maps and queued jobs and ends the jobs it was running with SERVICE_RESTARTED (Client::orphans returns their tickets)"
    )]
    ServiceDied {
        /// Service name.
        name: String,
        /// Its pid.
        pid: u32,
    },
    /// A buffer range outside the buffer.
    #[error("range {off}+{len} is outside the {size}-byte buffer")]
    OutOfBuffer {
        /// Offset.
        off: u64,
        /// Length.
        len: u64,
        /// Buffer size.
        size: u64,
    },
}

/// A buffer in the shared arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    /// Arena offset.
    pub off: u64,
    /// Length.
    pub len: u64,
    /// Its emulated-tier slot (0: local memory), from the service's answer to
    /// [`Client::alloc_placed`]; jobs reading it name the slot in their flags.
    pub tier_slot: u8,
}

impl Buffer {
    /// The `len` bytes at `off` within this buffer, in the same tier (jobs on a part of a
    /// buffer pay its tier too).
    pub fn slice(&self, off: u64, len: u64) -> Buffer {
        Buffer {
            off: self.off + off,
            len,
            tier_slot: self.tier_slot,
        }
    }
}

/// A device-resident buffer (CUDA backend): an offset into the GPU's buffer arena. Fill
/// it with [`Client::device_copy`] from a shared buffer; jobs read or write it with
/// [`Job::device_input`] / [`Job::device_output`] without crossing PCIe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceBuffer {
    /// Device arena offset.
    pub off: u64,
    /// Length.
    pub len: u64,
    /// Which of the service's GPUs holds it (0 on a one-GPU service).
    pub device: u32,
}

/// A job to submit. Built with [`Job::new`] and the builder methods.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    desc: JobDesc,
    /// The GPUs of the job's device-resident input and output (buffers on two different
    /// GPUs are refused at submit: one job runs on one GPU).
    input_on: Option<u32>,
    output_on: Option<u32>,
}

impl Job {
    /// A job of `n` records for program `prog_id`.
    pub fn new(prog_id: u32, n: u64) -> Job {
        Job {
            desc: JobDesc {
                prog_id,
                n,
                ..Default::default()
            },
            input_on: None,
            output_on: None,
        }
    }

    /// Input records of `rec_size` bytes in `buf`.
    pub fn input(mut self, buf: &Buffer, rec_size: u32) -> Job {
        self.desc.input_off = buf.off;
        self.desc.input_len = buf.len;
        self.desc.in_rec_size = rec_size;
        self.desc.flags = shm_maps::job_flags::with_tier(self.desc.flags, buf.tier_slot);
        self
    }

    /// Variable-length input: `offsets` holds `n + 1` u64 offsets into `buf`.
    pub fn input_varlen(mut self, buf: &Buffer, offsets: &Buffer) -> Job {
        self.desc.input_off = buf.off;
        self.desc.input_len = buf.len;
        self.desc.offsets_off = offsets.off;
        self.desc.flags |= shm_maps::job_flags::VARLEN;
        self.desc.flags = shm_maps::job_flags::with_tier(self.desc.flags, buf.tier_slot);
        self
    }

    /// Input records of `rec_size` bytes in a device-resident buffer. The job runs on the
    /// GPU that holds it.
    pub fn device_input(mut self, buf: &DeviceBuffer, rec_size: u32) -> Job {
        self.desc.input_off = buf.off;
        self.desc.input_len = buf.len;
        self.desc.in_rec_size = rec_size;
        self.desc.flags = shm_maps::job_flags::with_tier(self.desc.flags, 0);
        self.desc.flags |= shm_maps::job_flags::DEVICE_INPUT;
        self.input_on = Some(buf.device);
        self.on_device(buf.device)
    }

    /// Output records of `rec_size` bytes in a device-resident buffer. The job runs on the
    /// GPU that holds it.
    pub fn device_output(mut self, buf: &DeviceBuffer, rec_size: u32) -> Job {
        self.desc.output_off = buf.off;
        self.desc.output_len = buf.len;
        self.desc.out_rec_size = rec_size;
        self.desc.flags = shm_maps::job_flags::with_out_tier(self.desc.flags, 0);
        self.desc.flags |= shm_maps::job_flags::DEVICE_OUTPUT;
        self.output_on = Some(buf.device);
        self.on_device(buf.device)
    }

    /// Run on the service's GPU `device` (an index into `run --devices`; 0 on a one-GPU
    /// service). Without it, a job goes to the least loaded GPU.
    pub fn on_device(mut self, device: u32) -> Job {
        self.desc.flags = shm_maps::job_flags::on_device(self.desc.flags, device);
        self
    }

    /// Output records of `rec_size` bytes in `buf`.
    pub fn output(mut self, buf: &Buffer, rec_size: u32) -> Job {
        self.desc.output_off = buf.off;
        self.desc.output_len = buf.len;
        self.desc.out_rec_size = rec_size;
        self.desc.flags = shm_maps::job_flags::with_out_tier(self.desc.flags, buf.tier_slot);
        self
    }

    /// Write each record's r0 as a u64 into `buf` (`8 * n` bytes).
    pub fn results(mut self, buf: &Buffer) -> Job {
        self.desc.results_off = buf.off;
        self.desc.flags |= shm_maps::job_flags::RESULTS;
        self
    }

    /// `ctx->args`.
    pub fn args(mut self, args: [u64; 4]) -> Job {
        self.desc.args = args;
        self
    }

    /// Raw descriptor fields, for tests of bad input.
    pub fn desc_mut(&mut self) -> &mut JobDesc {
        &mut self.desc
    }
}

/// What to do when the queue is full.
#[derive(Clone, Copy, Debug)]
pub enum Wait {
    /// Fail with [`ClientError::QueueFull`].
    No,
    /// Retry until queued or the timeout passes.
    Block(Duration),
}

/// A submitted job.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a ticket must be waited for, or its completion slot stays busy"]
pub struct Ticket {
    slot: u32,
    tag: u64,
}

impl Ticket {
    /// The tag echoed in the completion.
    pub fn tag(&self) -> u64 {
        self.tag
    }
}

/// A completed job.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct JobResult {
    /// Status code (see `shm_maps::status`); 0 is success.
    pub status: i32,
    /// Error text, when the status is not 0.
    pub error: Option<String>,
    /// Program id.
    pub prog_id: u32,
    /// Program version the job ran on.
    pub prog_version: u32,
    /// Records that ran.
    pub records_done: u64,
    /// Records that failed.
    pub records_failed: u64,
    /// r0 of the last record.
    pub r0: u64,
    /// Tag from submit.
    pub tag: u64,
    /// Submit-to-completion time in ns.
    pub latency_ns: u64,
    /// Time queued before a worker started it, in ns.
    pub queued_ns: u64,
    /// Run time in ns.
    pub run_ns: u64,
    /// When the job finished (the service's CLOCK_MONOTONIC ns; on the GPU, its clock
    /// calibrated against the host's at start).
    pub finished_ns: u64,
    /// CUDA backend, one-record jobs: the dispatcher's poll round trip that found the job
    /// and its acquire fence, ns (`Completion::gpu_hops`); zeros elsewhere.
    pub gpu_hops: [u32; 2],
    /// The queue (GPU of a multi-GPU service) the job went to.
    pub device: u32,
}

impl JobResult {
    /// Whether every record ran.
    pub fn ok(&self) -> bool {
        self.status == status::OK
    }
}

/// A connection to a service.
pub struct Client {
    name: String,
    region: std::sync::Arc<ShmRegion>,
    id: ClientId,
    sock: Option<(BufReader<UnixStream>, UnixStream)>,
    free: Vec<u32>,
    next_tag: u64,
    /// Jobs whose wait ended with `ServiceDied`: their completion slots stay reserved,
    /// because a service started with `--recover` still ends them.
    orphans: Vec<Ticket>,
    /// How long a control request waits for its reply.
    request_timeout: Option<Duration>,
}

/// When [`Client`]'s `push_all` gives up on a full queue.
#[derive(Clone, Copy, Debug)]
enum PushDeadline {
    /// After one try (`Wait::No`).
    Now,
    /// This long after the first try found the queue full (the clock is read only then).
    After(Duration),
    /// At this instant (a batch's, shared by its queues), after this long.
    At(Instant, Duration),
}

impl Client {
    /// Attaches to the service called `name`.
    pub fn connect(name: &str) -> Result<Client, ClientError> {
        let region = ShmRegion::open(name).map_err(|source| ClientError::Region {
            name: name.into(),
            source,
        })?;
        let region = std::sync::Arc::new(region);
        let id = attach(&region)?;
        let free = region.completion_range(id.slot).rev().collect();
        Ok(Client {
            name: name.into(),
            region,
            id,
            sock: None,
            free,
            next_tag: 1,
            orphans: Vec::new(),
            request_timeout: Some(Self::REQUEST_TIMEOUT),
        })
    }

    /// How long a control request (load, status, map access, alloc…) waits for its reply
    /// by default. The longest legitimate one, a load compiling a large program, takes
    /// seconds; a service that does not answer in this time is stuck.
    pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

    /// Sets how long control requests wait to be sent and for their reply (`None`, or
    /// zero: as long as it takes). A request that times out fails with
    /// [`ClientError::Timeout`] and drops the connection, so that its late reply is never
    /// taken for the next request's. The service may still carry it out (a buffer
    /// allocated, a program loaded): `list` and `status` show what it did.
    pub fn set_request_timeout(&mut self, timeout: Option<Duration>) {
        self.request_timeout = timeout.filter(|t| !t.is_zero());
    }

    /// The region this client is attached to.
    pub fn region(&self) -> &ShmRegion {
        &self.region
    }

    /// This client's slot.
    pub fn id(&self) -> ClientId {
        self.id
    }

    /// Sends one control request and returns the reply's data.
    pub fn request(&mut self, req: &Request) -> Result<serde_json::Value, ClientError> {
        let path = socket_path(&self.name);
        let sock_err = |what: &str| {
            let path = path.display().to_string();
            let what = what.to_string();
            move |source| ClientError::Socket { path, what, source }
        };
        if self.sock.is_none() {
            let s = UnixStream::connect(&path).map_err(sock_err("connect"))?;
            let r = BufReader::new(s.try_clone().map_err(sock_err("clone"))?);
            self.sock = Some((r, s));
        }
        let mut line =
            serde_json::to_string(req).map_err(|e| ClientError::Protocol(e.to_string()))?;
        line.push('\n');
        let timed_out =
            |e: &std::io::Error| matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut);
        let (_, writer) = self.sock.as_mut().expect("connected above");
        writer
            .set_write_timeout(self.request_timeout)
            .map_err(sock_err("set a write timeout on"))?;
        if let Err(e) = writer.write_all(line.as_bytes()) {
            if timed_out(&e) {
                // A stuck service that stopped reading: part of the line may be out.
                self.sock = None;
                return Err(ClientError::Timeout(
                    self.request_timeout.unwrap_or_default(),
                ));
            }
            // The connection is from before a restart (`run --recover` binds a new
            // socket): the request never left, so send it once on a new connection.
            let s = UnixStream::connect(&path).map_err(sock_err("connect"))?;
            s.set_write_timeout(self.request_timeout)
                .map_err(sock_err("set a write timeout on"))?;
            let r = BufReader::new(s.try_clone().map_err(sock_err("clone"))?);
            self.sock = Some((r, s));
            let (_, writer) = self.sock.as_mut().expect("connected above");
            if let Err(e) = writer.write_all(line.as_bytes()) {
                self.sock = None;
                if timed_out(&e) {
                    return Err(ClientError::Timeout(
                        self.request_timeout.unwrap_or_default(),
                    ));
                }
                return Err(sock_err("write")(e));
            }
        }
        let (reader, writer) = self.sock.as_mut().expect("connected above");
        writer
            .set_read_timeout(self.request_timeout)
            .map_err(sock_err("set a read timeout on"))?;
        let mut answer = String::new();
        let n = match reader.read_line(&mut answer) {
            Ok(n) => n,
            Err(e) if timed_out(&e) => {
                self.sock = None;
                return Err(ClientError::Timeout(
                    self.request_timeout.unwrap_or_default(),
                ));
            }
            Err(e) => return Err(sock_err("read")(e)),
        };
        if n == 0 {
            self.sock = None;
            return Err(ClientError::Service(
                "the service closed the connection".into(),
            ));
        }
        let reply: Reply =
            serde_json::from_str(&answer).map_err(|e| ClientError::Protocol(e.to_string()))?;
        if reply.ok {
            Ok(reply.data)
        } else {
            Err(ClientError::Service(
                reply.error.unwrap_or_else(|| "unknown error".into()),
            ))
        }
    }

    fn typed<T: serde::de::DeserializeOwned>(&mut self, req: &Request) -> Result<T, ClientError> {
        let v = self.request(req)?;
        serde_json::from_value(v).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    fn object(path: &Path) -> Result<(String, String), ClientError> {
        let bytes = std::fs::read(path).map_err(|source| ClientError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        Ok((file, crate::hex::encode(&bytes)))
    }

    /// Verifies and installs a program from an object file.
    pub fn load_file(
        &mut self,
        path: &Path,
        prog: Option<&str>,
    ) -> Result<ProgramInfo, ClientError> {
        self.load_file_as(path, prog, None)
    }

    /// Like [`Client::load_file`], installing under `name`.
    pub fn load_file_as(
        &mut self,
        path: &Path,
        prog: Option<&str>,
        name: Option<&str>,
    ) -> Result<ProgramInfo, ClientError> {
        self.load_file_placed(path, prog, name, &[])
    }

    /// Like [`Client::load_file_as`], choosing where maps live: `MAP=device` or `MAP=shm`
    /// (CUDA backend; see `Request::Load`).
    pub fn load_file_placed(
        &mut self,
        path: &Path,
        prog: Option<&str>,
        name: Option<&str>,
        placement: &[String],
    ) -> Result<ProgramInfo, ClientError> {
        let (file, object_hex) = Self::object(path)?;
        self.typed(&Request::Load {
            file,
            object_hex,
            prog: prog.map(str::to_string),
            name: name.map(str::to_string),
            placement: placement.to_vec(),
        })
    }

    /// Installs a program from bytes (ELF or raw bytecode) under `name`.
    pub fn load_bytes(
        &mut self,
        file: &str,
        bytes: &[u8],
        name: Option<&str>,
    ) -> Result<ProgramInfo, ClientError> {
        self.typed(&Request::Load {
            file: file.into(),
            object_hex: crate::hex::encode(bytes),
            prog: None,
            name: name.map(str::to_string),
            placement: Vec::new(),
        })
    }

    /// Hot-swaps the program installed as `name` with the one in `path`.
    pub fn replace_file(
        &mut self,
        name: &str,
        path: &Path,
        prog: Option<&str>,
    ) -> Result<ProgramInfo, ClientError> {
        let (file, object_hex) = Self::object(path)?;
        self.typed(&Request::Replace {
            name: name.into(),
            file,
            object_hex,
            prog: prog.map(str::to_string),
        })
    }

    /// Hot-swaps the program installed as `name` with `bytes`.
    pub fn replace_bytes(
        &mut self,
        name: &str,
        file: &str,
        bytes: &[u8],
    ) -> Result<ProgramInfo, ClientError> {
        self.typed(&Request::Replace {
            name: name.into(),
            file: file.into(),
            object_hex: crate::hex::encode(bytes),
            prog: None,
        })
    }

    /// Removes a program (by id or name).
    pub fn unload(&mut self, prog: &str) -> Result<ProgramInfo, ClientError> {
        self.typed(&Request::Unload { prog: prog.into() })
    }

    /// Installed programs.
    pub fn list(&mut self) -> Result<Vec<ProgramInfo>, ClientError> {
        self.typed(&Request::List)
    }

    /// The id of the program called `name` (or the id itself, given as digits).
    pub fn resolve(&mut self, name: &str) -> Result<ProgramInfo, ClientError> {
        self.list()?
            .into_iter()
            .find(|p| p.name == name || p.id.to_string() == name)
            .ok_or_else(|| ClientError::Service(format!("no program `{name}` is loaded")))
    }

    /// Attaches directly to a map in shared memory by its directory name `program:map`.
    /// Reads and writes go straight to the region, concurrently with running jobs (with the
    /// consistency rules of `shm_maps::maps`), without the control socket.
    pub fn open_map(
        &self,
        name: &str,
    ) -> Result<std::sync::Arc<dyn ebpf::maps::MapOps>, ClientError> {
        let e = self
            .region
            .find_map(name)
            .ok_or_else(|| ClientError::Service(format!("no map `{name}` in the directory")))?;
        if e.flags & shm_maps::layout::MAP_FLAG_DEVICE != 0 {
            return Err(ClientError::Service(format!(
                "map `{name}` lives in GPU memory: read it with `map dump` (Client::map_dump)"
            )));
        }
        let kind = ebpf::MapKind::from_id(e.kind).ok_or_else(|| {
            ClientError::Protocol(format!("map `{name}` has unknown kind {}", e.kind))
        })?;
        let map = name.split_once(':').map_or(name, |(_, m)| m);
        let def = ebpf::MapDef {
            name: map.to_string(),
            kind,
            key_size: e.key_size,
            value_size: e.value_size,
            max_entries: e.max_entries,
            flags: e.flags,
            origin: ebpf::MapOrigin::Manual,
            init: None,
        };
        shm_maps::maps::open_in(&self.region, e.data_off, &def, e.threads)
            .map_err(|err| ClientError::Service(format!("cannot attach to map `{name}`: {err}")))
    }

    /// A map's contents.
    pub fn map_dump(&mut self, map: &str) -> Result<MapDump, ClientError> {
        self.typed(&Request::MapDump { map: map.into() })
    }

    /// Creates or updates one map element.
    pub fn map_update(
        &mut self,
        map: &str,
        key: &[u8],
        value: &[u8],
        flags: u64,
    ) -> Result<(), ClientError> {
        self.request(&Request::MapUpdate {
            map: map.into(),
            key_hex: crate::hex::encode(key),
            value_hex: crate::hex::encode(value),
            flags,
        })
        .map(|_| ())
    }

    /// Service status.
    pub fn status(&mut self) -> Result<StatusInfo, ClientError> {
        self.typed(&Request::Status)
    }

    /// Stops the service (draining, or cancelling with `now`).
    pub fn stop(&mut self, now: bool) -> Result<(), ClientError> {
        self.request(&Request::Stop { now }).map(|_| ())
    }

    /// Allocates a buffer in the arena.
    pub fn alloc(&mut self, len: u64) -> Result<Buffer, ClientError> {
        self.alloc_placed(len, None)
    }

    /// Allocates a buffer in the arena, in an emulated tier with `placement`
    /// (`cxl:LATENCY_NS[:GBPS]`): a job reading its input from it fetches each record
    /// through the tier (the latency, and the record's bytes through the cap) before the
    /// program runs on it, on the CPU backend and on the GPU alike (there a cap needs a
    /// one-GPU service).
    pub fn alloc_placed(
        &mut self,
        len: u64,
        placement: Option<&str>,
    ) -> Result<Buffer, ClientError> {
        let v = self.request(&Request::Alloc {
            client: self.id.slot,
            generation: self.id.generation,
            len,
            placement: placement.map(str::to_string),
        })?;
        let off = v["off"]
            .as_u64()
            .ok_or_else(|| ClientError::Protocol("alloc reply has no offset".into()))?;
        let tier_slot = match (placement, v["tier_slot"].as_u64()) {
            (None, _) => 0,
            (Some(_), Some(s @ 1..=255)) => s as u8,
            (Some(p), _) => {
                return Err(ClientError::Protocol(format!(
                    "alloc reply for placement `{p}` names no tier slot"
                )));
            }
        };
        Ok(Buffer {
            off,
            len,
            tier_slot,
        })
    }

    /// Allocates a device-resident buffer on the first GPU (CUDA backend only).
    pub fn device_alloc(&mut self, len: u64) -> Result<DeviceBuffer, ClientError> {
        self.device_alloc_on(0, len)
    }

    /// Allocates a device-resident buffer on the service's GPU `device`.
    pub fn device_alloc_on(&mut self, device: u32, len: u64) -> Result<DeviceBuffer, ClientError> {
        let v = self.request(&Request::DeviceAlloc {
            client: self.id.slot,
            generation: self.id.generation,
            len,
            device,
        })?;
        let off = v["off"]
            .as_u64()
            .ok_or_else(|| ClientError::Protocol("device_alloc reply has no offset".into()))?;
        Ok(DeviceBuffer { off, len, device })
    }

    /// GPUs (job queues) the service runs: 1 on a one-GPU or CPU service.
    pub fn devices(&self) -> u32 {
        self.region.queue_count()
    }

    /// Copies `len` bytes between the shared buffer `shm` (from its start) and the device
    /// buffer `dev`: upload with `to_device`, download otherwise.
    pub fn device_copy(
        &mut self,
        to_device: bool,
        shm: &Buffer,
        dev: &DeviceBuffer,
        len: u64,
    ) -> Result<(), ClientError> {
        self.request(&Request::DeviceCopy {
            client: self.id.slot,
            generation: self.id.generation,
            to_device,
            shm_off: shm.off,
            dev_off: dev.off,
            len,
            device: dev.device,
        })
        .map(|_| ())
    }

    /// Frees a device-resident buffer.
    pub fn device_free(&mut self, buf: DeviceBuffer) -> Result<(), ClientError> {
        self.request(&Request::DeviceFree {
            client: self.id.slot,
            generation: self.id.generation,
            off: buf.off,
            device: buf.device,
        })
        .map(|_| ())
    }

    /// Frees a buffer.
    pub fn free(&mut self, buf: Buffer) -> Result<(), ClientError> {
        self.request(&Request::Free {
            client: self.id.slot,
            generation: self.id.generation,
            off: buf.off,
        })
        .map(|_| ())
    }

    fn check(buf: &Buffer, off: u64, len: u64) -> Result<(), ClientError> {
        if off.checked_add(len).is_none_or(|e| e > buf.len) {
            return Err(ClientError::OutOfBuffer {
                off,
                len,
                size: buf.len,
            });
        }
        Ok(())
    }

    /// Copies `data` into `buf` at `off`.
    pub fn write(&self, buf: &Buffer, off: u64, data: &[u8]) -> Result<(), ClientError> {
        Self::check(buf, off, data.len() as u64)?;
        self.region
            .write_arena(buf.off + off, data)
            .ok_or(ClientError::OutOfBuffer {
                off,
                len: data.len() as u64,
                size: buf.len,
            })
    }

    /// Copies `len` bytes of `buf` from `off`.
    pub fn read(&self, buf: &Buffer, off: u64, len: u64) -> Result<Vec<u8>, ClientError> {
        Self::check(buf, off, len)?;
        self.region
            .read_arena(buf.off + off, len)
            .ok_or(ClientError::OutOfBuffer {
                off,
                len,
                size: buf.len,
            })
    }

    /// Jobs this client may still submit before waiting.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    fn prepare(&mut self, job: &Job, queue: u32) -> Result<(JobDesc, u32, u64), ClientError> {
        let slot = self.free.pop().ok_or(ClientError::TooManyInFlight(
            self.region.header().completions_per_client,
        ))?;
        let tag = self.next_tag;
        self.next_tag += 1;
        self.region
            .begin_completion_on(slot, tag, monotonic_ns(), queue)
            .expect("own slot exists");
        let mut d = job.desc;
        d.client = self.id.slot;
        d.completion = slot;
        d.tag = tag;
        Ok((d, slot, tag))
    }

    /// A copy of `d`'s input for its queue slot when it is small enough
    /// (`job_flags::INLINE`): the GPU then reads it with the descriptor, one PCIe round trip
    /// sooner. The arena copy stays the input of record (programs cannot write it).
    fn inline_input(&self, d: &mut JobDesc) -> [u64; INLINE_WORDS] {
        let mut w = [0u64; INLINE_WORDS];
        let bytes = d.n.saturating_mul(d.in_rec_size as u64);
        if d.flags & (job_flags::DEVICE_INPUT | job_flags::VARLEN) != 0
            || bytes == 0
            || bytes > INLINE_MAX as u64
            || bytes > d.input_len
        {
            return w;
        }
        let Some(p) = self.region.arena_ptr(d.input_off, bytes) else {
            return w; // outside the arena: the service reports it
        };
        // SAFETY: `bytes` (<= INLINE_MAX) arena bytes at `p`, checked by `arena_ptr`; the
        // client owns its input buffer while submitting; `w` has room for INLINE_MAX bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(p.as_ptr(), w.as_mut_ptr().cast::<u8>(), bytes as usize)
        };
        d.flags |= job_flags::INLINE;
        w
    }

    /// Submits one job.
    pub fn submit(&mut self, job: &Job, wait: Wait) -> Result<Ticket, ClientError> {
        if self.region.queue_count() == 1 {
            return self.submit_one(job, wait);
        }
        let mut v = self.submit_batch(std::slice::from_ref(job), wait)?;
        Ok(v.pop().expect("one job was queued"))
    }

    /// [`Client::submit`] to a service with one queue: what `submit_batch` does for one
    /// job, with nothing allocated (a one-record job's round trip is a few µs, and the
    /// batch path's bookkeeping took a tenth of it).
    fn submit_one(&mut self, job: &Job, wait: Wait) -> Result<Ticket, ClientError> {
        let st = self.region.header().state.load(Ordering::Acquire);
        if st != state::READY {
            return Err(ClientError::NotRunning(st));
        }
        if self.free.is_empty() {
            return Err(ClientError::TooManyInFlight(
                self.region.header().completions_per_client,
            ));
        }
        one_device_each(std::slice::from_ref(job))?;
        if let Some(device) = shm_maps::job_flags::device_of(job.desc.flags)
            && device != 0
        {
            return Err(ClientError::NoSuchDevice { device, devices: 1 });
        }
        let (mut d, slot, tag) = self.prepare(job, 0)?;
        let words = self.inline_input(&mut d);
        let client = self.region.client(self.id.slot).expect("own slot");
        client.add_submitted(1);
        // No clock read before the push: the job's round trip waits for every step before
        // its slot is published (a clock read took 60-70 ns on the H200 machine's host).
        let deadline = match wait {
            Wait::No => PushDeadline::Now,
            Wait::Block(t) => PushDeadline::After(t),
        };
        let queue = self.region.queue_at(0).expect("one queue");
        let (done, err) = self.push_all(&queue, &[d], &[words], deadline);
        if done == 0 {
            client.sub_submitted(1);
            self.release(slot);
            return Err(err.expect("not queued only after a failure"));
        }
        shm_maps::wake::wake(self.region.header(), false);
        Ok(Ticket { slot, tag })
    }

    /// Submits several jobs with as few queue operations as possible. With `Wait::No`, the
    /// jobs that did not fit are not queued and the call fails with `QueueFull` after
    /// returning nothing; use `Wait::Block` to queue all of them.
    pub fn submit_batch(&mut self, jobs: &[Job], wait: Wait) -> Result<Vec<Ticket>, ClientError> {
        let st = self.region.header().state.load(Ordering::Acquire);
        if st != state::READY {
            return Err(ClientError::NotRunning(st));
        }
        if jobs.len() > self.free.len() {
            return Err(ClientError::TooManyInFlight(
                self.region.header().completions_per_client,
            ));
        }
        let queues = self.region.queue_count();
        // One GPU: nothing to balance (and two fewer shared lines to read per submit).
        let loads: Vec<u64> = if queues == 1 {
            vec![0]
        } else {
            (0..queues)
                .map(|q| self.region.queue_at(q).map_or(0, |q| q.load()))
                .collect()
        };
        one_device_each(jobs)?;
        let asked: Vec<Option<u32>> = jobs
            .iter()
            .map(|j| shm_maps::job_flags::device_of(j.desc.flags))
            .collect();
        let routes = route(&asked, &loads)?;
        let mut descs = Vec::with_capacity(jobs.len());
        let mut inline = Vec::with_capacity(jobs.len());
        let mut tickets = Vec::with_capacity(jobs.len());
        for (j, &q) in jobs.iter().zip(&routes) {
            let (mut d, slot, tag) = self.prepare(j, q)?;
            inline.push(self.inline_input(&mut d));
            descs.push(d);
            tickets.push(Ticket { slot, tag });
        }
        let client = self.region.client(self.id.slot).expect("own slot");
        client.add_submitted(descs.len() as u64);
        // One deadline for every queue's pushes.
        let deadline = match wait {
            Wait::No => PushDeadline::Now,
            Wait::Block(t) => PushDeadline::At(Instant::now() + t, t),
        };
        let mut queued = vec![false; jobs.len()];
        let mut failure = None;
        // One queue at a time, each with as few pushes as possible (jobs keep their order
        // within a queue).
        for q in 0..queues {
            let idx: Vec<usize> = (0..jobs.len()).filter(|&i| routes[i] == q).collect();
            if idx.is_empty() {
                continue;
            }
            let queue = self.region.queue_at(q).expect("q < queue_count");
            let (qd, qi): (Vec<JobDesc>, Vec<[u64; INLINE_WORDS]>) =
                idx.iter().map(|&i| (descs[i], inline[i])).unzip();
            let (done, err) = self.push_all(&queue, &qd, &qi, deadline);
            for &i in &idx[..done] {
                queued[i] = true;
            }
            match err {
                // This queue is full: the others may still take theirs (within the same
                // deadline).
                Some(e @ (ClientError::QueueFull { .. } | ClientError::Timeout(_))) => {
                    failure.get_or_insert(e);
                }
                Some(e) => {
                    failure = Some(e);
                    break;
                }
                None => {}
            }
        }
        let left = queued.iter().filter(|q| !**q).count();
        if left > 0 {
            // Hand back what was not queued.
            client.sub_submitted(left as u64);
            let mut kept = Vec::with_capacity(jobs.len() - left);
            for (t, q) in tickets.into_iter().zip(&queued) {
                if *q {
                    kept.push(t);
                } else {
                    self.release(t.slot);
                }
            }
            tickets = kept;
            let e = failure.expect("jobs are left only after a failure");
            if matches!(
                e,
                ClientError::ServiceDied { .. } | ClientError::NotRunning(_)
            ) {
                // The jobs that did get queued keep their slots: a service started with
                // `--recover` still ends them (`Client::orphans` returns their tickets).
                self.orphans.append(&mut tickets);
                return Err(e);
            }
            if tickets.is_empty() {
                return Err(e);
            }
        }
        shm_maps::wake::wake(self.region.header(), descs.len() > 1);
        Ok(tickets)
    }

    /// Pushes `descs` into `q` until all are queued, the deadline passes (`None`: one
    /// try), or the service is found dead or not ready. Returns how many were queued, and
    /// the error when not all were.
    fn push_all(
        &self,
        q: &shm_maps::JobQueue<'_>,
        descs: &[JobDesc],
        inline: &[[u64; INLINE_WORDS]],
        deadline: PushDeadline,
    ) -> (usize, Option<ClientError>) {
        let mut done = q.push_batch_inline(descs, inline);
        if done == descs.len() {
            return (done, None);
        }
        // The queue is full: only now is the clock read.
        let deadline = match deadline {
            PushDeadline::Now => None,
            PushDeadline::After(t) => Some((Instant::now() + t, t)),
            PushDeadline::At(d, t) => Some((d, t)),
        };
        let mut checked = Instant::now();
        loop {
            shm_maps::wake::wake(self.region.header(), true);
            // A full queue that never drains: is anyone draining it? (A service that
            // is recovering the region is not READY: stop pushing until it is.)
            if checked.elapsed() >= Self::LIVENESS_PERIOD {
                checked = Instant::now();
                if let Some(e) = self.check_alive().err().or_else(|| {
                    let st = self.region.header().state.load(Ordering::Acquire);
                    (st != state::READY).then_some(ClientError::NotRunning(st))
                }) {
                    return (done, Some(e));
                }
            }
            match deadline {
                None => {
                    return (
                        done,
                        Some(ClientError::QueueFull {
                            capacity: q.capacity(),
                        }),
                    );
                }
                Some((d, t)) if Instant::now() >= d => {
                    return (done, Some(ClientError::Timeout(t)));
                }
                Some(_) => std::thread::yield_now(),
            }
            done += q.push_batch_inline(&descs[done..], &inline[done..]);
            if done == descs.len() {
                return (done, None);
            }
        }
    }

    /// How often a waiting client checks that the service process still runs.
    const LIVENESS_PERIOD: Duration = Duration::from_millis(10);

    /// `ServiceDied` if the service process is gone.
    fn check_alive(&self) -> Result<(), ClientError> {
        if self.region.service_alive() {
            Ok(())
        } else {
            Err(ClientError::ServiceDied {
                name: self.name.clone(),
                pid: self.region.header().service_pid.load(Ordering::Relaxed),
            })
        }
    }

    fn release(&mut self, slot: u32) {
        if let Some(c) = self.region.completion(slot) {
            c.state.store(completion_state::FREE, Ordering::Relaxed);
        }
        self.free.push(slot);
    }

    /// The result of `t`, if it has completed; the ticket is consumed when it has.
    pub fn poll(&mut self, t: &Ticket) -> Option<JobResult> {
        let c = self.region.read_completion(t.slot)?;
        let error = (c.status != status::OK).then(|| {
            self.region
                .message(c.message)
                .unwrap_or_else(|| format!("status {} (message overwritten)", c.status))
        });
        let r = JobResult {
            status: c.status,
            error,
            prog_id: c.prog_id,
            prog_version: c.prog_version,
            records_done: c.records_done,
            records_failed: c.records_failed,
            r0: c.r0,
            tag: c.tag,
            latency_ns: c.finished_ns.saturating_sub(c.submitted_ns),
            queued_ns: c.started_ns.saturating_sub(c.submitted_ns),
            run_ns: c.finished_ns.saturating_sub(c.started_ns),
            finished_ns: c.finished_ns,
            gpu_hops: c.gpu_hops,
            device: self.region.completion_queue(t.slot),
        };
        self.release(t.slot);
        Some(r)
    }

    /// Waits for `t`: spins briefly, then yields, checking every 10 ms that the service
    /// still runs (`ServiceDied` when it does not).
    pub fn wait(&mut self, t: Ticket, timeout: Duration) -> Result<JobResult, ClientError> {
        let start = Instant::now();
        let mut checked = start;
        let mut spins = 0u32;
        let mut torn_warned = false;
        loop {
            if let Some(r) = self.poll(&t) {
                return Ok(r);
            }
            spins += 1;
            if spins < 20_000 {
                std::hint::spin_loop();
            } else {
                if start.elapsed() > timeout {
                    // The slot stays reserved (not returned to `free`): the job may still
                    // complete into it.
                    let _ = t;
                    return Err(ClientError::Timeout(timeout));
                }
                if checked.elapsed() >= Self::LIVENESS_PERIOD {
                    checked = Instant::now();
                    // DONE whose fields never match its check word: the GPU's writes
                    // arrive within microseconds, so this is a lost context (recovery ends
                    // the job) or a bug; said once, then the wait goes on.
                    if !torn_warned
                        && start.elapsed() >= Duration::from_secs(1)
                        && self.region.completion(t.slot).is_some_and(|c| {
                            c.state.load(Ordering::Acquire) == completion_state::DONE_CHECKED
                        })
                    {
                        torn_warned = true;
                        tracing::warn!(
                            slot = t.slot,
                            "completion is DONE but its fields do not match its check word; still waiting"
                        );
                    }
                    if let Err(e) = self.check_alive() {
                        // A last look: the job may have completed just before the end.
                        if let Some(r) = self.poll(&t) {
                            return Ok(r);
                        }
                        self.orphans.push(t);
                        return Err(e);
                    }
                }
                std::thread::yield_now();
            }
        }
    }

    /// The jobs whose waits ended with [`ClientError::ServiceDied`], and those a submit
    /// queued before it failed because the service died or stopped accepting jobs. Their
    /// completion slots stay reserved: once a service started with `--recover` runs again, waiting
    /// on these tickets gives each job's end (its result if it was still queued,
    /// `SERVICE_RESTARTED` if it was running).
    pub fn orphans(&mut self) -> Vec<Ticket> {
        std::mem::take(&mut self.orphans)
    }

    /// Whether the service is serving again (after a restart with `--recover`).
    pub fn service_ready(&self) -> bool {
        self.region.service_alive()
            && self.region.header().state.load(Ordering::Acquire) == state::READY
    }

    /// Submits `job` and waits for it.
    pub fn run(&mut self, job: &Job, timeout: Duration) -> Result<JobResult, ClientError> {
        let t = self.submit(job, Wait::Block(timeout))?;
        self.wait(t, timeout)
    }
}

/// Refuses a job whose device-resident input and output are on different GPUs.
fn one_device_each(jobs: &[Job]) -> Result<(), ClientError> {
    for j in jobs {
        if let (Some(i), Some(o)) = (j.input_on, j.output_on)
            && i != o
        {
            return Err(ClientError::BuffersOnTwoDevices(i, o));
        }
    }
    Ok(())
}

/// The queue each job goes to: the GPU it asks for, else the least loaded one, counting
/// the jobs this call has already routed (ties go to the lower index). `loads` has one
/// entry per queue: its jobs queued or running.
pub fn route(asked: &[Option<u32>], loads: &[u64]) -> Result<Vec<u32>, ClientError> {
    let devices = loads.len() as u32;
    let mut load = loads.to_vec();
    asked
        .iter()
        .map(|a| {
            let q = match *a {
                Some(d) if d >= devices => {
                    return Err(ClientError::NoSuchDevice { device: d, devices });
                }
                Some(d) => d,
                None => (0..devices).min_by_key(|&q| load[q as usize]).unwrap_or(0),
            };
            if let Some(l) = load.get_mut(q as usize) {
                *l += 1;
            }
            Ok(q)
        })
        .collect()
}

impl Drop for Client {
    fn drop(&mut self) {
        detach(&self.region, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_jobs_go_where_they_ask() {
        assert_eq!(
            route(&[Some(1), Some(0), Some(1)], &[0, 100]).unwrap(),
            [1, 0, 1]
        );
    }

    #[test]
    fn unnamed_jobs_fill_the_least_loaded_queue_first() {
        // Queue 0 has 3 jobs more: the first three go to queue 1, then they alternate
        // (ties to the lower index).
        assert_eq!(route(&[None; 7], &[5, 2]).unwrap(), [1, 1, 1, 0, 1, 0, 1]);
        // Named jobs count towards the load the unnamed ones see.
        assert_eq!(
            route(&[Some(0), Some(0), None, None], &[0, 0]).unwrap(),
            [0, 0, 1, 1]
        );
        // One queue: everything goes there.
        assert_eq!(route(&[None; 3], &[9]).unwrap(), [0, 0, 0]);
    }

    #[test]
    fn a_job_on_buffers_of_two_gpus_is_refused() {
        let on = |device| DeviceBuffer {
            off: 0,
            len: 64,
            device,
        };
        let same = Job::new(1, 8)
            .device_input(&on(1), 8)
            .device_output(&on(1), 8);
        assert!(one_device_each(&[same]).is_ok());
        assert_eq!(shm_maps::job_flags::device_of(same.desc.flags), Some(1));
        let two = Job::new(1, 8)
            .device_input(&on(0), 8)
            .device_output(&on(1), 8);
        match one_device_each(&[same, two]) {
            Err(ClientError::BuffersOnTwoDevices(0, 1)) => {}
            other => panic!("expected BuffersOnTwoDevices(0, 1), got {other:?}"),
        }
    }

    #[test]
    fn a_gpu_the_service_lacks_is_an_error() {
        match route(&[None, Some(2)], &[0, 0]) {
            Err(ClientError::NoSuchDevice {
                device: 2,
                devices: 2,
            }) => {}
            other => panic!("expected NoSuchDevice, got {other:?}"),
        }
    }
}
