//! The client table: attaching a process to the region, and telling live clients from dead.
//!
//! | field        | writer                                   | reader            |
//! |--------------|------------------------------------------|-------------------|
//! | `state`      | client: CAS FREE→ACTIVE; service: →DEAD, →FREE | both        |
//! | `pid`, `start_time`, `generation` | the client after claiming | service  |
//! | `submitted`  | client, before each push                 | service reaper    |
//! | `completed`  | service, after each DONE                 | service reaper, client at detach |
//!
//! A client owns the completion slots `ShmRegion::completion_range(slot)`. When its process
//! dies, the service marks the slot DEAD, lets its queued jobs finish (their completions go
//! to slots nobody reads), then frees its arena buffers and the slot.

use crate::layout::client_state;
use crate::region::{ShmRegion, process_alive, process_start_time};
use crate::sync::Ordering;

/// No client slot is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("all {max} client slots are in use")]
pub struct NoClientSlot {
    /// Number of slots.
    pub max: u32,
}

/// A claimed client slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientId {
    /// Slot index.
    pub slot: u32,
    /// Generation after claiming.
    pub generation: u32,
}

/// Claims a free client slot for the calling process.
pub fn attach(region: &ShmRegion) -> Result<ClientId, NoClientSlot> {
    let max = region.header().max_clients;
    let pid = std::process::id();
    let start = process_start_time(pid).unwrap_or(0);
    for slot in 0..max {
        let c = region.client(slot).expect("slot < max_clients");
        if c.state
            .compare_exchange(
                client_state::FREE,
                client_state::ACTIVE,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            c.pid.store(pid, Ordering::Relaxed);
            c.start_time.store(start, Ordering::Relaxed);
            // A free slot has nothing in flight: its counters stay as they are.
            // ORDERING: release publishes pid and start time to the service's reaper,
            // which loads `generation` with acquire before checking liveness.
            let generation = c.generation.fetch_add(1, Ordering::Release) + 1;
            return Ok(ClientId { slot, generation });
        }
    }
    Err(NoClientSlot { max })
}

/// Releases a slot on clean exit. Jobs still in flight make the slot DEAD instead, so the
/// service reclaims it once they finish.
pub fn detach(region: &ShmRegion, id: ClientId) {
    if let Some(c) = region.client(id.slot) {
        let next = if c.in_flight() == 0 {
            client_state::FREE
        } else {
            client_state::DEAD
        };
        c.state.store(next, Ordering::Release);
    }
}

/// Whether the process in an ACTIVE slot is gone.
pub fn is_dead(region: &ShmRegion, slot: u32) -> bool {
    let Some(c) = region.client(slot) else {
        return false;
    };
    if c.state.load(Ordering::Acquire) != client_state::ACTIVE {
        return false;
    }
    let _generation = c.generation.load(Ordering::Acquire);
    let pid = c.pid.load(Ordering::Relaxed);
    if pid == 0 {
        return false; // claimed a moment ago, pid not stored yet
    }
    !process_alive(pid, c.start_time.load(Ordering::Relaxed))
}
