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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::btf::tests::blob;

    const fn info(kind: u32, vlen: u32) -> u32 {
        (kind << 24) | vlen
    }

    /// A `.maps` DATASEC with one variable `m`: `type` = `map_type` (via `__uint`),
    /// `max_entries` = 8, `key` = `int`, `value` = `long`, and optionally `key_size` = 8.
    fn one_map(map_type: u32, key_size_member: bool) -> Btf {
        // strings: 1 int, 5 long, 10 type, 15 max_entries, 27 key, 31 value, 37 m, 39 .maps,
        // 45 key_size
        let strings = b"\0int\0long\0type\0max_entries\0key\0value\0m\0.maps\0key_size\0";
        let mut members: Vec<u32> = vec![10, 3, 0, 15, 5, 64, 27, 8, 128, 31, 7, 192];
        let mut vlen = 4;
        if key_size_member {
            members.extend_from_slice(&[45, 13, 256]);
            vlen += 1;
        }
        let b = blob(
            &[
                (1, info(1, 0), 4, &[32]),             // 1 int
                (0, info(3, 0), 0, &[1, 1, map_type]), // 2 int[map_type]
                (0, info(2, 0), 2, &[]),               // 3 ptr -> 2
                (0, info(3, 0), 0, &[1, 1, 8]),        // 4 int[8]
                (0, info(2, 0), 4, &[]),               // 5 ptr -> 4
                (5, info(1, 0), 8, &[64]),             // 6 long
                (0, info(2, 0), 6, &[]),               // 7 ptr -> long
                (0, info(2, 0), 1, &[]),               // 8 ptr -> int
                (0, info(4, vlen), 40, &members),      // 9 struct
                (37, info(14, 0), 9, &[1]),            // 10 var m
                (39, info(15, 1), 40, &[10, 0, 40]),   // 11 datasec .maps
                (0, info(3, 0), 0, &[1, 1, 8]),        // 12 int[8]
                (0, info(2, 0), 12, &[]),              // 13 ptr -> int[8]
            ],
            strings,
        );
        Btf::parse(&b).expect("parse")
    }

    #[test]
    fn btf_map_members() {
        let def = btf_map(&one_map(2, false), "m").expect("map");
        assert_eq!(
            (
                def.kind,
                def.key_size,
                def.value_size,
                def.max_entries,
                def.flags,
                def.origin
            ),
            (MapKind::Array, 4, 8, 8, 0, MapOrigin::Btf)
        );
        let def = btf_map(&one_map(1, false), "m").expect("hash");
        assert_eq!(def.kind, MapKind::Hash);
    }

    #[test]
    fn btf_map_errors() {
        let e = btf_map(&one_map(5, false), "m").unwrap_err();
        assert!(e.to_string().contains("unsupported map type 5"), "{e}");
        // key (int, 4 bytes) and key_size 8 disagree.
        let e = btf_map(&one_map(1, true), "m").unwrap_err();
        assert_eq!(
            e.to_string(),
            "map `m`: `key_size` gives 8 but another member already gave 4"
        );
        let e = btf_map(&one_map(2, false), "nope").unwrap_err();
        assert!(e.to_string().contains("no variable of this name"), "{e}");
    }

    #[test]
    fn legacy_and_global_data() {
        let words: Vec<u8> = [27u32, 0, 0, 4096]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let d = legacy_map("rb", &words).expect("ringbuf");
        assert_eq!(
            (d.kind, d.max_entries, d.flags),
            (MapKind::RingBuf, 4096, 0)
        );
        let mut bad = words.clone();
        bad[12..16].copy_from_slice(&1000u32.to_le_bytes());
        assert!(
            legacy_map("rb", &bad)
                .unwrap_err()
                .to_string()
                .contains("power of two")
        );
        assert!(legacy_map("short", &words[..12]).is_err());
        assert_eq!(global_data_kind(".rodata.str1.1"), Some(false));
        assert_eq!(global_data_kind(".data"), Some(true));
        assert_eq!(global_data_kind(".bss.x"), Some(true));
        assert_eq!(global_data_kind(".database"), None);
        assert_eq!(global_data_kind(".rel.data"), None);
        let g = global_data(".bss", 3, vec![0; 3], true).unwrap();
        assert_eq!((g.key_size, g.value_size, g.max_entries), (4, 3, 1));
    }
}
