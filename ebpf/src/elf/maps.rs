//! Map definitions found in an object: BTF-defined maps (`.maps`), legacy
//! `struct bpf_map_def` maps (`maps`) and global-data sections.
//!
//! | section                      | how a map is read                                   | origin |
//! |------------------------------|-----------------------------------------------------|--------|
//! | `.maps`                      | each symbol's VAR in the `.maps` DATASEC of `.BTF`: a struct whose members `type`, `max_entries`, `map_flags`, `key_size`, `value_size` are `int (*)[N]` (N is the value) and `key`, `value` are `T *` (the size of T) | `Btf` |
//! | `maps`                       | each symbol's bytes: `u32 type, key_size, value_size, max_entries[, map_flags]` | `Legacy` |
//! | `.rodata*`, `.data*`, `.bss*` | the whole section is entry 0 of a one-entry array (key 4, value = section size) | `GlobalData` |

use super::ElfError;
use super::btf::{Btf, BtfError, Kind};
use crate::program::{MapDef, MapKind, MapOrigin};

/// Which global-data family a section name belongs to: `Some(writable)`.
pub fn global_data_kind(name: &str) -> Option<bool> {
    let is = |prefix: &str| {
        name == prefix
            || name
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('.'))
    };
    if is(".rodata") {
        Some(false)
    } else if is(".data") || is(".bss") {
        Some(true)
    } else {
        None
    }
}

fn kind_from_id(name: &str, id: u64) -> Result<MapKind, ElfError> {
    u32::try_from(id)
        .ok()
        .and_then(MapKind::from_id)
        .ok_or_else(|| ElfError::BadMap {
            name: name.to_string(),
            msg: format!(
                "unsupported map type {id} (expected 1 hash, 2 array, 6 per-thread array or 27 ring buffer)"
            ),
        })
}

fn check_shape(def: &MapDef) -> Result<(), ElfError> {
    let bad = |msg: String| {
        Err(ElfError::BadMap {
            name: def.name.clone(),
            msg,
        })
    };
    match def.kind {
        MapKind::RingBuf => {
            if def.key_size != 0 || def.value_size != 0 {
                return bad(format!(
                    "a ring buffer has no key or value, found key size {} and value size {}",
                    def.key_size, def.value_size
                ));
            }
            if !def.max_entries.is_power_of_two() {
                return bad(format!(
                    "ring buffer size must be a power of two, found max_entries {}",
                    def.max_entries
                ));
            }
        }
        MapKind::Array | MapKind::PerThreadArray => {
            if def.key_size != 4 {
                return bad(format!("array key size must be 4, found {}", def.key_size));
            }
            if def.value_size == 0 {
                return bad("array value size must be greater than 0, found 0".to_string());
            }
        }
        MapKind::Hash => {
            if def.key_size == 0 || def.value_size == 0 {
                return bad(format!(
                    "hash key and value sizes must be greater than 0, found key size {} and value size {}",
                    def.key_size, def.value_size
                ));
            }
        }
    }
    if def.max_entries == 0 {
        return bad("max_entries must be greater than 0, found 0".to_string());
    }
    Ok(())
}

fn btf_err(e: BtfError) -> ElfError {
    ElfError::Btf { msg: e.0 }
}

