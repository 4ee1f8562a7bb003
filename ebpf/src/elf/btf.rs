//! A small BTF reader: just enough of `.BTF` to read BTF-defined map declarations.
//!
//! ```text
//! .BTF = header | types (type_off, type_len) | strings (str_off, str_len)
//! type = name_off u32 | info u32 (vlen 0..16, kind 24..29, kind_flag 31) | size_or_type u32
//!        | kind-specific tail (INT 4, ARRAY 12, STRUCT/UNION 12*vlen, ENUM 8*vlen,
//!          FUNC_PROTO 8*vlen, VAR 4, DATASEC 12*vlen, DECL_TAG 4, ENUM64 12*vlen)
//! ```
//!
//! Type id 0 is `void`; the first type in the section has id 1. Every access is
//! bounds-checked and every type walk has a depth limit, so malformed input yields
//! [`BtfError`], never a panic or a hang.

use std::collections::HashMap;

/// `BTF_MAGIC`.
const MAGIC: u16 = 0xeb9f;
/// How many typedef/modifier/pointer hops a walk may take before giving up.
const MAX_DEPTH: usize = 64;

/// A malformed or unsupported BTF section.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BtfError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, BtfError> {
    Err(BtfError(msg.into()))
}

/// BTF kinds (`BTF_KIND_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Kind {
    Int,
    Ptr,
    Array,
    Struct,
    Union,
    Enum,
    Fwd,
    Typedef,
    Volatile,
    Const,
    Restrict,
    Func,
    FuncProto,
    Var,
    Datasec,
    Float,
    DeclTag,
    TypeTag,
    Enum64,
}

impl Kind {
    fn from_raw(k: u32) -> Option<Kind> {
        Some(match k {
            1 => Kind::Int,
            2 => Kind::Ptr,
            3 => Kind::Array,
            4 => Kind::Struct,
            5 => Kind::Union,
            6 => Kind::Enum,
            7 => Kind::Fwd,
            8 => Kind::Typedef,
            9 => Kind::Volatile,
            10 => Kind::Const,
            11 => Kind::Restrict,
            12 => Kind::Func,
            13 => Kind::FuncProto,
            14 => Kind::Var,
            15 => Kind::Datasec,
            16 => Kind::Float,
            17 => Kind::DeclTag,
            18 => Kind::TypeTag,
            19 => Kind::Enum64,
            _ => return None,
        })
    }
}

/// A struct/union member or a DATASEC entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Member name (empty for DATASEC entries).
    pub name: String,
    /// Type id.
    pub ty: u32,
    /// Bit offset (members) or byte offset (DATASEC entries).
    pub offset: u32,
    /// Size in bytes (DATASEC entries only).
    pub size: u32,
}

/// One BTF type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Type {
    /// The kind.
    pub kind: Kind,
    /// Name (may be empty).
    pub name: String,
    /// `size` for sized kinds, the referenced type id for the others.
    pub size_or_type: u32,
    /// Members (STRUCT, UNION, DATASEC).
    pub members: Vec<Member>,
    /// ARRAY: element type and element count.
    pub array: Option<(u32, u32)>,
}

/// A parsed `.BTF` section.
#[derive(Clone, Debug, Default)]
pub struct Btf {
    /// Types; index `i` holds type id `i + 1`.
    types: Vec<Type>,
    /// DATASEC name -> type id.
    datasecs: HashMap<String, u32>,
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn u32(&mut self) -> Result<u32, BtfError> {
        let end = self.pos.checked_add(4).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return err(format!(
                "type data truncated at byte {} of {}",
                self.pos,
                self.data.len()
            ));
        };
        let v = u32::from_le_bytes(self.data[self.pos..end].try_into().unwrap_or([0; 4]));
        self.pos = end;
        Ok(v)
    }

    fn skip(&mut self, n: usize) -> Result<(), BtfError> {
        match self.pos.checked_add(n).filter(|&e| e <= self.data.len()) {
            Some(e) => {
                self.pos = e;
                Ok(())
            }
            None => err(format!(
                "type data truncated: {} more bytes needed at byte {} of {}",
                n,
                self.pos,
                self.data.len()
            )),
        }
    }
}

