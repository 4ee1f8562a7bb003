//! Object access traces: the in-memory [`Trace`], its compact binary file format, and CSV
//! from other tools.
//!
//! A trace is a table of *objects* (a tensor, a layer's weights, a KV-cache block: anything
//! an offload framework moves between host and GPU as one unit) and a time-ordered list of
//! *transfers* ([`Access`]) naming an object by its dense `u32` id. Host→device rows are
//! the cache lookups the simulator replays (`crate::sim`); device→host rows are kept as the
//! framework's own offload traffic, for comparison.
//!
//! ## Binary format (`BPFLLMC\0`, version 1)
//!
//! Little-endian throughout. A header, then any number of chunks until the end of the file:
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0  | 8 | magic `BPFLLMC\0` |
//! | 8  | 4 | version, `u32` = 1 |
//! | 12 | 4 | flags, `u32`, must be 0 |
//!
//! Each chunk starts with `tag: u32, count: u32`:
//!
//! * tag 1, **objects**: `count` entries of `bytes: u64, name_len: u32, name: [u8;
//!   name_len]` (UTF-8, may be empty, at most 1 MiB). Ids are dense, in the order objects
//!   appear across all object chunks of the file: the first object is 0.
//! * tag 2, **accesses**: `count` fixed 32-byte records:
//!
//!   | offset | size | field |
//!   |-------:|-----:|-------|
//!   | 0  | 8 | `time_ns: u64`, start of the transfer |
//!   | 8  | 8 | `bytes: u64`, bytes the transfer moved |
//!   | 16 | 4 | `object: u32`, an id defined by an earlier object chunk |
//!   | 20 | 4 | `duration_ns: u32`, 0 = unknown (longer transfers saturate at 2³²−1 ns) |
//!   | 24 | 4 | `stream: u32`, a small stream number chosen by the producer, 0 = default/unknown |
//!   | 28 | 1 | `direction: u8`, 0 = host→device, 1 = device→host |
//!   | 29 | 3 | zero padding |
//!
//! Chunks let a producer append as it goes ([`TraceWriter`]): objects are written before
//! the first access naming them, and a reader can stop at any chunk boundary. A file cut
//! inside a chunk, a foreign file, an unknown tag, version or direction, or an access to an
//! object not yet defined is an error naming the byte offset ([`TraceError::Binary`]): of
//! the wrong field, or of the first byte of the header, chunk header, entry or record that
//! the file cuts short.
//!
//! ## CSV
//!
//! A header line naming at least `time_ns,object,bytes,direction` (any order; optional
//! `duration_ns` and `stream` columns are read, other columns ignored), then one row per
//! transfer in time order. `object` is any string id (RFC 4180 quoting for commas and
//! quotes); `direction` is `h2d`/`HtoD` or `d2h`/`DtoH` (any case). Blank lines and lines
//! starting with `#` are skipped. An object's size is the largest `bytes` of its rows.
//! Errors name the line ([`TraceError::Csv`]).
//!
//! In both formats the order of the transfers is the order the simulator replays; the
//! times are not checked (they only place points on the plot's time axis).

use std::collections::HashMap;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The first 8 bytes of a binary trace.
pub const MAGIC: [u8; 8] = *b"BPFLLMC\0";
/// The binary format version this crate reads and writes.
pub const VERSION: u32 = 1;
/// Size of the binary header.
pub const HEADER_BYTES: usize = 16;
/// Size of one access record.
pub const ACCESS_RECORD_BYTES: usize = 32;
/// The longest object name the format allows.
pub const MAX_NAME_BYTES: usize = 1 << 20;
/// Chunk tag: object table entries.
pub const TAG_OBJECTS: u32 = 1;
/// Chunk tag: access records.
pub const TAG_ACCESSES: u32 = 2;

