//! The CUDA API log (`trace --api-log FILE`): one fixed-size record per copy, allocation,
//! free, prefetch, launch and synchronisation the application makes through the driver,
//! written by the shim ([`crate::shim::api`]) and read by `llm-cache observe` and anyone
//! else with [`read`].
//!
//! ```text
//! file:  HEADER bytes: MAGIC (8), version u32 = 1, record size u32 = 72
//!        then ApiEvent records (72 bytes, little-endian, in the order the calls returned)
//! ```
//!
//! Times are `CLOCK_MONOTONIC` nanoseconds of the calling thread: `start_ns` when the call
//! entered the driver, `dur_ns` until it returned (for an asynchronous copy, the time to
//! enqueue it, not the copy). The direction of `cuMemcpy`/`cuMemcpyAsync` (unified
//! addressing) comes from `cuPointerGetAttribute` on both pointers: memory the driver does
//! not know is pageable host memory.

use std::io::Read;

/// First bytes of an API log.
pub const MAGIC: &[u8; 8] = b"BPFAPIL\0";
/// Format version.
pub const VERSION: u32 = 1;
/// Header bytes.
pub const HEADER: usize = 16;
/// Record bytes.
pub const RECORD: usize = 72;

/// What a call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Kind {
    /// A copy from host to device memory.
    HtoD = 1,
    /// A copy from device to host memory.
    DtoH = 2,
    /// A copy within device memory.
    DtoD = 3,
    /// A copy between host buffers through the driver.
    HtoH = 4,
    /// A device allocation (`dst` = address).
    Alloc = 5,
    /// A device free (`dst` = address).
    Free = 6,
    /// Pinned host memory allocated by the driver (`src` = host address).
    HostAlloc = 7,
    /// Pinned host memory freed (`src` = host address).
    HostFree = 8,
    /// Host memory registered (pinned) with the driver (`src`, `bytes`).
    HostRegister = 9,
    /// Host memory unregistered (`src`).
    HostUnregister = 10,
    /// A managed allocation (`dst` = address).
    Managed = 11,
    /// A prefetch of managed memory (`dst`, `bytes`, `aux` = destination device, -1 the host).
    Prefetch = 12,
    /// A kernel launch (`aux` = the function handle, `bytes` = threads, `dst` = the
    /// correlation id, 0 when launches are not numbered).
    Launch = 13,
    /// A synchronisation (stream, context or event).
    Sync = 14,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        use Kind::*;
        Some(match v {
            1 => HtoD,
            2 => DtoH,
            3 => DtoD,
            4 => HtoH,
            5 => Alloc,
            6 => Free,
            7 => HostAlloc,
            8 => HostFree,
            9 => HostRegister,
            10 => HostUnregister,
            11 => Managed,
            12 => Prefetch,
            13 => Launch,
            14 => Sync,
            _ => return None,
        })
    }

    /// Whether this is a copy.
    pub fn is_copy(self) -> bool {
        matches!(self, Kind::HtoD | Kind::DtoH | Kind::DtoD | Kind::HtoH)
    }
}

/// `flags` bit: the call was the per-thread-default-stream variant (`_ptds`/`_ptsz`).
pub const FLAG_PTDS: u8 = 1;
/// `flags` bit: the call is asynchronous (returns before the work is done).
pub const FLAG_ASYNC: u8 = 2;
/// `flags` bit: a launch captured into a CUDA graph (its kernel runs at the graph's
/// launches, not now). Set for kernels with the hidden launch parameters.
pub const FLAG_CAPTURED: u8 = 4;

/// One intercepted call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ApiEvent {
    /// `CLOCK_MONOTONIC` ns when the call entered the driver.
    pub start_ns: u64,
    /// ns until it returned.
    pub dur_ns: u64,
    /// Which entry point ([`crate::api::Api`] as u16; [`crate::api::call_name`]
    /// names it).
    pub call: u16,
    /// What it did.
    pub kind: Kind,
    /// [`FLAG_PTDS`], [`FLAG_ASYNC`].
    pub flags: u8,
    /// The `CUresult` it returned.
    pub result: i32,
    /// Destination address (device or host), or the allocation's address.
    pub dst: u64,
    /// Source address, or the host address of host allocations.
    pub src: u64,
    /// Bytes (threads for a launch).
    pub bytes: u64,
    /// The stream (0: the default stream).
    pub stream: u64,
    /// Kind-specific: the launched function, the prefetch's device.
    pub aux: u64,
    /// The calling thread (`gettid`).
    pub tid: u32,
}

impl ApiEvent {
    /// An event of `kind` from call number `call`.
    pub fn new(call: u16, kind: Kind) -> ApiEvent {
        ApiEvent {
            start_ns: 0,
            dur_ns: 0,
            call,
            kind,
            flags: 0,
            result: 0,
            dst: 0,
            src: 0,
            bytes: 0,
            stream: 0,
            aux: 0,
            tid: 0,
        }
    }

    /// The record's bytes.
    pub fn to_bytes(&self) -> [u8; RECORD] {
        let mut b = [0u8; RECORD];
        b[0..8].copy_from_slice(&self.start_ns.to_le_bytes());
        b[8..16].copy_from_slice(&self.dur_ns.to_le_bytes());
        b[16..18].copy_from_slice(&self.call.to_le_bytes());
        b[18] = self.kind as u8;
        b[19] = self.flags;
        b[20..24].copy_from_slice(&self.result.to_le_bytes());
        b[24..32].copy_from_slice(&self.dst.to_le_bytes());
        b[32..40].copy_from_slice(&self.src.to_le_bytes());
        b[40..48].copy_from_slice(&self.bytes.to_le_bytes());
        b[48..56].copy_from_slice(&self.stream.to_le_bytes());
        b[56..64].copy_from_slice(&self.aux.to_le_bytes());
        b[64..68].copy_from_slice(&self.tid.to_le_bytes());
        b
    }