fn read_u32(data: &[u8], at: usize) -> Option<u32> {
    let b = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

impl Btf {
    /// Parses a little-endian `.BTF` section.
    pub fn parse(data: &[u8]) -> Result<Btf, BtfError> {
        let magic = data.get(0..2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        if magic != Some(MAGIC) {
            return err(format!(
                "bad magic {} (expected 0xeb9f, little-endian)",
                magic.map_or("<truncated>".to_string(), |m| format!("{m:#06x}"))
            ));
        }
        let field = |at: usize, what: &str| {
            read_u32(data, at).ok_or_else(|| BtfError(format!("header truncated reading {what}")))
        };
        let hdr_len = field(4, "hdr_len")? as usize;
        let type_off = field(8, "type_off")? as usize;
        let type_len = field(12, "type_len")? as usize;
        let str_off = field(16, "str_off")? as usize;
        let str_len = field(20, "str_len")? as usize;
        let range = |off: usize, len: usize, what: &str| {
            let start = hdr_len.checked_add(off);
            let end = start.and_then(|s| s.checked_add(len));
            match (start, end) {
                (Some(s), Some(e)) if e <= data.len() => Ok(&data[s..e]),
                _ => err(format!(
                    "{what} section (offset {off}, length {len}) runs past the end of .BTF ({} bytes)",
                    data.len()
                )),
            }
        };
        let types_data = range(type_off, type_len, "type")?;
        let strings = range(str_off, str_len, "string")?;
        let name = |off: u32| -> Result<String, BtfError> {
            let off = off as usize;
            let Some(rest) = strings.get(off..) else {
                return err(format!(
                    "string offset {off} past the string section ({} bytes)",
                    strings.len()
                ));
            };
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
        };

        let mut btf = Btf::default();
        let mut r = Reader {
            data: types_data,
            pos: 0,
        };
        while r.pos < types_data.len() {
            let id = btf.types.len() + 1;
            let name_off = r.u32()?;
            let info = r.u32()?;
            let size_or_type = r.u32()?;
            let vlen = (info & 0xffff) as usize;
            let raw_kind = (info >> 24) & 0x1f;
            let Some(kind) = Kind::from_raw(raw_kind) else {
                return err(format!("type {id}: unknown kind {raw_kind}"));
            };
            let mut t = Type {
                kind,
                name: name(name_off)?,
                size_or_type,
                members: Vec::new(),
                array: None,
            };
            match kind {
                Kind::Int | Kind::Var | Kind::DeclTag => r.skip(4)?,
                Kind::Array => {
                    let elem = r.u32()?;
                    let _index = r.u32()?;
                    let nelems = r.u32()?;
                    t.array = Some((elem, nelems));
                }
                Kind::Struct | Kind::Union => {
                    for _ in 0..vlen {
                        let mname = r.u32()?;
                        let ty = r.u32()?;
                        let offset = r.u32()?;
                        t.members.push(Member {
                            name: name(mname)?,
                            ty,
                            offset,
                            size: 0,
                        });
                    }
                }
                Kind::Datasec => {
                    for _ in 0..vlen {
                        let ty = r.u32()?;
                        let offset = r.u32()?;
                        let size = r.u32()?;
                        t.members.push(Member {
                            name: String::new(),
                            ty,
                            offset,
                            size,
                        });
                    }
                    btf.datasecs.insert(t.name.clone(), id as u32);
                }
                Kind::Enum | Kind::FuncProto => r.skip(vlen.saturating_mul(8))?,
                Kind::Enum64 => r.skip(vlen.saturating_mul(12))?,
                Kind::Ptr
                | Kind::Fwd
                | Kind::Typedef
                | Kind::Volatile
                | Kind::Const
                | Kind::Restrict
                | Kind::Func
                | Kind::Float
                | Kind::TypeTag => {}
            }
            btf.types.push(t);
        }
        Ok(btf)
    }

    /// The type with id `id` (0, `void`, has none).
    pub fn ty(&self, id: u32) -> Result<&Type, BtfError> {
        if id == 0 {
            return err("type id 0 (void) where a type was expected");
        }
        self.types.get(id as usize - 1).ok_or_else(|| {
            BtfError(format!(
                "type id {id} out of range (the section has {} types)",
                self.types.len()
            ))
        })
    }

    /// The DATASEC type called `name`, if any.
    pub fn datasec(&self, name: &str) -> Option<&Type> {
        self.datasecs.get(name).and_then(|&id| self.ty(id).ok())
    }

    /// Follows typedefs, qualifiers, type tags and VARs to the underlying type id.
    pub fn skip_mods(&self, mut id: u32) -> Result<u32, BtfError> {
        for _ in 0..MAX_DEPTH {
            let t = self.ty(id)?;
            match t.kind {
                Kind::Typedef
                | Kind::Volatile
                | Kind::Const
                | Kind::Restrict
                | Kind::TypeTag
                | Kind::Var => id = t.size_or_type,
                _ => return Ok(id),
            }
        }
        err(format!("type chain deeper than {MAX_DEPTH} at type {id}"))
    }

    /// The size in bytes of type `id`.
    pub fn size_of(&self, id: u32) -> Result<u64, BtfError> {
        self.size_of_depth(id, 0)
    }

    fn size_of_depth(&self, id: u32, depth: usize) -> Result<u64, BtfError> {
        if depth > MAX_DEPTH {
            return err(format!("type chain deeper than {MAX_DEPTH} at type {id}"));
        }
        let id = self.skip_mods(id)?;
        let t = self.ty(id)?;
        match t.kind {
            Kind::Int
            | Kind::Struct
            | Kind::Union
            | Kind::Enum
            | Kind::Enum64
            | Kind::Float
            | Kind::Datasec => Ok(t.size_or_type as u64),
            Kind::Ptr => Ok(8),
            Kind::Array => {
                let (elem, n) = t.array.unwrap_or((0, 0));
                let es = self.size_of_depth(elem, depth + 1)?;
                es.checked_mul(n as u64)
                    .ok_or_else(|| BtfError(format!("array type {id} size overflows")))
            }
            k => err(format!("type {id} ({k:?}) has no size")),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a `.BTF` blob from `(name, info, size_or_type, tail words)` and a string table.
    pub(crate) fn blob(types: &[(u32, u32, u32, &[u32])], strings: &[u8]) -> Vec<u8> {
        let mut t = Vec::new();
        for (name, info, st, tail) in types {
            for w in [*name, *info, *st].iter().chain(tail.iter()) {
                t.extend_from_slice(&w.to_le_bytes());
            }
        }
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&[1, 0]);
        for w in [
            24u32,
            0,
            t.len() as u32,
            t.len() as u32,
            strings.len() as u32,
        ] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(&t);
        b.extend_from_slice(strings);
        b
    }

    const fn info(kind: u32, vlen: u32) -> u32 {
        (kind << 24) | vlen
    }

    #[test]
    fn sizes_through_typedefs_qualifiers_arrays_and_pointers() {
        // 1: int (4), 2: typedef u32_t -> 1, 3: const -> 2, 4: array of 3 x 5,
        // 5: ptr -> 4, 6: struct { u32_t a; ptr b; } size 16
        let strings = b"\0int\0u32_t\0s\0a\0b\0";
        let b = blob(
            &[
                (1, info(1, 0), 4, &[32]),
                (5, info(8, 0), 1, &[]),
                (0, info(10, 0), 2, &[]),
                (0, info(3, 0), 0, &[3, 1, 5]),
                (0, info(2, 0), 4, &[]),
                (11, info(4, 2), 16, &[13, 2, 0, 15, 5, 64]),
            ],
            strings,
        );
        let btf = Btf::parse(&b).expect("parse");
        assert_eq!(btf.size_of(1), Ok(4));
        assert_eq!(btf.size_of(2), Ok(4));
        assert_eq!(btf.size_of(3), Ok(4));
        assert_eq!(btf.size_of(4), Ok(20));
        assert_eq!(btf.size_of(5), Ok(8));
        assert_eq!(btf.size_of(6), Ok(16));
        let s = btf.ty(6).unwrap();
        assert_eq!(s.name, "s");
        assert_eq!(
            s.members
                .iter()
                .map(|m| (m.name.as_str(), m.ty))
                .collect::<Vec<_>>(),
            [("a", 2), ("b", 5)]
        );
        assert!(btf.ty(0).is_err());
        assert!(btf.ty(7).is_err());
    }

    #[test]
    fn cycles_and_garbage_are_errors() {
        // 1: typedef -> 2, 2: typedef -> 1 (a cycle)
        let b = blob(&[(0, info(8, 0), 2, &[]), (0, info(8, 0), 1, &[])], b"\0");
        let btf = Btf::parse(&b).expect("parse");
        assert!(btf.size_of(1).unwrap_err().0.contains("deeper than"));
        // Unknown kind 31.
        let b = blob(&[(0, info(31, 0), 0, &[])], b"\0");
        assert_eq!(Btf::parse(&b).unwrap_err().0, "type 1: unknown kind 31");
        // Name offset past the strings.
        let b = blob(&[(99, info(1, 0), 4, &[32])], b"\0");
        assert!(Btf::parse(&b).unwrap_err().0.contains("string offset 99"));
        // Struct whose members run past the type data.
        let b = blob(&[(0, info(4, 3), 8, &[0, 1, 0])], b"\0");
        assert!(Btf::parse(&b).unwrap_err().0.contains("truncated"));
        assert!(Btf::parse(&[0x9f, 0xeb, 1]).is_err());
        assert!(Btf::parse(&[]).unwrap_err().0.contains("bad magic"));
    }
}