/// Reading, parsing or writing a trace failed.
#[derive(Debug, Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("cannot read {path}")]
    Io {
        /// The file (empty when reading from a reader without one).
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Writing failed.
    #[error("cannot write the trace")]
    Write {
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A parse error inside a named file.
    #[error("trace {path}")]
    InFile {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        #[source]
        source: Box<TraceError>,
    },
    /// Neither a binary trace nor CSV with the expected header.
    #[error(
        "not an llm-cache trace: expected the magic `BPFLLMC\\0` or a CSV header with time_ns,object,bytes,direction; found {found}"
    )]
    Foreign {
        /// The start of the file, escaped.
        found: String,
    },
    /// A malformed binary trace.
    #[error("byte {offset}: {message}")]
    Binary {
        /// Offset of the first byte that is wrong or missing.
        offset: u64,
        /// What was expected and what was found.
        message: String,
    },
    /// A malformed CSV trace.
    #[error("line {line}: {message}")]
    Csv {
        /// 1-based line number.
        line: usize,
        /// What was expected and what was found.
        message: String,
    },
    /// An access names an object the trace does not define.
    #[error("access {index} names object {object}, but only {objects} objects are defined")]
    UnknownObject {
        /// The access's position.
        index: usize,
        /// The object id it names.
        object: u32,
        /// How many objects were defined.
        objects: usize,
    },
}

impl TraceError {
    /// The error without the file it happened in.
    pub fn root(&self) -> &TraceError {
        match self {
            TraceError::InFile { source, .. } => source.root(),
            e => e,
        }
    }
}

/// Which way a transfer went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Direction {
    /// Host to device: the object was needed on the GPU (a cache lookup).
    #[serde(rename = "h2d")]
    HostToDevice,
    /// Device to host: an offload or write-back by the framework.
    #[serde(rename = "d2h")]
    DeviceToHost,
}

impl Direction {
    /// Parses `h2d`, `HtoD`, `d2h`, `DtoH` (any case).
    pub fn parse(s: &str) -> Option<Direction> {
        match s.to_ascii_lowercase().as_str() {
            "h2d" | "htod" => Some(Direction::HostToDevice),
            "d2h" | "dtoh" => Some(Direction::DeviceToHost),
            _ => None,
        }
    }

    /// The CSV spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::HostToDevice => "h2d",
            Direction::DeviceToHost => "d2h",
        }
    }

    fn code(self) -> u8 {
        match self {
            Direction::HostToDevice => 0,
            Direction::DeviceToHost => 1,
        }
    }
}

/// One cacheable unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Layer or tensor name where known; may be empty (see [`Trace::display_name`]).
    pub name: String,
    /// Its size: what a cache holds and what a miss moves.
    pub bytes: u64,
}

/// One transfer of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Start time in nanoseconds (any epoch).
    pub time_ns: u64,
    /// The object's id: an index into [`Trace::objects`].
    pub object: u32,
    /// Bytes this transfer moved.
    pub bytes: u64,
    /// Which way.
    pub dir: Direction,
    /// How long it took, 0 = unknown.
    pub duration_ns: u32,
    /// The producer's stream number, 0 = default or unknown.
    pub stream: u32,
}

impl Access {
    /// A transfer without duration or stream.
    pub fn new(time_ns: u64, object: u32, bytes: u64, dir: Direction) -> Access {
        Access {
            time_ns,
            object,
            bytes,
            dir,
            duration_ns: 0,
            stream: 0,
        }
    }

    /// The same transfer with a duration (saturating at `u32::MAX` ns).
    pub fn with_duration(mut self, ns: u64) -> Access {
        self.duration_ns = u32::try_from(ns).unwrap_or(u32::MAX);
        self
    }

    /// The same transfer on a stream.
    pub fn with_stream(mut self, stream: u32) -> Access {
        self.stream = stream;
        self
    }
}

/// Which file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Guess from the first bytes: the magic means binary, a `time_ns` header means CSV.
    Auto,
    /// The binary format.
    Binary,
    /// CSV.
    Csv,
}

/// An object table and the transfers that name it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// Objects by id.
    pub objects: Vec<Object>,
    /// Transfers in time order.
    pub accesses: Vec<Access>,
}

/// Builds a [`Trace`]: objects first (each returns its id), then accesses naming them.
#[derive(Debug, Default)]
pub struct TraceBuilder {
    trace: Trace,
    by_name: HashMap<String, u32>,
}

