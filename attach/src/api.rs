//! The driver entry points the shim wraps, as data: their exported symbols, the names
//! `cuGetProcAddress` takes, which of them launch, and what a host probe's
//! `uprobe/libcuda.so:FUNCTION` (or another library's function) names. Offline code (probe
//! loading, `trace`, the API log's readers) uses this; the wrappers themselves are
//! [`crate::shim::api`]'s, made from the same table (`shim/api_table.rs`).

use std::ffi::{CStr, c_int};

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
pub(crate) const PROC_PTDS: u64 = 2;

/// Bytes of a host probe's ctx: laid out as [`ebpf::ProbeCtx`] (`struct
/// bpftime_probe_ctx`), whose first 168 bytes are x86-64 `struct pt_regs`, so libbpf's
/// `PT_REGS_*` macros read the arguments (the shim fills it: [`crate::shim::uprobes`]).
pub const HOST_CTX_SIZE: usize = ebpf::ProbeCtx::SIZE;

macro_rules! api_table {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $sym:ident, $base:literal, $ptds:literal, $kind:ident,
        fn $wrapper:ident($($a:ident: $t:ty),*)
        $(pre |$pf:ident, $pp:ident $(, $pe:ident)?| $pv:ident = $ps:expr;)?
        |$ev:ident| $fill:block
    )*) => {
        /// The entry points the shim wraps; an API log event's `call` is the position in
        /// [`Api::ALL`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Api { $($(#[$doc])* $variant,)* }

        impl Api {
            /// Every entry point, in `call` order.
            pub const ALL: &'static [Api] = &[$(Api::$variant,)*];

            /// The exported symbol.
            pub fn symbol(self) -> &'static CStr {
                match self {$(
                    Api::$variant => const {
                        match CStr::from_bytes_with_nul(concat!(stringify!($sym), "\0").as_bytes()) {
                            Ok(c) => c,
                            Err(_) => panic!("a symbol without NUL"),
                        }
                    },
                )*}
            }

            /// The name `cuGetProcAddress` takes, and whether this is the per-thread-stream
            /// variant of it.
            fn proc(self) -> (&'static [u8], bool) {
                match self { $(Api::$variant => ($base, $ptds),)* }
            }

            /// Whether this entry launches a kernel (and the shim numbers it).
            pub fn is_launch(self) -> bool {
                match self { $(Api::$variant => false $(|| { let _ = stringify!($pf); true })?,)* }
            }
        }
    };
}

include!("shim/api_table.rs");

impl Api {
    /// The symbol as text.
    pub fn name(self) -> &'static str {
        self.symbol().to_str().unwrap_or("?")
    }

    /// The `cuGetProcAddress` versions whose entry has this wrapper's signature: the `_v2`
    /// entries from CUDA 3.2 (before it, 32-bit sizes and device pointers), and
    /// `cuMemPrefetchAsync` before 12.2 (from it, a `CUmemLocation` in place of the device).
    fn versions(self) -> std::ops::Range<c_int> {
        match self {
            Api::MemPrefetchAsync | Api::MemPrefetchAsyncPtsz => 8000..12020,
            _ if self.name().contains("_v2") => 3020..c_int::MAX,
            _ => 0..c_int::MAX,
        }
    }

    /// The entry a lookup names: an exact export (`dlsym`, `version` 0), or a base name of
    /// `cuGetProcAddress` at a version where the entry has our signature, with `flags`
    /// picking the per-thread-stream variant.
    pub fn lookup(name: &[u8], version: c_int, flags: u64) -> Option<Api> {
        if version == 0 {
            return Api::ALL
                .iter()
                .copied()
                .find(|a| a.symbol().to_bytes() == name);
        }
        let ptds = flags & PROC_PTDS != 0;
        Api::ALL
            .iter()
            .copied()
            .find(|a| a.proc() == (name, ptds) && a.versions().contains(&version))
    }
}

/// The driver entry point of an event's `call` number.
pub fn call_name(call: u16) -> &'static str {
    Api::ALL.get(call as usize).map(|a| a.name()).unwrap_or("?")
}

/// What a host probe's `library:function` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Driver functions the shim wraps (`libcuda.so`).
    Driver(Vec<Api>),
    /// An exported function of another shared library the application uses
    /// ([`crate::shim::symprobes`]).
    Symbol {
        /// The library: a file name (`libfoo.so`, matching `libfoo.so.1` too) or a path.
        lib: String,
        /// The exported function.
        func: String,
    },
}

/// [`resolve`] for `libcuda.so`; for any other library, the exported function it names
/// (found, or refused with the library and the symbol named, when the application starts).
pub fn target(pattern: &str) -> Result<Target, String> {
    let (lib, func) = pattern.rsplit_once(':').unwrap_or(("libcuda.so", pattern));
    if is_driver_lib(lib) {
        return resolve(pattern).map(Target::Driver);
    }
    let ident = !func.is_empty()
        && !func.starts_with(|c: char| c.is_ascii_digit())
        && func
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '@');
    if lib.is_empty() || !ident {
        return Err(format!(
            "`{lib}:{func}`: a host probe names one exported function of a library (`uprobe/libfoo.so:function`); wildcards reach only libcuda.so"
        ));
    }
    Ok(Target::Symbol {
        lib: lib.to_string(),
        func: func.to_string(),
    })
}

