//! Binding a program's maps to storage, and carrying maps over a `replace`.
//!
//! On `replace`, a map keeps its storage (and contents) when the new version declares a map
//! of the same name with the same kind, key size, value size and entry count. A map of the
//! same name with another shape refuses the replace. Read-only global data (`.rodata`) is
//! always taken from the new version.

use super::{ControlState, Service};
use device::programs::Installed;
use device::tier::TierSpec;
use ebpf::maps::MapOps;
use ebpf::{MapDef, MapOrigin, Program};
use shm_maps::arena::Owner;
use shm_maps::{DirEntry, ShmRegion};
use std::sync::{Arc, Weak};

/// A map the service placed in the arena: freed once no program version uses it.
pub(crate) struct Placed {
    map: Weak<dyn MapOps>,
    /// Arena offset of the storage.
    pub off: u64,
    dir: Option<u32>,
    /// `program:map`.
    pub name: String,
    /// Storage size in bytes.
    pub len: u64,
    /// In GPU memory (the arena storage is the host mirror).
    pub device: bool,
}

impl Placed {
    /// Whether this is the storage of `m`.
    pub fn is(&self, m: &Arc<dyn MapOps>) -> bool {
        std::ptr::addr_eq(self.map.as_ptr(), Arc::as_ptr(m))
    }
}

/// One map's asked placement.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Asked {
    /// GPU memory.
    Device,
    /// Shared memory.
    Shm,
    /// An emulated slower tier every helper access pays: shared memory on the CPU
    /// backend, GPU memory on one GPU.
    Tier(TierSpec),
}