impl TraceBuilder {
    /// Adds an object, or returns the id of the object already named `name` (its size then
    /// becomes the larger of the two). An empty name always makes a new object.
    pub fn object(&mut self, name: &str, bytes: u64) -> u32 {
        if !name.is_empty()
            && let Some(&id) = self.by_name.get(name)
        {
            let o = &mut self.trace.objects[id as usize];
            o.bytes = o.bytes.max(bytes);
            return id;
        }
        let id = u32::try_from(self.trace.objects.len()).expect("more than 2^32 objects");
        self.trace.objects.push(Object {
            name: name.to_string(),
            bytes,
        });
        if !name.is_empty() {
            self.by_name.insert(name.to_string(), id);
        }
        id
    }

    /// Appends a transfer.
    pub fn access(&mut self, a: Access) -> &mut Self {
        self.trace.accesses.push(a);
        self
    }

    /// Checks that every access names a defined object.
    pub fn build(self) -> Result<Trace, TraceError> {
        self.trace.check()?;
        Ok(self.trace)
    }
}

/// Totals of a trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Host→device transfers (the cache lookups).
    pub h2d_accesses: u64,
    /// Their bytes: what the framework moved to the GPU.
    pub h2d_bytes: u64,
    /// Device→host transfers.
    pub d2h_accesses: u64,
    /// Their bytes.
    pub d2h_bytes: u64,
    /// Objects with at least one host→device transfer.
    pub distinct_objects: u64,
    /// Their total size: the working set.
    pub distinct_bytes: u64,
    /// Host→device transfers that carry a duration.
    pub timed_accesses: u64,
    /// Their bytes.
    pub timed_bytes: u64,
    /// Their summed durations.
    pub timed_ns: u64,
}

impl Totals {
    /// Host→device bandwidth measured from the transfers with durations, in GB/s (10⁹
    /// bytes per second), if any.
    pub fn measured_gbps(&self) -> Option<f64> {
        (self.timed_ns > 0 && self.timed_bytes > 0)
            .then(|| self.timed_bytes as f64 / self.timed_ns as f64)
    }
}

impl Trace {
    /// A builder.
    pub fn builder() -> TraceBuilder {
        TraceBuilder::default()
    }

    /// The name to show for object `id`: its name, or `#<id>` when it has none.
    pub fn display_name(&self, id: u32) -> String {
        match self.objects.get(id as usize) {
            Some(o) if !o.name.is_empty() => o.name.clone(),
            _ => format!("#{id}"),
        }
    }

    /// Checks that every access names a defined object.
    pub fn check(&self) -> Result<(), TraceError> {
        let n = self.objects.len();
        match self.accesses.iter().position(|a| a.object as usize >= n) {
            Some(index) => Err(TraceError::UnknownObject {
                index,
                object: self.accesses[index].object,
                objects: n,
            }),
            None => Ok(()),
        }
    }

