//! Binding a program's maps to storage, and carrying maps over a `replace`.
//!
//! On `replace`, a map keeps its storage (and contents) when the new version declares a map
//! of the same name with the same kind, key size, value size and entry count. A map of the
//! same name with another shape refuses the replace. Read-only global data (`.rodata`) is
//! always taken from the new version.

use super::Service;
use device::programs::Installed;
use ebpf::maps::MapOps;
use ebpf::{MapDef, MapOrigin, Program};
use std::sync::Arc;

fn shape(d: &MapDef) -> String {
    format!(
        "{:?} key {} value {} entries {}",
        d.kind, d.key_size, d.value_size, d.max_entries
    )
}

/// Storage for each of `program`'s maps, reusing `old`'s where the replace rules allow.
pub(super) fn bind(
    svc: &Service,
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
            _ => out.push(create(svc, def)?),
        }
    }
    Ok(out)
}

fn create(svc: &Service, def: &MapDef) -> Result<Arc<dyn MapOps>, String> {
    ebpf::maps::create_local(def, svc.cfg.workers.max(1))
        .map_err(|e| format!("cannot create map `{}`: {e}", def.name))
}
