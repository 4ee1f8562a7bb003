//! What a crash keeps, and how `run --recover` gets it back.
//!
//! The region already holds everything the data plane needs: the queue, the completions,
//! the client table, the map storage and every buffer. What lives only in the service's
//! memory is the control plane: which programs are installed (and at which version), which
//! arena ranges are whose, and where each map's storage is. The service writes that down
//! as a [`Checkpoint`] in the region's checkpoint area (`ShmRegion::write_checkpoint`,
//! double-buffered and hashed) after every change, before it answers the request that
//! made it. A new service started with `--recover` on a region whose service died adopts
//! the region instead of replacing it:
//!
//! | kept                                   | how                                          |
//! |----------------------------------------|----------------------------------------------|
//! | programs, at their ids and versions    | reloaded from their object bytes (in the arena), verified again |
//! | map contents (shared-memory maps)      | the storage is reopened where it is           |
//! | client buffers, live clients' slots    | the arena allocator is rebuilt from the list  |
//! | queued jobs                            | left in the queue; the new workers run them   |
//! | jobs a worker had taken, not started   | queued again (at the tail)                    |
//!
//! | lost                                   | what the new service does                    |
//! |----------------------------------------|----------------------------------------------|
//! | jobs running, or taken by a worker     | ended with `SERVICE_RESTARTED` (records that ran before the crash may have changed maps) |
//! | GPU-resident maps                      | come back with their host mirror (their contents at the last `map dump`/`map update`) |
//! | device-resident job buffers            | gone with the GPU context; clients allocate again |
//! | latency statistics, uptime             | start from zero (job totals in the region are kept) |

use super::{ControlState, Service, maps};
use crate::protocol::RecoveryInfo;
use device::programs::Installed;
use device::programs::ProgramTable;
use ebpf::interp::Vm;
use ebpf::verifier::{VerifyOptions, verify};
use serde::{Deserialize, Serialize};
use shm_maps::ShmRegion;
use shm_maps::arena::{Arena, Owner};
use shm_maps::layout::{ARENA_ALIGN, status};
use std::sync::Arc;
use std::time::Duration;

/// Bumped when the checkpoint's meaning changes.
const FORMAT: u32 = 1;

/// The control plane as written to the region.
#[derive(Serialize, Deserialize, Debug, Default)]
pub(crate) struct Checkpoint {
    /// [`FORMAT`].
    pub format: u32,
    /// Next program id to hand out.
    pub next_id: u32,
    /// Backend that wrote it (`cpu` or `cuda`).
    pub backend: String,
    /// Value sets of per-thread arrays (CPU workers or GPU threads).
    pub value_sets: u32,
    /// Installed programs, current versions only.
    pub programs: Vec<ProgramRec>,
    /// Every arena allocation.
    pub arena: Vec<AllocRec>,
}

/// One installed program.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct ProgramRec {
    pub id: u32,
    pub name: String,
    pub version: u32,
    /// File name given at load (error messages, ELF section lookup).
    pub file: String,
    /// The `--prog` selector given at load.
    pub selector: Option<String>,
    /// The object bytes: an arena allocation of the service.
    pub object_off: u64,
    pub object_len: u64,
    /// Its maps, in the program's order.
    pub maps: Vec<MapRec>,
}

/// Where one map's storage is.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct MapRec {
    pub name: String,
    pub off: u64,
    pub len: u64,
    pub device: bool,
    /// The emulated tier its helper accesses pay (`cxl:LAT[:GBPS]`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
}

/// One arena allocation; `client` is `[slot, generation]`, absent for the service's own.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct AllocRec {
    pub off: u64,
    pub len: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<[u32; 2]>,
    /// A job buffer's emulated tier (`cxl:LAT[:GBPS]`), if it was placed in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// Its tier slot, which its client's jobs name: a recovery gives it the same one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_slot: Option<u8>,
}

impl Service {
    /// Writes the control plane to the region. Called with the state lock held, after each
    /// change and before the request that made it is answered.
    pub(crate) fn save(&self, st: &ControlState) {
        let cp = Checkpoint {
            format: FORMAT,
            next_id: st.next_id,
            backend: self.backend_name.into(),
            value_sets: self.value_sets,
            programs: self
                .table
                .list()
                .iter()
                .filter_map(|p| program_rec(st, p))
                .collect(),
            arena: st
                .arena
                .allocations()
                .map(|(off, len, owner)| {
                    let placed = self.tier_buffers.placed_at(off);
                    AllocRec {
                        off,
                        len,
                        client: match owner {
                            Owner::Service => None,
                            Owner::Client { slot, generation } => Some([slot, generation]),
                        },
                        tier: placed.map(|(t, _)| t.to_string()),
                        tier_slot: placed.map(|(_, s)| s),
                    }
                })
                .collect(),
        };
        let bytes = match serde_json::to_vec(&cp) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!("cannot encode the checkpoint: {e}");
                return;
            }
        };
        if let Err(e) = self.region.write_checkpoint(&bytes) {
            tracing::error!("checkpoint not written, a crash now would lose this change: {e}");
        }
    }
}