    /// Counts transfers and bytes.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        let mut seen = vec![false; self.objects.len()];
        for a in &self.accesses {
            match a.dir {
                Direction::HostToDevice => {
                    t.h2d_accesses += 1;
                    t.h2d_bytes += a.bytes;
                    if a.duration_ns > 0 {
                        t.timed_accesses += 1;
                        t.timed_bytes += a.bytes;
                        t.timed_ns += u64::from(a.duration_ns);
                    }
                    if let Some(s) = seen.get_mut(a.object as usize)
                        && !*s
                    {
                        *s = true;
                        t.distinct_objects += 1;
                        t.distinct_bytes += self.objects[a.object as usize].bytes;
                    }
                }
                Direction::DeviceToHost => {
                    t.d2h_accesses += 1;
                    t.d2h_bytes += a.bytes;
                }
            }
        }
        t
    }

    /// Reads a trace file, detecting binary or CSV.
    pub fn read(path: &Path) -> Result<Trace, TraceError> {
        Trace::read_as(path, Format::Auto)
    }

    /// Reads a trace file in the given format.
    pub fn read_as(path: &Path, format: Format) -> Result<Trace, TraceError> {
        let io = |source| TraceError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        Trace::from_reader(BufReader::with_capacity(1 << 20, file), format).map_err(|e| match e {
            TraceError::Io { source, .. } => io(source),
            e => TraceError::InFile {
                path: path.to_path_buf(),
                source: Box::new(e),
            },
        })
    }

    /// Parses a trace from a reader.
    pub fn from_reader<R: Read>(mut r: R, format: Format) -> Result<Trace, TraceError> {
        let mut head = [0u8; 8];
        let got = fill(&mut r, &mut head).map_err(read_error)?;
        let head = &head[..got];
        let binary = match format {
            Format::Binary => true,
            Format::Csv => false,
            Format::Auto => head == MAGIC,
        };
        if binary {
            return parse_binary(head, r);
        }
        let mut text = head.to_vec();
        r.read_to_end(&mut text).map_err(read_error)?;
        if format == Format::Auto && !looks_like_csv(&text) {
            let shown = String::from_utf8_lossy(&text[..text.len().min(24)]).into_owned();
            return Err(TraceError::Foreign {
                found: format!("{shown:?}"),
            });
        }
        parse_csv(&text)
    }

    /// Parses a trace held in memory.
    pub fn parse(bytes: &[u8], format: Format) -> Result<Trace, TraceError> {
        Trace::from_reader(bytes, format)
    }

    /// Writes the binary format to a file.
    pub fn write_binary(&self, path: &Path) -> Result<(), TraceError> {
        let file = std::fs::File::create(path).map_err(|source| TraceError::Write { source })?;
        self.write_binary_to(BufWriter::new(file))?
            .flush()
            .map_err(|source| TraceError::Write { source })
    }

    /// Writes the binary format (one object chunk, then access chunks); returns the writer.
    pub fn write_binary_to<W: Write>(&self, out: W) -> Result<W, TraceError> {
        self.check()?;
        let mut w = TraceWriter::new(out)?;
        for o in &self.objects {
            w.object(&o.name, o.bytes);
        }
        for a in &self.accesses {
            w.access(*a)?;
        }
        w.finish()
    }

    /// Writes CSV (`time_ns,object,bytes,direction,duration_ns`); unnamed objects appear
    /// as `#<id>`.
    pub fn write_csv<W: Write>(&self, mut out: W) -> Result<W, TraceError> {
        let e = |source| TraceError::Write { source };
        self.check()?;
        writeln!(out, "time_ns,object,bytes,direction,duration_ns").map_err(e)?;
        let names: Vec<String> = (0..self.objects.len() as u32)
            .map(|i| csv_quote(&self.display_name(i)))
            .collect();
        for a in &self.accesses {
            writeln!(
                out,
                "{},{},{},{},{}",
                a.time_ns,
                names[a.object as usize],
                a.bytes,
                a.dir.as_str(),
                a.duration_ns
            )
            .map_err(e)?;
        }
        Ok(out)
    }
}

fn read_error(source: io::Error) -> TraceError {
    TraceError::Io {
        path: PathBuf::new(),
        source,
    }
}

/// Reads until `buf` is full or the input ends; returns how many bytes came.
fn fill<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// A binary input with its position.
struct Input<R> {
    r: R,
    offset: u64,
}