    /// Parses a record; `None` for an unknown kind.
    pub fn from_bytes(b: &[u8; RECORD]) -> Option<ApiEvent> {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        Some(ApiEvent {
            start_ns: u64_at(0),
            dur_ns: u64_at(8),
            call: u16::from_le_bytes([b[16], b[17]]),
            kind: Kind::from_u8(b[18])?,
            flags: b[19],
            result: u32_at(20) as i32,
            dst: u64_at(24),
            src: u64_at(32),
            bytes: u64_at(40),
            stream: u64_at(48),
            aux: u64_at(56),
            tid: u32_at(64),
        })
    }

    /// The host address of a copy (`None` for other events and device-only copies).
    pub fn host_addr(&self) -> Option<u64> {
        match self.kind {
            Kind::HtoD => Some(self.src),
            Kind::DtoH => Some(self.dst),
            _ => None,
        }
    }

    /// The device address of a copy (`None` for other events and host-only copies).
    pub fn device_addr(&self) -> Option<u64> {
        match self.kind {
            Kind::HtoD | Kind::DtoD => Some(self.dst),
            Kind::DtoH => Some(self.src),
            _ => None,
        }
    }
}

/// The file header.
pub fn header() -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(RECORD as u32).to_le_bytes());
    h
}

/// Why an API log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ApiLogError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not an API log or is damaged.
    #[error("{path}: at byte offset {offset}: {what}")]
    Format {
        /// The file.
        path: String,
        /// Where.
        offset: u64,
        /// What is wrong.
        what: String,
    },
}

/// Reads every event of the log at `path`.
pub fn read(path: &std::path::Path) -> Result<Vec<ApiEvent>, ApiLogError> {
    let name = path.display().to_string();
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|source| ApiLogError::Io {
            path: name.clone(),
            source,
        })?;
    parse(&bytes).map_err(|(offset, what)| ApiLogError::Format {
        path: name,
        offset,
        what,
    })
}

/// Parses a whole log; the error is (byte offset, what).
pub fn parse(bytes: &[u8]) -> Result<Vec<ApiEvent>, (u64, String)> {
    if bytes.len() < HEADER {
        return Err((
            bytes.len() as u64,
            format!(
                "truncated header ({} of {HEADER} bytes): not an API log",
                bytes.len()
            ),
        ));
    }
    if &bytes[..8] != MAGIC {
        return Err((0, "not an API log (bad magic)".into()));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or([0; 4]));
    let size = u32::from_le_bytes(bytes[12..16].try_into().unwrap_or([0; 4]));
    if version != VERSION || size as usize != RECORD {
        return Err((
            8,
            format!(
                "version {version} with {size}-byte records: this reader knows version {VERSION}, {RECORD}-byte records"
            ),
        ));
    }
    let body = &bytes[HEADER..];
    let mut out = Vec::with_capacity(body.len() / RECORD);
    for (i, c) in body.chunks(RECORD).enumerate() {
        let offset = (HEADER + i * RECORD) as u64;
        let Ok(rec) = <&[u8; RECORD]>::try_from(c) else {
            return Err((
                offset,
                format!("truncated record ({} of {RECORD} bytes)", c.len()),
            ));
        };
        out.push(
            ApiEvent::from_bytes(rec)
                .ok_or_else(|| (offset + 18, format!("unknown event kind {}", rec[18])))?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev() -> ApiEvent {
        ApiEvent {
            start_ns: 1_000,
            dur_ns: 20,
            call: 3,
            kind: Kind::DtoH,
            flags: FLAG_ASYNC | FLAG_PTDS,
            result: 700,
            dst: 0x7f00_0000_1000,
            src: 0x7000_0000,
            bytes: 4096,
            stream: 0x55,
            aux: u64::MAX,
            tid: 42,
        }
    }

    #[test]
    fn events_round_trip_and_know_their_addresses() {
        let e = ev();
        let back = ApiEvent::from_bytes(&e.to_bytes()).unwrap();
        assert_eq!(back, e);
        assert_eq!(
            (back.host_addr(), back.device_addr()),
            (Some(0x7f00_0000_1000), Some(0x7000_0000))
        );
        let mut file = header().to_vec();
        file.extend(e.to_bytes());
        file.extend(ApiEvent::new(0, Kind::Sync).to_bytes());
        let v = parse(&file).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].kind, Kind::Sync);
    }

    #[test]
    fn damaged_logs_name_the_offset() {
        let mut file = header().to_vec();
        file.extend(ev().to_bytes());
        file.extend(&ev().to_bytes()[..10]);
        let (off, what) = parse(&file).unwrap_err();
        assert_eq!(off, (HEADER + RECORD) as u64);
        assert!(what.contains("truncated record"), "{what}");
        let (off, what) = parse(b"BPFTRACE plus some more bytes").unwrap_err();
        assert_eq!(off, 0);
        assert!(what.contains("magic"), "{what}");
        let (_, what) = parse(b"BPF").unwrap_err();
        assert!(what.contains("truncated header"), "{what}");
        let mut bad = header().to_vec();
        let mut r = ev().to_bytes();
        r[18] = 99;
        bad.extend(r);
        let (off, what) = parse(&bad).unwrap_err();
        assert_eq!(
            (off, what.as_str()),
            (HEADER as u64 + 18, "unknown event kind 99")
        );
    }
}
