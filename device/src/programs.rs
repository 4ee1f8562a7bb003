//! The table of installed programs: what a job's `prog_id` resolves to.
//!
//! Each id maps to an [`Installed`] version behind an `Arc`. A worker takes one snapshot
//! when a job starts and runs every record of that job on it, so `replace` and `unload`
//! affect only jobs that start afterwards, and no job runs half on one version and half on
//! another. Versions count up from 1 per id and are recorded in each completion.

use ebpf::Program;
use ebpf::maps::MapOps;
use jit::cpu::Executor;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// One version of one program, ready to run.
pub struct Installed {
    /// Program id (stable across replaces).
    pub id: u32,
    /// Name used by `unload`, `replace` and `submit --prog`.
    pub name: String,
    /// Version, from 1.
    pub version: u32,
    /// The program as loaded.
    pub program: Program,
    /// The prepared program, with its maps bound, on the engine the service runs (the
    /// interpreter, or the native JIT with the interpreter as fallback).
    pub exec: Executor,
    /// The live maps, indexed like `program.maps`.
    pub maps: Vec<Arc<dyn MapOps>>,
    /// The object file it was loaded from and the program selector given to `load`, so a
    /// GPU worker process can load the same program (`ebpf::elf::load(object, file, prog)`).
    pub object: Arc<Vec<u8>>,
    /// The `--prog` selector given to `load`.
    pub selector: Option<String>,
    /// Deepest stack use along any call chain, from the verifier (bytes).
    pub stack_depth: u32,
    /// Per map (like `maps`): whether it lives in GPU memory (CUDA backend). Such a program
    /// cannot run on the host: its maps' arena storage is only a mirror.
    pub device_maps: Vec<bool>,
    /// Per map (like `maps`): the emulated memory tier its helper accesses pay
    /// ([`crate::tier`]), if any. `exec` runs over the tiered view; `maps` stays the storage.
    pub tiers: Vec<Option<crate::tier::TierSpec>>,
}

/// The table. Readers (workers) take a read lock for a pointer copy; writers (the control
/// plane) swap whole entries.
#[derive(Default)]
pub struct ProgramTable {
    inner: RwLock<HashMap<u32, Arc<Installed>>>,
}

impl ProgramTable {
    /// The current version of `id`.
    pub fn get(&self, id: u32) -> Option<Arc<Installed>> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    /// The current version of the program called `name`.
    pub fn by_name(&self, name: &str) -> Option<Arc<Installed>> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .find(|p| p.name == name)
            .cloned()
    }

    /// Installs or replaces `p.id`; returns the previous version.
    pub fn install(&self, p: Installed) -> Option<Arc<Installed>> {
        self.inner
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(p.id, Arc::new(p))
    }

    /// Removes `id`; returns what was installed.
    pub fn remove(&self, id: u32) -> Option<Arc<Installed>> {
        self.inner
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
    }

    /// Every installed program, by id.
    pub fn list(&self) -> Vec<Arc<Installed>> {
        let mut v: Vec<_> = self
            .inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        v.sort_by_key(|p| p.id);
        v
    }
}