impl<R: Read> Input<R> {
    /// Reads exactly `buf.len()` bytes, or fails naming `what` and where it started.
    fn exact(&mut self, buf: &mut [u8], what: &dyn Fn() -> String) -> Result<(), TraceError> {
        let got = fill(&mut self.r, buf).map_err(read_error)?;
        if got < buf.len() {
            return Err(TraceError::Binary {
                offset: self.offset,
                message: format!(
                    "truncated {}: expected {} bytes, the file ends after {got}",
                    what(),
                    buf.len()
                ),
            });
        }
        self.offset += got as u64;
        Ok(())
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn parse_binary<R: Read>(head: &[u8], r: R) -> Result<Trace, TraceError> {
    let mut input = Input {
        r: head.chain(r),
        offset: 0,
    };
    let mut h = [0u8; HEADER_BYTES];
    let got = fill(&mut input.r, &mut h).map_err(read_error)?;
    if got < MAGIC.len() || h[..8] != MAGIC {
        let shown = String::from_utf8_lossy(&h[..got.min(8)]).into_owned();
        return Err(TraceError::Binary {
            offset: 0,
            message: format!("expected the magic `BPFLLMC\\0`, found {shown:?}"),
        });
    }
    if got < HEADER_BYTES {
        return Err(TraceError::Binary {
            offset: 0,
            message: format!(
                "truncated header: expected {HEADER_BYTES} bytes, the file ends after {got}"
            ),
        });
    }
    input.offset = HEADER_BYTES as u64;
    let version = u32_at(&h, 8);
    if version != VERSION {
        return Err(TraceError::Binary {
            offset: 8,
            message: format!("unsupported version {version}: this reader knows version {VERSION}"),
        });
    }
    let flags = u32_at(&h, 12);
    if flags != 0 {
        return Err(TraceError::Binary {
            offset: 12,
            message: format!("unknown flags {flags:#x}: expected 0"),
        });
    }
    let mut trace = Trace::default();
    loop {
        let start = input.offset;
        let mut ch = [0u8; 8];
        let got = fill(&mut input.r, &mut ch).map_err(read_error)?;
        if got == 0 {
            return Ok(trace);
        }
        if got < ch.len() {
            return Err(TraceError::Binary {
                offset: start,
                message: format!(
                    "truncated chunk header: expected 8 bytes, the file ends after {got}"
                ),
            });
        }
        input.offset += 8;
        let (tag, count) = (u32_at(&ch, 0), u32_at(&ch, 4));
        match tag {
            TAG_OBJECTS => {
                for i in 0..count {
                    let what = || format!("object entry {i} of the chunk at byte {start}");
                    let mut e = [0u8; 12];
                    input.exact(&mut e, &what)?;
                    let bytes = u64_at(&e, 0);
                    let len = u32_at(&e, 8) as usize;
                    let name_at = input.offset;
                    let mut name = vec![0u8; len.min(MAX_NAME_BYTES)];
                    if len > name.len() {
                        return Err(TraceError::Binary {
                            offset: name_at - 4,
                            message: format!("object name of {len} bytes: expected at most 1 MiB"),
                        });
                    }
                    input.exact(&mut name, &|| format!("name of {}", what()))?;
                    let name = String::from_utf8(name).map_err(|e| TraceError::Binary {
                        offset: name_at + e.utf8_error().valid_up_to() as u64,
                        message: "object name is not UTF-8".into(),
                    })?;
                    trace.objects.push(Object { name, bytes });
                }
            }
            TAG_ACCESSES => {
                trace.accesses.reserve((count as usize).min(1 << 24));
                let mut rec = [0u8; ACCESS_RECORD_BYTES];
                for i in 0..count {
                    let at = input.offset;
                    input.exact(&mut rec, &|| {
                        format!("access record {i} of the chunk at byte {start}")
                    })?;
                    let object = u32_at(&rec, 16);
                    if object as usize >= trace.objects.len() {
                        return Err(TraceError::Binary {
                            offset: at + 16,
                            message: format!(
                                "access names object {object}, but only {} objects are defined before it",
                                trace.objects.len()
                            ),
                        });
                    }
                    let dir = match rec[28] {
                        0 => Direction::HostToDevice,
                        1 => Direction::DeviceToHost,
                        d => {
                            return Err(TraceError::Binary {
                                offset: at + 28,
                                message: format!(
                                    "direction {d}: expected 0 (host to device) or 1 (device to host)"
                                ),
                            });
                        }
                    };
                    trace.accesses.push(Access {
                        time_ns: u64_at(&rec, 0),
                        bytes: u64_at(&rec, 8),
                        object,
                        duration_ns: u32_at(&rec, 20),
                        stream: u32_at(&rec, 24),
                        dir,
                    });
                }
            }
            t => {
                return Err(TraceError::Binary {
                    offset: start,
                    message: format!(
                        "unknown chunk tag {t}: expected {TAG_OBJECTS} (objects) or {TAG_ACCESSES} (accesses)"
                    ),
                });
            }
        }
    }
}

/// Appends a binary trace chunk by chunk: objects as they become known, accesses as they
/// happen. Pending entries go out when [`TRACE_WRITER_CHUNK`] accesses have piled up, on
/// [`TraceWriter::flush`], on [`TraceWriter::finish`], and (best effort, a failure logged)
/// when it is dropped.
pub struct TraceWriter<W: Write> {
    out: Option<W>,
    objects: Vec<Object>,
    accesses: Vec<Access>,
    defined: u64,
}

/// Accesses buffered before [`TraceWriter`] writes a chunk.
pub const TRACE_WRITER_CHUNK: usize = 1 << 16;

impl TraceWriter<BufWriter<std::fs::File>> {
    /// Creates (truncates) a file and writes the header.
    pub fn create(path: &Path) -> Result<Self, TraceError> {
        let f = std::fs::File::create(path).map_err(|source| TraceError::Write { source })?;
        TraceWriter::new(BufWriter::new(f))
    }
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header to `out`.
    pub fn new(mut out: W) -> Result<Self, TraceError> {
        let mut h = [0u8; HEADER_BYTES];
        h[..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        out.write_all(&h)
            .map_err(|source| TraceError::Write { source })?;
        Ok(TraceWriter {
            out: Some(out),
            objects: Vec::new(),
            accesses: Vec::new(),
            defined: 0,
        })
    }

    /// Defines the next object; returns its id. Names are not deduplicated here.
    pub fn object(&mut self, name: &str, bytes: u64) -> u32 {
        let id = u32::try_from(self.defined).expect("more than 2^32 objects");
        self.defined += 1;
        self.objects.push(Object {
            name: name.to_string(),
            bytes,
        });
        id
    }

    /// Appends a transfer of an object defined before.
    pub fn access(&mut self, a: Access) -> Result<(), TraceError> {
        if u64::from(a.object) >= self.defined {
            return Err(TraceError::UnknownObject {
                index: self.accesses.len(),
                object: a.object,
                objects: self.defined as usize,
            });
        }
        self.accesses.push(a);
        if self.accesses.len() >= TRACE_WRITER_CHUNK {
            self.write_chunks()?;
        }
        Ok(())
    }

    fn write_chunks(&mut self) -> Result<(), TraceError> {
        let e = |source| TraceError::Write { source };
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        if !self.objects.is_empty() {
            let mut b = Vec::new();
            b.extend_from_slice(&TAG_OBJECTS.to_le_bytes());
            b.extend_from_slice(&(self.objects.len() as u32).to_le_bytes());
            for o in &self.objects {
                if o.name.len() > MAX_NAME_BYTES {
                    return Err(TraceError::Write {
                        source: io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!(
                                "object name of {} bytes: at most {MAX_NAME_BYTES} fit the format",
                                o.name.len()
                            ),
                        ),
                    });
                }
                b.extend_from_slice(&o.bytes.to_le_bytes());
                b.extend_from_slice(&(o.name.len() as u32).to_le_bytes());
                b.extend_from_slice(o.name.as_bytes());
            }
            out.write_all(&b).map_err(e)?;
            self.objects.clear();
        }
        if !self.accesses.is_empty() {
            let mut b = Vec::with_capacity(8 + ACCESS_RECORD_BYTES * self.accesses.len());
            b.extend_from_slice(&TAG_ACCESSES.to_le_bytes());
            b.extend_from_slice(&(self.accesses.len() as u32).to_le_bytes());
            for a in &self.accesses {
                b.extend_from_slice(&a.time_ns.to_le_bytes());
                b.extend_from_slice(&a.bytes.to_le_bytes());
                b.extend_from_slice(&a.object.to_le_bytes());
                b.extend_from_slice(&a.duration_ns.to_le_bytes());
                b.extend_from_slice(&a.stream.to_le_bytes());
                b.extend_from_slice(&[a.dir.code(), 0, 0, 0]);
            }
            out.write_all(&b).map_err(e)?;
            self.accesses.clear();
        }
        Ok(())
    }

    /// Writes what is pending and flushes the output.
    pub fn flush(&mut self) -> Result<(), TraceError> {
        self.write_chunks()?;
        if let Some(out) = self.out.as_mut() {
            out.flush().map_err(|source| TraceError::Write { source })?;
        }
        Ok(())
    }

    /// Writes what is pending, flushes, and returns the output.
    pub fn finish(mut self) -> Result<W, TraceError> {
        self.flush()?;
        Ok(self.out.take().expect("the output is taken only here"))
    }
}

impl<W: Write> Drop for TraceWriter<W> {
    fn drop(&mut self) {
        if self.out.is_some()
            && let Err(e) = self.flush()
        {
            tracing::warn!("trace writer dropped with entries it could not write: {e}");
        }
    }
}

fn looks_like_csv(text: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(text) else {
        return false;
    };
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .is_some_and(|l| l.to_ascii_lowercase().contains("time_ns"))
}

fn csv_quote(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) || s.trim() != s {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Splits one CSV line into fields (RFC 4180 quotes; unquoted fields are trimmed).
fn csv_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
            chars.next();
        }
        let mut f = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err("unterminated quoted field".into()),
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        f.push('"');
                    }
                    Some('"') => break,
                    Some(c) => f.push(c),
                }
            }
            while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
                chars.next();
            }
            match chars.next() {
                None => {
                    fields.push(f);
                    return Ok(fields);
                }
                Some(',') => fields.push(f),
                Some(c) => return Err(format!("`{c}` after a quoted field: expected `,`")),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(f.trim().to_string());
                        return Ok(fields);
                    }
                    Some(',') => break,
                    Some(c) => f.push(c),
                }
            }
            fields.push(f.trim().to_string());
        }
    }
}