/// The placement a load asks for: `MAP=device`, `MAP=shm` or `MAP=cxl:LAT_NS[:GBPS]` for
/// maps of `program`.
fn requested(program: &Program, placement: &[String]) -> Result<Vec<(String, Asked)>, String> {
    placement
        .iter()
        .map(|p| {
            let (m, w) = p.split_once('=').ok_or_else(|| {
                format!("map placement `{p}`: expected MAP=device, MAP=shm or MAP=cxl:LATENCY_NS[:GBPS]")
            })?;
            let device = match w {
                "device" => Asked::Device,
                "shm" => Asked::Shm,
                t if t.starts_with("cxl:") => {
                    Asked::Tier(t.parse().map_err(|e| format!("map placement `{p}`: {e}"))?)
                }
                other => {
                    return Err(format!(
                        "map placement `{p}`: `{other}` is not a placement (device, shm or cxl:LATENCY_NS[:GBPS])"
                    ));
                }
            };
            if !program.maps.iter().any(|d| d.name == m) {
                return Err(format!(
                    "map placement `{p}`: the program has no map `{m}` (it has {})",
                    program
                        .maps
                        .iter()
                        .map(|d| d.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            Ok((m.to_string(), device))
        })
        .collect()
}

/// Whether `def` goes to GPU memory: as asked, else the default for its kind.
///
/// With several GPUs, every GPU holds its own copy of a map placed on the GPU. That is
/// right for per-thread arrays only (each GPU's threads own their value sets; a dump
/// lists every GPU's sets, GPU by GPU), so those stay on the GPUs and every other map is
/// shared in host memory.
/// Why tier `t` cannot be placed on a service of `gpus` GPUs (`what`: the map or buffer),
/// if it cannot: a capped link that several GPUs share would need one link word for all of
/// them, and each GPU's own would give every GPU the whole cap.
pub(super) fn cap_refusal(what: &str, t: &TierSpec, gpus: usize) -> Option<String> {
    (gpus > 1 && t.gbps.is_some()).then(|| {
        format!(
            "{what}: placement `{t}` caps a link that the service's {gpus} GPUs would each get \
             whole (one link word per GPU); a latency-only tier (cxl:{}) works on several \
             GPUs, a cap on one",
            t.latency_ns
        )
    })
}

fn placement_of(svc: &Service, def: &MapDef, asked: &[(String, Asked)]) -> Result<bool, String> {
    let gpus = svc.gpu_count();
    let cuda = gpus > 0;
    let per_thread = def.kind == ebpf::MapKind::PerThreadArray;
    match asked.iter().find(|(m, _)| *m == def.name).map(|(_, a)| *a) {
        Some(Asked::Device) if !cuda => Err(format!(
            "map `{}`: placement `device` needs the CUDA backend (this service runs on the CPU)",
            def.name
        )),
        Some(Asked::Device) if gpus > 1 && !per_thread => Err(format!(
            "map `{}`: placement `device` on a service of {gpus} GPUs would give each GPU its \
             own copy; only per-thread arrays are placed per GPU. Leave it in host shared \
             memory (placement `shm`, the default), which every GPU reads and writes",
            def.name
        )),
        Some(Asked::Device) => Ok(true),
        Some(Asked::Shm) if gpus > 1 && per_thread => Err(format!(
            "map `{}`: a per-thread array in host shared memory would be written by the same \
             thread indices on each of the {gpus} GPUs; leave it on the GPUs (the default)",
            def.name
        )),
        Some(Asked::Shm) => Ok(false),
        Some(Asked::Tier(t))
            if let Some(e) = cap_refusal(&format!("map `{}`", def.name), &t, gpus) =>
        {
            Err(e)
        }
        // On a GPU the tier's local memory is the GPU's own (where one GPU holds the map:
        // with several, a map they share stays in host memory and pays the tier there).
        Some(Asked::Tier(_)) => Ok(cuda && (gpus == 1 || per_thread)),
        None => Ok(cuda && per_thread),
    }
}

/// The tier `def` pays, as asked, else (a replaced program's map) the one it had.
fn tier_of(def: &MapDef, asked: &[(String, Asked)], had: Option<TierSpec>) -> Option<TierSpec> {
    match asked.iter().find(|(m, _)| *m == def.name).map(|(_, a)| *a) {
        Some(Asked::Tier(t)) => Some(t),
        Some(_) => None,
        None => had,
    }
}

fn shape(d: &MapDef) -> String {
    format!(
        "{:?} key {} value {} entries {}",
        d.kind, d.key_size, d.value_size, d.max_entries
    )
}

/// Each map's storage, whether it lives in GPU memory, and the emulated tier its helper
/// accesses pay.
pub(super) type Bound = (Vec<Arc<dyn MapOps>>, Vec<bool>, Vec<Option<TierSpec>>);

/// Storage for each of `program`'s maps, reusing `old`'s where the replace rules allow, and
/// whether each lives in GPU memory.
pub(super) fn bind(
    svc: &Service,
    st: &mut ControlState,
    install_name: &str,
    program: &Program,
    old: Option<&Installed>,
    placement: &[String],
) -> Result<Bound, String> {
    let asked = requested(program, placement)?;
    let mut out = Vec::with_capacity(program.maps.len());
    let mut device = Vec::with_capacity(program.maps.len());
    let mut tiers = Vec::with_capacity(program.maps.len());
    for def in &program.maps {
        let prev = old.and_then(|o| {
            o.program
                .maps
                .iter()
                .zip(&o.maps)
                .zip(&o.device_maps)
                .find(|((d, _), _)| d.name == def.name)
        });
        let had = old.and_then(|o| {
            o.program
                .maps
                .iter()
                .zip(&o.tiers)
                .find(|(d, _)| d.name == def.name)
                .and_then(|(_, t)| *t)
        });
        let read_only = matches!(def.origin, MapOrigin::GlobalData { writable: false });
        match prev {
            Some(((d, m), on_gpu)) if !read_only => {
                if d.kind != def.kind
                    || d.key_size != def.key_size
                    || d.value_size != def.value_size
                    || d.max_entries != def.max_entries
                {
                    return Err(format!(
                        "replace refused: map `{}` changed from {} to {}; maps keep their \
                         contents across a replace only when name and type match (unload and \
                         load instead)",
                        def.name,
                        shape(d),
                        shape(def)
                    ));
                }
                // The same refusals as for a new map, and the same memory as before (a tier
                // on one GPU lives in GPU memory, like `device`).
                if asked.iter().any(|(n, _)| *n == def.name)
                    && placement_of(svc, def, &asked)? != *on_gpu
                {
                    return Err(format!(
                        "replace refused: map `{}` keeps its placement across a replace",
                        def.name
                    ));
                }
                out.push(m.clone());
                device.push(*on_gpu);
                tiers.push(tier_of(def, &asked, had));
            }
            _ => {
                let on_gpu = placement_of(svc, def, &asked)?;
                out.push(create(svc, st, install_name, def, on_gpu)?);
                device.push(on_gpu);
                tiers.push(tier_of(def, &asked, None));
            }
        }
    }
    Ok((out, device, tiers))
}

/// Places a map in the region's arena and publishes it in the map directory as
/// `program:map`, so that client processes can attach to it.
fn create(
    svc: &Service,
    st: &mut ControlState,
    install_name: &str,
    def: &MapDef,
    device: bool,
) -> Result<Arc<dyn MapOps>, String> {
    let threads = svc.value_sets.max(1);
    let what = |e: &dyn std::fmt::Display| format!("cannot create map `{}`: {e}", def.name);
    let len = shm_maps::maps::layout_size(def, threads).map_err(|e| what(&e))?;
    let off = st.arena.alloc(len, Owner::Service).map_err(|e| what(&e))?;
    let map = match shm_maps::maps::create_in(&svc.region, off, def, threads) {
        Ok(m) => m,
        Err(e) => {
            let _ = st.arena.free(off, Owner::Service);
            return Err(what(&e));
        }
    };
    publish(
        &svc.region,
        threads,
        st,
        install_name,
        def,
        &map,
        (off, len),
        device,
    );
    Ok(map)
}

/// `run --recover`: opens a map's storage where the dead service left it (contents kept)
/// and publishes it again.
pub(super) fn reopen(
    region: &Arc<ShmRegion>,
    value_sets: u32,
    st: &mut ControlState,
    install_name: &str,
    def: &MapDef,
    (off, len): (u64, u64),
    device: bool,
) -> Result<Arc<dyn MapOps>, String> {
    let threads = value_sets.max(1);
    let what = |e: &dyn std::fmt::Display| format!("cannot reopen map `{}`: {e}", def.name);
    let want = shm_maps::maps::layout_size(def, threads).map_err(|e| what(&e))?;
    if want != len {
        return Err(what(&format!(
            "its storage is {len} bytes, this service would lay it out in {want} \
             (per-thread maps need the same worker count: {threads} now)"
        )));
    }
    if !matches!(st.arena.owner_of(off, len), Some((Owner::Service, start, _)) if start == off) {
        return Err(what(
            &"its storage is not a service allocation of the arena",
        ));
    }
    let map = shm_maps::maps::open_in(region, off, def, threads).map_err(|e| what(&e))?;
    publish(
        region,
        threads,
        st,
        install_name,
        def,
        &map,
        (off, len),
        device,
    );
    Ok(map)
}

/// Publishes a placed map in the directory and remembers it for collection.
#[allow(clippy::too_many_arguments)]
fn publish(
    region: &ShmRegion,
    threads: u32,
    st: &mut ControlState,
    install_name: &str,
    def: &MapDef,
    map: &Arc<dyn MapOps>,
    (off, len): (u64, u64),
    device: bool,
) {
    // Only a per-thread array has one slot set per worker; the directory says so.
    let threads = if def.kind == ebpf::MapKind::PerThreadArray {
        threads
    } else {
        1
    };
    let dir = region.register_map(&DirEntry {
        name: format!("{install_name}:{}", def.name),
        kind: def.kind.id(),
        key_size: def.key_size,
        value_size: def.value_size,
        max_entries: def.max_entries,
        flags: def.flags
            | if device {
                shm_maps::layout::MAP_FLAG_DEVICE
            } else {
                0
            },
        data_off: off,
        data_len: len,
        threads,
    });
    if dir.is_none() {
        tracing::warn!(map = %def.name, "map directory full or name too long: not published");
    }
    st.placed.push(Placed {
        map: Arc::downgrade(map),
        off,
        dir,
        name: format!("{install_name}:{}", def.name),
        len,
        device,
    });
}

/// Frees the storage of maps no installed version uses any more; returns how many.
pub(super) fn collect(svc: &Service, st: &mut ControlState) -> usize {
    let mut freed = 0;
    let mut i = 0;
    while i < st.placed.len() {
        if st.placed[i].map.strong_count() == 0 {
            let p = st.placed.swap_remove(i);
            if let Some(d) = p.dir {
                svc.region.unregister_map(d);
            }
            let _ = st.arena.free(p.off, Owner::Service);
            freed += 1;
        } else {
            i += 1;
        }
    }
    freed
}

/// Refuses a program that changes a map in host memory with read-modify-writes (atomics,
/// update and delete helpers: `maps_atomic`, from the verifier) on a service of several
/// GPUs whose atomics on host memory are not atomic with one another's (no PCIe atomics
/// to the host: `CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED` is 0). There, two GPUs
/// adding to one counter lose updates (measured on two H200s: 83,267 of 160,000 adds
/// kept, `bench/results/gpu_multi.md`).
pub(super) fn check_shared_atomics(
    svc: &Service,
    program: &Program,
    on_gpu: &[bool],
    maps_atomic: u64,
) -> Result<(), String> {
    let gpus = svc.gpu_count();
    if gpus < 2 {
        return Ok(());
    }
    let native = svc
        .with_gpus(|g| g.iter().all(|b| b.host_native_atomics()))
        .unwrap_or(true);
    if native {
        return Ok(());
    }
    let names: Vec<&str> = program.maps.iter().map(|d| d.name.as_str()).collect();
    let bad = atomic_in_host_memory(&names, on_gpu, maps_atomic);
    if bad.is_empty() {
        return Ok(());
    }
    Err(format!(
        "map(s) {} live in host memory and the program changes them atomically (atomic \
         instructions or map update/delete helpers), but on this machine the {gpus} GPUs' \
         atomics on host memory are not atomic with one another (no native host atomics): \
         updates from different GPUs would be lost. Count in a per-thread array (placed per \
         GPU and summed by `map dump`), or run the service on one GPU",
        bad.iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The maps (by name, in program order) that live in host memory (`on_gpu` clear) and
/// that the program changes with read-modify-writes (`maps_atomic` bit set; maps past the
/// 64th always count).
fn atomic_in_host_memory<'a>(names: &[&'a str], on_gpu: &[bool], maps_atomic: u64) -> Vec<&'a str> {
    names
        .iter()
        .enumerate()
        .filter(|(i, _)| !on_gpu.get(*i).copied().unwrap_or(false))
        .filter(|(i, _)| *i >= 64 || maps_atomic & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect()
}

/// A map entry: key bytes, value bytes.
type Entry = (Vec<u8>, Vec<u8>);

/// The entries of device map `qualified` (`len` bytes of storage), read from every GPU:
/// with one GPU, its copy; with several (per-thread arrays only), each key's value sets of
/// GPU 0, then of GPU 1, and so on, as `bpftool` lists per-CPU values CPU by CPU.
pub(super) fn device_entries(
    svc: &Service,
    qualified: &str,
    m: &Arc<dyn MapOps>,
    len: u64,
) -> Result<Vec<Entry>, String> {
    let gpus = svc.gpu_count().max(1) as u32;
    let _mirror = svc.device_maps.lock().unwrap_or_else(|p| p.into_inner());
    let mut merged: Vec<Entry> = Vec::new();
    for device in 0..gpus {
        svc.on_gpu(device, |b| b.map_sync(qualified, false, 0, len))
            .map_err(|e| format!("cannot read map `{qualified}` from GPU {device}: {e}"))?;
        let entries = m.entries();
        if device == 0 {
            merged = entries;
        } else {
            for ((k, v), (k2, v2)) in merged.iter_mut().zip(entries) {
                debug_assert_eq!(*k, k2, "arrays list their keys in order");
                v.extend_from_slice(&v2);
            }
        }
    }
    Ok(merged)
}

/// The storage size of `qualified` (`program:map`) if it is a device map.
pub(super) fn device_span(svc: &Service, qualified: &str) -> Option<u64> {
    let st = svc.state.lock().unwrap_or_else(|p| p.into_inner());
    st.placed
        .iter()
        .find(|p| p.device && p.name == qualified && p.map.strong_count() > 0)
        .map(|p| p.len)
}

/// `map update` of a device map: copy the GPU's contents into the mirror, update the
/// mirror, upload the bytes that changed. A GPU program writing the same bytes between the
/// two copies loses that write (documented: updates of device maps are atomic per 8-byte
/// word, not per entry, against running programs).
pub(super) fn update_device_map(
    svc: &Service,
    qualified: &str,
    m: &Arc<dyn MapOps>,
    len: u64,
    key: &[u8],
    value: &[u8],
    flags: u64,
) -> Result<(), String> {
    // Each GPU's copy in turn (several only for per-thread arrays: `placement_of`).
    let _mirror = svc.device_maps.lock().unwrap_or_else(|p| p.into_inner());
    for device in 0..svc.gpu_count() as u32 {
        update_on(svc, device, qualified, m, len, (key, value, flags))?;
    }
    Ok(())
}

/// [`update_device_map`] on GPU `device`'s copy; `update` is the key, value and flags.
fn update_on(
    svc: &Service,
    device: u32,
    qualified: &str,
    m: &Arc<dyn MapOps>,
    len: u64,
    (key, value, flags): (&[u8], &[u8], u64),
) -> Result<(), String> {
    let sync = |to_device: bool, off: u64, n: u64| {
        svc.on_gpu(device, |b| b.map_sync(qualified, to_device, off, n))
    };
    let off = {
        let st = svc.state.lock().unwrap_or_else(|p| p.into_inner());
        st.placed
            .iter()
            .find(|p| p.name == qualified)
            .map(|p| p.off)
            .ok_or_else(|| format!("map `{qualified}` is gone"))?
    };
    sync(false, 0, len).map_err(|e| format!("cannot read map `{qualified}` from the GPU: {e}"))?;
    let before = svc
        .region
        .read_arena(off, len)
        .ok_or_else(|| format!("map `{qualified}` lies outside the arena"))?;
    m.update(key, value, flags, 0)
        .map_err(|e| format!("update of map `{qualified}` failed: {e}"))?;
    let after = svc
        .region
        .read_arena(off, len)
        .ok_or_else(|| format!("map `{qualified}` lies outside the arena"))?;
    let first = before.iter().zip(&after).position(|(a, b)| a != b);
    let last = before.iter().zip(&after).rposition(|(a, b)| a != b);
    if let (Some(a), Some(b)) = (first, last) {
        // Whole 8-byte words: the GPU sees each word old or new, never half.
        let (a, b) = ((a as u64) & !7, ((b as u64) | 7) + 1);
        sync(true, a, b.min(len) - a)
            .map_err(|e| format!("cannot write map `{qualified}` to the GPU: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_maps_in_host_memory_changed_atomically_are_named() {
        // job_counter: `counts` (shm, atomic add), `per_worker` (on the GPUs, plain +=).
        assert_eq!(
            atomic_in_host_memory(&["counts", "per_worker"], &[false, true], 0b01),
            ["counts"]
        );
        // The same atomics on a map placed on the GPUs are each GPU's own.
        assert!(atomic_in_host_memory(&["counts"], &[true], 0b1).is_empty());
        // Plain stores only: nothing to refuse.
        assert!(atomic_in_host_memory(&["a", "b"], &[false, false], 0).is_empty());
        // Past the 64th map nothing is known: counted.
        let names: Vec<String> = (0..65).map(|i| format!("m{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(atomic_in_host_memory(&names, &[], 0), ["m64"]);
    }
}