fn program_rec(st: &ControlState, p: &Installed) -> Option<ProgramRec> {
    let &(object_off, object_len) = st.objects.get(&p.id)?;
    let maps = p
        .program
        .maps
        .iter()
        .zip(&p.maps)
        .zip(p.tiers.iter().chain(std::iter::repeat(&None)))
        .map(|((d, m), tier)| {
            let placed = st.placed.iter().find(|pl| pl.is(m))?;
            Some(MapRec {
                name: d.name.clone(),
                off: placed.off,
                len: placed.len,
                device: placed.device,
                tier: tier.map(|t| t.to_string()),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(ProgramRec {
        id: p.id,
        name: p.name.clone(),
        version: p.version,
        file: p.program.file.clone(),
        selector: p.selector.clone(),
        object_off,
        object_len,
        maps,
    })
}

/// Why a region cannot be recovered.
fn fail(region: &ShmRegion, why: impl std::fmt::Display) -> super::ServiceError {
    super::ServiceError::Recover(format!(
        "cannot recover /dev/shm/{}: {why}; remove it to start empty",
        region.name()
    ))
}

/// Reads an adopted region's checkpoint and waits for the dead service's GPU worker to
/// let go of the queue. Returns the checkpoint (empty when the dead service never wrote
/// one: it had installed nothing and handed out no buffer).
pub(crate) fn read(region: &ShmRegion) -> Result<Checkpoint, super::ServiceError> {
    // It exits when its stdin (the dead service's pipe) closes, once its persistent
    // kernel has stopped.
    region.retire_helper(Duration::from_secs(5));
    let Some(bytes) = region.read_checkpoint().map_err(|e| fail(region, e))? else {
        return Ok(Checkpoint::default());
    };
    let cp: Checkpoint =
        serde_json::from_slice(&bytes).map_err(|e| fail(region, format!("checkpoint: {e}")))?;
    if cp.format != FORMAT {
        return Err(fail(
            region,
            format!("checkpoint format {}, this build reads {FORMAT}", cp.format),
        ));
    }
    Ok(cp)
}

/// The arena as the dead service left it, less its own allocations that no program uses
/// any more (the GPU mailbox, storage of old versions not yet collected).
pub(crate) fn arena(region: &ShmRegion, cp: &Checkpoint) -> Result<Arena, super::ServiceError> {
    let kept: std::collections::HashSet<u64> = cp
        .programs
        .iter()
        .flat_map(|p| std::iter::once(p.object_off).chain(p.maps.iter().map(|m| m.off)))
        .collect();
    Arena::restore(
        region.header().arena_size,
        ARENA_ALIGN,
        cp.arena
            .iter()
            .filter(|a| a.client.is_some() || kept.contains(&a.off))
            .map(|a| {
                let owner = match a.client {
                    Some([slot, generation]) => Owner::Client { slot, generation },
                    None => Owner::Service,
                };
                (a.off, a.len, owner)
            }),
    )
    .map_err(|e| fail(region, e))
}

/// The job buffers the dead service had placed in a tier, registered again in `tiers`
/// (a placement that no longer parses, or a cap on a service of `gpus` > 1 GPUs, where each
/// GPU's link would get the whole cap, is named in the errors and the buffer stays local).
pub(crate) fn tier_buffers(
    cp: &Checkpoint,
    tiers: &device::tier::TierBuffers,
    gpus: usize,
    errors: &mut Vec<String>,
) {
    for a in &cp.arena {
        let (Some([slot, generation]), Some(t)) = (a.client, &a.tier) else {
            continue;
        };
        match t.parse::<device::tier::TierSpec>() {
            Ok(spec)
                if let Some(e) =
                    super::maps::cap_refusal(&format!("buffer at {:#x}", a.off), &spec, gpus) =>
            {
                errors.push(format!("{e}; it is local now"))
            }
            Ok(spec) => {
                match tiers.allocated_in(a.off, a.len, (slot, generation), Some(spec), a.tier_slot)
                {
                    Err(e) => errors.push(format!("buffer at {:#x}: {e}; it is local now", a.off)),
                    Ok(s) if s != a.tier_slot && a.tier_slot.is_some() => errors.push(format!(
                        "buffer at {:#x}: tier slot {} was taken, it is in slot {} now: \
                         jobs naming the old slot run at local speed on a GPU",
                        a.off,
                        a.tier_slot.unwrap_or(0),
                        s.unwrap_or(0)
                    )),
                    Ok(_) => {}
                }
            }
            Err(e) => errors.push(format!("buffer at {:#x}: {e}; it is local now", a.off)),
        }
    }
}

/// What a recovery needs of the service being started.
pub(crate) struct Ctx<'a> {
    pub region: &'a Arc<ShmRegion>,
    pub table: &'a ProgramTable,
    /// Value sets of per-thread arrays.
    pub value_sets: u32,
    pub engine: jit::cpu::Engine,
}

/// Installs the checkpoint's programs over their old map storage, re-publishes the map
/// directory, and ends the jobs the dead service had taken. Runs before any worker starts.
pub(crate) fn restore(
    ctx: &Ctx,
    st: &mut ControlState,
    cp: &Checkpoint,
    old_pid: u32,
) -> RecoveryInfo {
    let region = ctx.region;
    // The directory is rebuilt from what is kept; clients that attached to a map keep
    // their views (storage does not move).
    for i in 0..region.header().max_maps {
        region.unregister_map(i);
    }
    let mut info = RecoveryInfo {
        from_pid: old_pid,
        ..Default::default()
    };
    st.next_id = cp.next_id.max(1);
    for rec in &cp.programs {
        match reinstall(ctx, st, rec) {
            Ok(n) => {
                info.programs += 1;
                info.maps += n;
            }
            Err(e) => {
                tracing::error!(id = rec.id, name = %rec.name, "not recovered: {e}");
                info.errors
                    .push(format!("program `{}` (id {}): {e}", rec.name, rec.id));
                let _ = st.arena.free(rec.object_off, Owner::Service);
                for m in &rec.maps {
                    let _ = st.arena.free(m.off, Owner::Service);
                }
            }
        }
    }
    info.buffers = st
        .arena
        .allocations()
        .filter(|(_, _, o)| matches!(o, Owner::Client { .. }))
        .count() as u64;
    let text = format!(
        "the service (pid {old_pid}) died while this job ran or after a worker took it; \
         the service that recovered the region ended it (records that ran before the crash \
         may have changed maps)"
    );
    info.requeued_jobs = device::job::requeue_unstarted(region);
    info.ended_jobs = device::job::fail_taken(region, None, status::SERVICE_RESTARTED, &text);
    // A client that passed the READY check just before the crash may still be pushing the
    // job it stamped SUBMITTED; let it land before the scan for jobs no queue holds.
    std::thread::sleep(Duration::from_millis(20));
    info.ended_jobs += device::job::fail_orphaned(region, status::SERVICE_RESTARTED, &text);
    // Nothing consumes the queues yet: what lies below each head has finished, counted or
    // not (the dead service may have published completions it never accounted for).
    for q in (0..region.queue_count()).filter_map(|q| region.queue_at(q)) {
        q.settle_done();
    }
    info.queued_jobs = (0..region.queue_count())
        .filter_map(|q| region.queue_at(q))
        .map(|q| q.len())
        .sum();
    tracing::warn!(
        programs = info.programs,
        maps = info.maps,
        buffers = info.buffers,
        queued = info.queued_jobs,
        requeued = info.requeued_jobs,
        ended = info.ended_jobs,
        "recovered the region of pid {old_pid}"
    );
    info
}

/// Loads one program again over its old map storage. Returns its map count.
fn reinstall(ctx: &Ctx, st: &mut ControlState, rec: &ProgramRec) -> Result<u64, String> {
    let bytes = ctx
        .region
        .read_arena(rec.object_off, rec.object_len)
        .ok_or("its object lies outside the arena")?;
    let program =
        ebpf::elf::load(&bytes, &rec.file, rec.selector.as_deref()).map_err(|e| e.to_string())?;
    let stack_depth = verify(&program, &VerifyOptions::default())
        .map_err(|e| format!("verifier rejected it: {e}"))?
        .max_stack_depth as u32;
    if program.maps.len() != rec.maps.len() {
        return Err(format!(
            "the checkpoint lists {} maps, the object has {}",
            rec.maps.len(),
            program.maps.len()
        ));
    }
    let mut live = Vec::new();
    let mut device_maps = Vec::new();
    let mut tiers = Vec::new();
    for (def, m) in program.maps.iter().zip(&rec.maps) {
        if def.name != m.name {
            return Err(format!(
                "map {} is `{}` in the checkpoint",
                def.name, m.name
            ));
        }
        live.push(maps::reopen(
            ctx.region,
            ctx.value_sets,
            st,
            &rec.name,
            def,
            (m.off, m.len),
            m.device,
        )?);
        device_maps.push(m.device);
        tiers.push(match &m.tier {
            Some(t) => Some(
                t.parse::<device::tier::TierSpec>()
                    .map_err(|e| format!("map `{}`: {e}", m.name))?,
            ),
            None => None,
        });
    }
    let vm = Vm::new(&program, device::tier::view(&live, &tiers)).map_err(|e| e.to_string())?;
    let exec = jit::cpu::Executor::verified(vm, ctx.engine);
    st.objects.insert(rec.id, (rec.object_off, rec.object_len));
    st.next_id = st.next_id.max(rec.id + 1);
    ctx.table.install(Installed {
        id: rec.id,
        name: rec.name.clone(),
        version: rec.version,
        program,
        exec,
        maps: live,
        object: Arc::new(bytes),
        selector: rec.selector.clone(),
        stack_depth,
        device_maps,
        tiers,
    });
    Ok(rec.maps.len() as u64)
}