/// Where the CSV header put each column.
#[derive(Clone, Copy)]
struct Columns {
    /// time_ns, object, bytes, direction.
    required: [usize; 4],
    duration: Option<usize>,
    stream: Option<usize>,
    /// Fields per row.
    width: usize,
}

fn parse_csv(text: &[u8]) -> Result<Trace, TraceError> {
    let text = std::str::from_utf8(text).map_err(|e| {
        let line = 1 + text[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        TraceError::Csv {
            line,
            message: "not UTF-8 text".into(),
        }
    })?;
    let mut b = Trace::builder();
    let mut cols: Option<Columns> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let err = |message: String| TraceError::Csv { line, message };
        let fields = csv_fields(l).map_err(err)?;
        let Some(Columns {
            required: req,
            duration: dur,
            stream,
            width,
        }) = cols
        else {
            let names: Vec<String> = fields.iter().map(|f| f.to_ascii_lowercase()).collect();
            let find = |n: &str| names.iter().position(|x| x == n);
            let mut req = [0; 4];
            for (k, n) in ["time_ns", "object", "bytes", "direction"]
                .iter()
                .enumerate()
            {
                req[k] = find(n).ok_or_else(|| {
                    err(format!(
                        "header lacks the column `{n}`: expected time_ns,object,bytes,direction[,duration_ns], found `{l}`"
                    ))
                })?;
            }
            cols = Some(Columns {
                required: req,
                duration: find("duration_ns"),
                stream: find("stream"),
                width: fields.len(),
            });
            continue;
        };
        if fields.len() != width {
            return Err(err(format!(
                "{} fields: expected {width}, as in the header",
                fields.len()
            )));
        }
        let num = |k: usize, what: &str| -> Result<u64, TraceError> {
            fields[k].parse::<u64>().map_err(|_| {
                err(format!(
                    "{what} `{}`: expected an unsigned integer",
                    fields[k]
                ))
            })
        };
        let time_ns = num(req[0], "time_ns")?;
        let object = &fields[req[1]];
        if object.is_empty() {
            return Err(err("empty object id".into()));
        }
        let bytes = num(req[2], "bytes")?;
        let dir = Direction::parse(&fields[req[3]]).ok_or_else(|| {
            err(format!(
                "direction `{}`: expected h2d, HtoD, d2h or DtoH",
                fields[req[3]]
            ))
        })?;
        let duration = match dur {
            Some(k) if !fields[k].is_empty() => num(k, "duration_ns")?,
            _ => 0,
        };
        let stream = match stream {
            Some(k) if !fields[k].is_empty() => u32::try_from(num(k, "stream")?)
                .map_err(|_| err(format!("stream `{}`: expected a u32", fields[k])))?,
            _ => 0,
        };
        let id = b.object(object, bytes);
        b.access(
            Access::new(time_ns, id, bytes, dir)
                .with_duration(duration)
                .with_stream(stream),
        );
    }
    if cols.is_none() {
        return Err(TraceError::Csv {
            line: text.lines().count().max(1),
            message: "no header: expected time_ns,object,bytes,direction".into(),
        });
    }
    b.build()
}
