//! The memory trace's layout (`trace --mem-trace FILE`), shared by the record blocks
//! [`crate::codegen::trace_block`] puts at each access, the shim's drain
//! ([`crate::shim::memtrace`]) and the reader (`bpftime-super memtrace`).
//!
//! ```text
//! device: STRIPES sub-rings of cap/STRIPES records, one per SM (%smid % STRIPES), each with a
//!         CTL_BYTES control block: head @CTL_HEAD, tail @CTL_TAIL, drops @CTL_DROPS
//! file:   HEADER bytes (FILE_MAGIC, version 1, record size), then 32-byte Records
//! ```

/// Where memory-trace records go on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRing {
    /// Device address of the ring of 32-byte records.
    pub ring: u64,
    /// Device address of its control blocks, [`CTL_BYTES`] apart.
    pub ctl: u64,
    /// Records it holds (a power of two).
    pub cap: u64,
}

/// First 8 bytes of a trace file.
pub const FILE_MAGIC: &[u8; 8] = b"BPFTMTR1";
/// Bytes of the file header: magic, version (u32), record size (u32), then zeros.
pub const HEADER: usize = 64;
/// Bytes of one record.
pub const RECORD: usize = 32;
/// Offsets in the control block.
pub const CTL_HEAD: u64 = 0;
/// Where the host writes how far it drained.
pub const CTL_TAIL: u64 = 64;
/// Records dropped because the ring was full.
pub const CTL_DROPS: u64 = 128;
/// Bytes of one sub-ring's control block.
pub const CTL_BYTES: usize = 256;
/// Sub-rings, one per SM (modulo): a power of two.
pub const STRIPES: u64 = 128;

/// One access, as the file holds it (little-endian).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Record {
    /// The address, in the instruction's space.
    pub addr: u64,
    /// The record's index in its SM's sub-ring (its sequence number there).
    pub idx: u64,
    /// The site id.
    pub site: u32,
    /// `size | op << 6 | space << 8 | (tid.x & 1023) << 10 | (tid.y & 1023) << 20`; space
    /// 0 for a generic address.
    pub info: u32,
    /// `%ctaid.x`.
    pub block: u32,
    /// The low 32 bits of `idx` again, written by the record's second store.
    pub idx_lo: u32,
}

const _: () = assert!(std::mem::size_of::<Record>() == RECORD);

impl Record {
    /// Parses 32 bytes.
    pub fn from_bytes(b: &[u8]) -> Record {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        Record {
            addr: u64_at(0),
            idx: u64_at(8),
            site: u32_at(16),
            info: u32_at(20),
            block: u32_at(24),
            idx_lo: u32_at(28),
        }
    }

    /// Bytes accessed.
    pub fn size(&self) -> u32 {
        self.info & 63
    }
    /// `ebpf::MemCtx` op code.
    pub fn op(&self) -> u32 {
        (self.info >> 6) & 3
    }
    /// `ebpf::MemCtx` space code, 0 for generic.
    pub fn space(&self) -> u32 {
        (self.info >> 8) & 3
    }
    /// `%tid.x` (low 10 bits).
    pub fn tid_x(&self) -> u32 {
        (self.info >> 10) & 1023
    }
    /// `%tid.y` (low 10 bits).
    pub fn tid_y(&self) -> u32 {
        (self.info >> 20) & 1023
    }
}

/// Of the records `bytes` (from ring slot `first`), how many in a row starting at index
/// `from` are complete: both sequence fields equal their index.
pub fn complete_prefix(bytes: &[u8], from: u64) -> usize {
    bytes
        .chunks_exact(RECORD)
        .enumerate()
        .take_while(|(k, c)| {
            let r = Record::from_bytes(c);
            let want = from + *k as u64;
            r.idx == want && r.idx_lo == want as u32
        })
        .count()
}

/// The file header.
pub fn header() -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(FILE_MAGIC);
    h[8..12].copy_from_slice(&1u32.to_le_bytes());
    h[12..16].copy_from_slice(&(RECORD as u32).to_le_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(idx: u64, lo: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(0x1000u64.to_le_bytes());
        b.extend(idx.to_le_bytes());
        b.extend(7u32.to_le_bytes());
        b.extend((4u32 | 1 << 8 | 5 << 10).to_le_bytes());
        b.extend(3u32.to_le_bytes());
        b.extend(lo.to_le_bytes());
        b
    }

    #[test]
    fn a_record_being_written_stops_the_drain() {
        let mut b = Vec::new();
        b.extend(rec(10, 10));
        b.extend(rec(11, 11));
        b.extend(rec(12, u32::MAX)); // second half not yet written
        b.extend(rec(13, 13));
        assert_eq!(complete_prefix(&b, 10), 2);
        assert_eq!(complete_prefix(&b, 11), 0);
        let r = Record::from_bytes(&b[..32]);
        assert_eq!((r.size(), r.op(), r.space(), r.tid_x()), (4, 0, 1, 5));
        assert_eq!(&header()[..8], FILE_MAGIC);
    }
}