fn is_driver_lib(lib: &str) -> bool {
    matches!(lib, "libcuda.so" | "libcuda.so.1" | "libcuda")
}

/// The wrapped functions a probe's `library:function` names. `libcuda.so` (or `.so.1`) is
/// the library, and may be left out; the function is an export (`cuMemAlloc_v2`), the
/// name `cuda.h` gives it (`cuMemAlloc`), or `*`: every function the shim wraps.
pub fn resolve(pattern: &str) -> Result<Vec<Api>, String> {
    let (lib, func) = pattern.rsplit_once(':').unwrap_or(("libcuda.so", pattern));
    if !is_driver_lib(lib) {
        return Err(format!(
            "`{lib}:{func}`: host probes reach the functions of libcuda.so that the shim wraps, not library `{lib}`"
        ));
    }
    if func == "*" {
        return Ok(Api::ALL.to_vec());
    }
    let v2 = format!("{func}_v2");
    Api::ALL
        .iter()
        .copied()
        .find(|a| a.name() == func || a.name() == v2)
        .map(|a| vec![a])
        .ok_or_else(|| {
            let names: Vec<&str> = Api::ALL.iter().map(|a| a.name()).collect();
            format!(
                "`{lib}:{func}`: no such function among those the shim can probe in libcuda.so ({})",
                names.join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_pick_the_right_variant() {
        assert_eq!(Api::ALL.len(), 40);
        assert_eq!(
            Api::lookup(b"cuMemcpyHtoDAsync", 12000, 0),
            Some(Api::MemcpyHtoDAsync)
        );
        assert_eq!(
            Api::lookup(b"cuMemcpyHtoDAsync", 12000, PROC_PTDS),
            Some(Api::MemcpyHtoDAsyncPtsz)
        );
        assert_eq!(
            Api::lookup(b"cuMemcpyHtoDAsync_v2_ptsz", 0, 0),
            Some(Api::MemcpyHtoDAsyncPtsz)
        );
        assert_eq!(Api::lookup(b"cuMemcpyHtoD", 3000, 0), None, "the v1 ABI");
        // What CUDA 13's cudart asks for (seen on the device).
        assert_eq!(Api::lookup(b"cuMemcpyHtoD", 3020, 0), Some(Api::MemcpyHtoD));
        assert_eq!(
            Api::lookup(b"cuMemcpyHtoD", 7000, 2),
            Some(Api::MemcpyHtoDPtds)
        );
        assert_eq!(
            Api::lookup(b"cuMemHostAlloc", 2020, 0),
            Some(Api::MemHostAlloc)
        );
        assert_eq!(
            Api::lookup(b"cuMemPrefetchAsync", 8000, 0),
            Some(Api::MemPrefetchAsync)
        );
        assert_eq!(
            Api::lookup(b"cuMemPrefetchAsync", 12020, 0),
            None,
            "the CUmemLocation signature"
        );
        assert_eq!(Api::lookup(b"cuMemcpyHtoD", 0, 0), None, "not an export");
        assert_eq!(Api::lookup(b"cuCtxSynchronize", 12000, PROC_PTDS), None);
        for (i, a) in Api::ALL.iter().enumerate() {
            assert_eq!(*a as usize, i);
            assert_eq!(Api::lookup(a.symbol().to_bytes(), 0, 0), Some(*a));
            assert_eq!(call_name(i as u16), a.name());
        }
    }

    #[test]
    fn sections_name_wrapped_functions_or_fail_naming_them() {
        assert_eq!(resolve("libcuda.so:cuMemAlloc"), Ok(vec![Api::MemAlloc]));
        assert_eq!(
            resolve("libcuda.so.1:cuMemAlloc_v2"),
            Ok(vec![Api::MemAlloc])
        );
        assert_eq!(resolve("cuLaunchKernel"), Ok(vec![Api::LaunchKernel]));
        assert_eq!(
            resolve("libcuda.so:cuMemcpyHtoDAsync_v2_ptsz"),
            Ok(vec![Api::MemcpyHtoDAsyncPtsz])
        );
        assert_eq!(resolve("libcuda.so:*"), Ok(Api::ALL.to_vec()));
        assert!(resolve("libcudart.so:*").is_err());
        let e = resolve("libcuda.so:cuModuleGetFunction").unwrap_err();
        assert!(
            e.contains("libcuda.so:cuModuleGetFunction") && e.contains("cuMemAlloc_v2"),
            "{e}"
        );
        let e = resolve("libcudart.so:cudaMalloc").unwrap_err();
        assert!(e.contains("not library `libcudart.so`"), "{e}");
        assert_eq!(
            target("libcudart.so:cudaMalloc"),
            Ok(Target::Symbol {
                lib: "libcudart.so".into(),
                func: "cudaMalloc".into()
            })
        );
        assert_eq!(
            target("libcuda.so:cuMemAlloc"),
            Ok(Target::Driver(vec![Api::MemAlloc]))
        );
        for bad in [
            "libfoo.so:*",
            "libfoo.so:",
            ":f",
            "libfoo.so:a b",
            "libfoo.so:9f",
        ] {
            assert!(target(bad).is_err(), "{bad}");
        }
    }
}