/// Reads the BTF-defined map called `name` (a variable in the `.maps` DATASEC).
pub fn btf_map(btf: &Btf, name: &str) -> Result<MapDef, ElfError> {
    let bad = |msg: String| ElfError::BadMap {
        name: name.to_string(),
        msg,
    };
    let sec = btf
        .datasec(".maps")
        .ok_or_else(|| bad("no `.maps` DATASEC in .BTF".to_string()))?;
    let mut var_ty = None;
    for m in &sec.members {
        let v = btf.ty(m.ty).map_err(btf_err)?;
        if v.kind == Kind::Var && v.name == name {
            var_ty = Some(v.size_or_type);
            break;
        }
    }
    let var_ty =
        var_ty.ok_or_else(|| bad("no variable of this name in the `.maps` DATASEC".into()))?;
    let sid = btf.skip_mods(var_ty).map_err(btf_err)?;
    let st = btf.ty(sid).map_err(btf_err)?;
    if st.kind != Kind::Struct {
        return Err(bad(format!(
            "a BTF map must be a struct, found {:?} (type {sid})",
            st.kind
        )));
    }

    // `__uint(name, N)` is `int (*name)[N]`: the value is the array's element count.
    let uint = |ty: u32, member: &str| -> Result<u64, ElfError> {
        let p = btf.skip_mods(ty).map_err(btf_err)?;
        let pt = btf.ty(p).map_err(btf_err)?;
        if pt.kind != Kind::Ptr {
            return Err(bad(format!(
                "member `{member}` must be declared with __uint (a pointer to an array), found {:?}",
                pt.kind
            )));
        }
        let a = btf.skip_mods(pt.size_or_type).map_err(btf_err)?;
        let at = btf.ty(a).map_err(btf_err)?;
        match (at.kind, at.array) {
            (Kind::Array, Some((_, n))) => Ok(n as u64),
            _ => Err(bad(format!(
                "member `{member}` must be declared with __uint (a pointer to an array), found a pointer to {:?}",
                at.kind
            ))),
        }
    };
    // `__type(name, T)` is `T *name`: the value is sizeof(T).
    let type_size = |ty: u32, member: &str| -> Result<u64, ElfError> {
        let p = btf.skip_mods(ty).map_err(btf_err)?;
        let pt = btf.ty(p).map_err(btf_err)?;
        if pt.kind != Kind::Ptr {
            return Err(bad(format!(
                "member `{member}` must be declared with __type (a pointer), found {:?}",
                pt.kind
            )));
        }
        btf.size_of(pt.size_or_type)
            .map_err(|e| bad(format!("member `{member}`: {}", e.0)))
    };

    let mut map_type = None;
    let (mut key_size, mut value_size) = (None::<u64>, None::<u64>);
    let (mut max_entries, mut flags) = (None, 0u64);
    let set = |slot: &mut Option<u64>, v: u64, member: &str| -> Result<(), ElfError> {
        if let Some(old) = *slot
            && old != v
        {
            return Err(bad(format!(
                "`{member}` gives {v} but another member already gave {old}"
            )));
        }
        *slot = Some(v);
        Ok(())
    };
    for m in &st.members {
        match m.name.as_str() {
            "type" => map_type = Some(uint(m.ty, "type")?),
            "max_entries" => max_entries = Some(uint(m.ty, "max_entries")?),
            "map_flags" => flags = uint(m.ty, "map_flags")?,
            "key_size" => set(&mut key_size, uint(m.ty, "key_size")?, "key_size")?,
            "value_size" => set(&mut value_size, uint(m.ty, "value_size")?, "value_size")?,
            "key" => set(&mut key_size, type_size(m.ty, "key")?, "key")?,
            "value" => set(&mut value_size, type_size(m.ty, "value")?, "value")?,
            "values" | "inner_map" => {
                return Err(bad(format!(
                    "member `{}` (map-in-map or initial values) is not supported",
                    m.name
                )));
            }
            other => tracing::debug!(map = name, member = other, "ignoring BTF map member"),
        }
    }
    let map_type = map_type.ok_or_else(|| bad("missing member `type`".to_string()))?;
    let kind = kind_from_id(name, map_type)?;
    let max_entries = max_entries.ok_or_else(|| bad("missing member `max_entries`".to_string()))?;
    let fit = |v: u64, what: &str| {
        u32::try_from(v).map_err(|_| bad(format!("{what} {v} does not fit in 32 bits")))
    };
    let def = MapDef {
        name: name.to_string(),
        kind,
        key_size: fit(key_size.unwrap_or(0), "key size")?,
        value_size: fit(value_size.unwrap_or(0), "value size")?,
        max_entries: fit(max_entries, "max_entries")?,
        flags: fit(flags, "map_flags")?,
        origin: MapOrigin::Btf,
        init: None,
    };
    check_shape(&def)?;
    Ok(def)
}

/// Reads a legacy `struct bpf_map_def` from the bytes of its symbol.
pub fn legacy_map(name: &str, bytes: &[u8]) -> Result<MapDef, ElfError> {
    if bytes.len() < 16 {
        return Err(ElfError::BadMap {
            name: name.to_string(),
            msg: format!(
                "legacy map definition is {} bytes, expected at least 16 (type, key_size, value_size, max_entries)",
                bytes.len()
            ),
        });
    }
    let word = |i: usize| {
        bytes
            .get(i * 4..i * 4 + 4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let def = MapDef {
        name: name.to_string(),
        kind: kind_from_id(name, word(0) as u64)?,
        key_size: word(1),
        value_size: word(2),
        max_entries: word(3),
        flags: word(4),
        origin: MapOrigin::Legacy,
        init: None,
    };
    check_shape(&def)?;
    Ok(def)
}

/// The one-entry array map for a global-data section.
pub fn global_data(
    name: &str,
    size: u64,
    init: Vec<u8>,
    writable: bool,
) -> Result<MapDef, ElfError> {
    let value_size = u32::try_from(size).map_err(|_| ElfError::BadMap {
        name: name.to_string(),
        msg: format!("global-data section of {size} bytes is too large (at most 4 GiB)"),
    })?;
    Ok(MapDef {
        name: name.to_string(),
        kind: MapKind::Array,
        key_size: 4,
        value_size,
        max_entries: 1,
        flags: 0,
        origin: MapOrigin::GlobalData { writable },
        init: Some(init),
    })
}
