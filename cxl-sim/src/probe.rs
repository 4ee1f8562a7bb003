//! The delay probe (`bpf/cxl.bpf.c`, a `memprobe/*` program) and the kernel timer
//! (`bpf/cxl_time.bpf.c`): their objects are embedded, and
//! [`object_with`] writes a [`CxlConfig`] into the object's `cxl_config` global, whose
//! bytes become the map's initial value when `trace` loads it.

use crate::abi::{CxlConfig, MAGIC, VERSION};
use object::{Object, ObjectSection};

/// Bytes at an 8-byte boundary: ELF readers want their header aligned.
#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);

static DELAY: &Aligned<[u8]> = &Aligned(*include_bytes!("../bpf/cxl.bpf.o"));
static TIME: &Aligned<[u8]> = &Aligned(*include_bytes!("../bpf/cxl_time.bpf.o"));

/// The object `scripts/build-builtin-probes` builds from `bpf/cxl.bpf.c` (8-byte aligned).
pub const OBJECT: &[u8] = &DELAY.0;
/// The kernel timer (`bpf/cxl_time.bpf.c`): entry and exit probes summing each kernel's
/// launch times in `cxl_kernels` and `cxl_kernel_end`.
pub const TIME_OBJECT: &[u8] = &TIME.0;
/// The section of the `cxl_config` global.
pub const CONFIG_SECTION: &str = ".data.cxl_config";

/// The embedded object is not what this crate expects.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Not an ELF object.
    #[error("the delay probe's object does not parse: {0}")]
    Elf(#[from] object::Error),
    /// No config section, or one of another size or magic (the object is stale).
    #[error(
        "the delay probe's object has no {CONFIG_SECTION} section of {want} bytes starting with the magic (found {found}): rebuild it with scripts/build-builtin-probes"
    )]
    Config {
        /// Bytes expected.
        want: usize,
        /// What was found.
        found: String,
    },
    /// The configuration's layout version is not this crate's (the object is stale).
    #[error(
        "the delay probe's object has cxl_config version {found}, this build expects {VERSION}: rebuild it with scripts/build-builtin-probes"
    )]
    Version {
        /// The version word found.
        found: u64,
    },
    /// The site programs cannot be named as asked.
    #[error("site placement: {0}")]
    Site(String),
}

/// The site programs' section names in the object (`bpf/cxl.bpf.c`): a prefix the attach
/// side skips, then `_` padding that [`with_site`] overwrites.
const SITE_SECTIONS: [(&str, &str); 2] = [
    ("cxl.site.enter/", "uprobe"),
    ("cxl.site.exit/", "uretprobe"),
];

/// `object` with its site programs named `uprobe/APP:FUNC` and `uretprobe/APP:FUNC`, so that
/// they attach at the entry and return of `func`, a function of the executable `app` (its
/// file name): `--placement site=FUNC` on a running application. Every copy of each
/// placeholder (the section name table's and BTF's) is rewritten in place, padded with
/// NULs.
pub fn with_site(object: &[u8], app: &str, func: &str) -> Result<Vec<u8>, ProbeError> {
    if func.is_empty() || app.is_empty() || [app, func].iter().any(|t| t.contains(['\0', ':'])) {
        return Err(ProbeError::Site(format!(
            "`{app}:{func}` is not a function of an executable (expected FILE:FUNCTION, neither empty, no `:` inside)"
        )));
    }
    let mut bytes = object.to_vec();
    for (prefix, kind) in SITE_SECTIONS {
        let name = format!("{kind}/{app}:{func}");
        let mut found = 0;
        let mut at = 0;
        while let Some(k) = find(&bytes[at..], prefix.as_bytes()) {
            let start = at + k;
            let pad = bytes[start + prefix.len()..]
                .iter()
                .take_while(|&&b| b == b'_')
                .count();
            let len = prefix.len() + pad;
            at = start + len.max(1);
            if pad < 64 || bytes.get(start + len) != Some(&0) {
                continue;
            }
            if name.len() > len {
                return Err(ProbeError::Site(format!(
                    "section name `{name}` is longer than the {len} bytes the object has room for"
                )));
            }
            bytes[start..start + len].fill(0);
            bytes[start..start + name.len()].copy_from_slice(name.as_bytes());
            found += 1;
        }
        if found == 0 {
            return Err(ProbeError::Site(format!(
                "the delay probe's object has no `{prefix}` site program: rebuild it with scripts/build-builtin-probes"
            )));
        }
    }
    Ok(bytes)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// [`OBJECT`] with `config` as the global's initial value.
pub fn object_with(config: &CxlConfig) -> Result<Vec<u8>, ProbeError> {
    patch(OBJECT, config)
}

/// A probe object built from `bpf/cxl.bpf.c` (`object`) with `config` as the global's
/// initial value.
pub fn patch(object: &[u8], config: &CxlConfig) -> Result<Vec<u8>, ProbeError> {
    let mut bytes = object.to_vec();
    let want = std::mem::size_of::<CxlConfig>();
    let range = {
        let file = object::File::parse(object)?;
        let sec = file.section_by_name(CONFIG_SECTION);
        let found = match &sec {
            None => "none".to_string(),
            Some(s) => format!("{} bytes", s.size()),
        };
        let (off, len) = sec
            .and_then(|s| s.file_range())
            .ok_or_else(|| ProbeError::Config {
                want,
                found: found.clone(),
            })?;
        let (off, len) = (off as usize, len as usize);
        if len != want || object.get(off..off + 8) != Some(&MAGIC.to_le_bytes()[..]) {
            return Err(ProbeError::Config { want, found });
        }
        let version = object
            .get(off + 8..off + 16)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        if version != Some(VERSION) {
            return Err(ProbeError::Version {
                found: version.unwrap_or(0),
            });
        }
        off..off + len
    };
    bytes[range].copy_from_slice(&config.to_bytes());
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An object whose configuration is of another layout version is refused, naming both.
    #[test]
    fn an_object_of_another_version_is_refused() {
        let c = CxlConfig::new();
        assert!(object_with(&c).is_ok());
        let file = object::File::parse(OBJECT).unwrap();
        let (off, _) = file
            .section_by_name(CONFIG_SECTION)
            .unwrap()
            .file_range()
            .unwrap();
        let mut old = OBJECT.to_vec();
        let v = off as usize + 8;
        old[v..v + 8].copy_from_slice(&1u64.to_le_bytes());
        let e = patch(&old, &c).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("version 1, this build expects {VERSION}")),
            "{e}"
        );
    }
}
