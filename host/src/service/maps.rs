//! Binding a program's maps to storage, and carrying maps over a `replace`.
//!
//! On `replace`, a map keeps its storage (and contents) when the new version declares a map
//! of the same name with the same kind, key size, value size and entry count. A map of the
//! same name with another shape refuses the replace. Read-only global data (`.rodata`) is
//! always taken from the new version.

use super::{ControlState, Service};
use device::programs::Installed;
use ebpf::maps::MapOps;
use ebpf::{MapDef, MapOrigin, Program};
use shm_maps::DirEntry;
use shm_maps::arena::Owner;
use std::sync::{Arc, Weak};

/// A map the service placed in the arena: freed once no program version uses it.
pub(crate) struct Placed {
    map: Weak<dyn MapOps>,
    off: u64,
    dir: Option<u32>,
}

fn shape(d: &MapDef) -> String {
    format!(
        "{:?} key {} value {} entries {}",
        d.kind, d.key_size, d.value_size, d.max_entries
    )
}

/// Storage for each of `program`'s maps, reusing `old`'s where the replace rules allow.
pub(super) fn bind(
    svc: &Service,
    st: &mut ControlState,
    install_name: &str,
    program: &Program,
    old: Option<&Installed>,
) -> Result<Vec<Arc<dyn MapOps>>, String> {
    let mut out = Vec::with_capacity(program.maps.len());
    for def in &program.maps {
        let prev = old.and_then(|o| {
            o.program
                .maps
                .iter()
                .zip(&o.maps)
                .find(|(d, _)| d.name == def.name)
        });
        let read_only = matches!(def.origin, MapOrigin::GlobalData { writable: false });
        match prev {
            Some((d, m)) if !read_only => {
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
                out.push(m.clone());
            }
            _ => out.push(create(svc, st, install_name, def)?),
        }
    }
    Ok(out)
}

/// Places a map in the region's arena and publishes it in the map directory as
/// `program:map`, so that client processes can attach to it.
fn create(
    svc: &Service,
    st: &mut ControlState,
    install_name: &str,
    def: &MapDef,
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
    let dir = svc.region.register_map(&DirEntry {
        name: format!("{install_name}:{}", def.name),
        kind: def.kind.id(),
        key_size: def.key_size,
        value_size: def.value_size,
        max_entries: def.max_entries,
        flags: def.flags,
        data_off: off,
        data_len: len,
        threads,
    });
    if dir.is_none() {
        tracing::warn!(map = %def.name, "map directory full or name too long: not published");
    }
    st.placed.push(Placed {
        map: Arc::downgrade(&map),
        off,
        dir,
    });
    Ok(map)
}

/// Frees the storage of maps no installed version uses any more.
pub(super) fn collect(svc: &Service, st: &mut ControlState) {
    let mut i = 0;
    while i < st.placed.len() {
        if st.placed[i].map.strong_count() == 0 {
            let p = st.placed.swap_remove(i);
            if let Some(d) = p.dir {
                svc.region.unregister_map(d);
            }
            let _ = st.arena.free(p.off, Owner::Service);
        } else {
            i += 1;
        }
    }
}
