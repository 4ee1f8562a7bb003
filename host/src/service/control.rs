//! The control socket: one thread per connection, one JSON request per line.

use super::Service;
use crate::protocol::{MapDump, MapInfo, ProgramInfo, Reply, Request};
use device::programs::Installed;
use ebpf::interp::Vm;
use ebpf::maps::MapOps;
use ebpf::verifier::{VerifyOptions, verify};
use shm_maps::arena::Owner;
use shm_maps::layout::client_state;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Accepts connections until the service stops.
pub(super) fn serve(svc: Arc<Service>, listener: UnixListener) {
    for conn in listener.incoming() {
        if svc.stopping.load(Ordering::Acquire) {
            break;
        }
        match conn {
            Ok(stream) => {
                let svc = svc.clone();
                let _ = std::thread::Builder::new()
                    .name("bpftime-conn".into())
                    .spawn(move || connection(svc, stream));
            }
            Err(e) => tracing::warn!("control socket accept failed: {e}"),
        }
    }
}

fn connection(svc: Arc<Service>, stream: UnixStream) {
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    serve_lines(&svc, BufReader::new(stream), write_half);
}

/// The protocol over any byte stream: one JSON request per line in, one reply per line
/// out, until the input ends or is not UTF-8, or the output fails. The control socket's
/// connections run it, and so does the `control` fuzz target.
pub(crate) fn serve_lines(svc: &Arc<Service>, reader: impl BufRead, out: impl Write) {
    let mut out = std::io::BufWriter::new(out);
    for line in reader.lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let (reply, after) = match serde_json::from_str::<Request>(&line) {
            Ok(req) => handle(svc, req),
            Err(e) => (err(format!("bad request: {e}")), None),
        };
        let mut text = serde_json::to_string(&reply)
            .unwrap_or_else(|e| format!("{{\"ok\":false,\"error\":\"cannot encode reply: {e}\"}}"));
        text.push('\n');
        if out
            .write_all(text.as_bytes())
            .and_then(|_| out.flush())
            .is_err()
        {
            break;
        }
        if let Some(after) = after {
            after();
        }
    }
}

fn ok(data: impl serde::Serialize) -> Reply {
    match serde_json::to_value(data) {
        Ok(data) => Reply {
            ok: true,
            data,
            error: None,
        },
        Err(e) => err(format!("cannot encode reply: {e}")),
    }
}

fn err(msg: impl Into<String>) -> Reply {
    Reply {
        ok: false,
        data: serde_json::Value::Null,
        error: Some(msg.into()),
    }
}

type After = Option<Box<dyn FnOnce() + Send>>;

const NO_GPU: &str = "device-resident buffers need the CUDA backend (this service runs on the CPU)";

fn handle(svc: &Arc<Service>, req: Request) -> (Reply, After) {
    let reply = match req {
        Request::Load {
            file,
            object_hex,
            prog,
            name,
            placement,
        } => load(
            svc,
            &file,
            &object_hex,
            prog.as_deref(),
            name.as_deref(),
            None,
            &placement,
        ),
        Request::Replace {
            name,
            file,
            object_hex,
            prog,
        } => load(
            svc,
            &file,
            &object_hex,
            prog.as_deref(),
            None,
            Some(&name),
            &[],
        ),
        Request::Unload { prog } => match find(svc, &prog) {
            Some(p) => {
                {
                    let mut st = svc.state.lock().unwrap_or_else(|p| p.into_inner());
                    svc.table.remove(p.id);
                    if let Some((off, _)) = st.objects.remove(&p.id) {
                        let _ = st.arena.free(off, Owner::Service);
                    }
                    svc.save(&st);
                }
                svc.program_changed(p.id);
                tracing::info!(id = p.id, name = %p.name, "unloaded");
                ok(info(&p))
            }
            None => err(format!("no program `{prog}` is loaded")),
        },
        Request::List => ok(svc.programs()),
        Request::MapDump { map } => match find_map(svc, &map) {
            Ok((qualified, m)) => {
                // A device map: its contents are on the GPUs, not in the mirror.
                let entries = match super::maps::device_span(svc, &qualified) {
                    Some(len) => super::maps::device_entries(svc, &qualified, &m, len),
                    None => Ok(m.entries()),
                };
                match entries {
                    Err(e) => err(e),
                    Ok(entries) => ok(MapDump {
                        map: qualified,
                        entries: entries
                            .into_iter()
                            .map(|(k, v)| (crate::hex::encode(&k), crate::hex::encode(&v)))
                            .collect(),
                    }),
                }
            }
            Err(e) => err(e),
        },
        Request::MapUpdate {
            map,
            key_hex,
            value_hex,
            flags,
        } => map_update(svc, &map, &key_hex, &value_hex, flags),
        Request::Alloc {
            client,
            generation,
            len,
            placement,
        } => {
            let tier = match placement.as_deref().map(tier_of_buffer).transpose() {
                Ok(t) => t,
                Err(e) => return (err(e), None),
            };
            if let Some(e) =
                tier.and_then(|t| super::maps::cap_refusal("buffer", &t, svc.gpu_count()))
            {
                return (err(e), None);
            }
            let mut full = None;
            let before = svc.tier_buffers.version();
            let r = buffer_op(svc, client, generation, Pool::Shared, |a, o| {
                let off = a.alloc(len, o)?;
                match svc
                    .tier_buffers
                    .allocated(off, len, (client, generation), tier)
                {
                    Ok(Some(slot)) => Ok(serde_json::json!({
                        "off": off,
                        "placement": tier.map(|t| t.to_string()),
                        "tier_slot": slot,
                    })),
                    Ok(None) => Ok(serde_json::json!({ "off": off })),
                    Err(e) => {
                        full = Some(e);
                        a.free(off, o).map(|_| serde_json::Value::Null)
                    }
                }
            });
            if let Some(e) = full {
                return (err(e.to_string()), None);
            }
            if r.ok && svc.tier_buffers.version() != before {
                sync_tier_buffers(svc);
            }
            r
        }
        Request::Free {
            client,
            generation,
            off,
        } => {
            let mut tiered = false;
            let r = buffer_op(svc, client, generation, Pool::Shared, |a, o| {
                a.free(off, o).map(|_| {
                    tiered = svc.tier_buffers.placement(off).is_some();
                    svc.tier_buffers.freed(off);
                    serde_json::Value::Null
                })
            });
            if tiered {
                sync_tier_buffers(svc);
            }
            r
        }
        Request::DeviceAlloc {
            client,
            generation,
            len,
            device,
        } => buffer_op(svc, client, generation, Pool::Device(device), |a, o| {
            a.alloc(len, o).map(|off| serde_json::json!({ "off": off }))
        }),
        Request::DeviceFree {
            client,
            generation,
            off,
            device,
        } => buffer_op(svc, client, generation, Pool::Device(device), |a, o| {
            a.free(off, o).map(|_| serde_json::Value::Null)
        }),
        Request::DeviceCopy {
            client,
            generation,
            to_device,
            shm_off,
            dev_off,
            len,
            device,
        } => match check_client(svc, client, generation) {
            Err(e) => err(e),
            Ok(owner) => {
                let st = svc.state.lock().unwrap_or_else(|p| p.into_inner());
                let mine = |a: &shm_maps::arena::Arena, off: u64| {
                    a.owner_of(off, len).is_some_and(|(o, _, _)| o == owner)
                };
                if !mine(&st.arena, shm_off) {
                    err(format!(
                        "shared buffer [{shm_off}, +{len}) is not one of this client's buffers"
                    ))
                } else if !st
                    .device_arena
                    .get(device as usize)
                    .is_some_and(|a| mine(a, dev_off))
                {
                    err(format!(
                        "device buffer [{dev_off}, +{len}) is not one of this client's device \
                         buffers on GPU {device}"
                    ))
                } else {
                    drop(st);
                    if svc.gpu_count() == 0 {
                        err(NO_GPU)
                    } else {
                        match svc.on_gpu(device, |b| b.transfer(to_device, shm_off, dev_off, len)) {
                            Ok(()) => ok(()),
                            Err(e) => err(e),
                        }
                    }
                }
            }
        },
        Request::Status => ok(svc.status()),
        Request::Stop { now } => {
            let svc = svc.clone();
            return (
                ok(()),
                Some(Box::new(move || {
                    // Stop off this thread: it joins the workers.
                    std::thread::spawn(move || svc.stop(now));
                })),
            );
        }
    };
    (reply, None)
}

/// Brings every GPU's tier table up to the service's placed buffers. A GPU worker that is
/// restarting takes the table when it is back; anything else is logged.
pub(crate) fn sync_tier_buffers(svc: &Service) {
    svc.with_gpus(|g| {
        for (i, b) in g.iter().enumerate() {
            if let Err(e) = b.sync_tier_buffers() {
                tracing::warn!(gpu = i, "tier table not updated: {e}");
            }
        }
    });
}

/// A buffer's tier: `cxl:LATENCY_NS[:GBPS]`.
fn tier_of_buffer(p: &str) -> Result<device::tier::TierSpec, String> {
    p.parse()
        .map_err(|e: device::tier::TierError| format!("buffer placement: {e}"))
}

/// Which buffer arena a request names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pool {
    /// The shared-memory arena.
    Shared,
    /// The device arena of one of the CUDA backend's GPUs.
    Device(u32),
}

/// `alloc`/`free` of a client's buffer in one of the arenas.
fn buffer_op(
    svc: &Service,
    client: u32,
    generation: u32,
    pool: Pool,
    op: impl FnOnce(
        &mut shm_maps::arena::Arena,
        Owner,
    ) -> Result<serde_json::Value, shm_maps::arena::ArenaError>,
) -> Reply {
    let owner = match check_client(svc, client, generation) {
        Ok(o) => o,
        Err(e) => return err(e),
    };
    if let Pool::Device(d) = pool {
        let gpus = svc.gpu_count();
        if gpus == 0 {
            return err(NO_GPU);
        }
        if d as usize >= gpus {
            return err(format!("no GPU {d}: this service runs {gpus}"));
        }
    }
    let mut st = svc.state.lock().unwrap_or_else(|p| p.into_inner());
    let (arena, what) = match pool {
        Pool::Shared => (&mut st.arena, "arena"),
        Pool::Device(d) => (&mut st.device_arena[d as usize], "device arena"),
    };
    match op(arena, owner) {
        Ok(v) => {
            if pool == Pool::Shared {
                svc.save(&st);
            }
            Reply {
                ok: true,
                data: v,
                error: None,
            }
        }
        Err(e) if pool != Pool::Shared => err(format!("{what}: {e}")),
        Err(e) => err(e.to_string()),
    }
}

fn check_client(svc: &Service, slot: u32, generation: u32) -> Result<Owner, String> {
    let c = svc
        .region
        .client(slot)
        .ok_or_else(|| format!("no client slot {slot}"))?;
    if c.state.load(Ordering::Acquire) != client_state::ACTIVE
        || c.generation.load(Ordering::Acquire) != generation
    {
        return Err(format!(
            "client slot {slot} generation {generation} is not attached"
        ));
    }
    Ok(Owner::Client { slot, generation })
}

/// The public description of an installed program.
pub(super) fn info(p: &Installed) -> ProgramInfo {
    ProgramInfo {
        id: p.id,
        name: p.name.clone(),
        version: p.version,
        section: p.program.section.clone(),
        file: p.program.file.clone(),
        insns: p.program.insns.len(),
        maps: p
            .program
            .maps
            .iter()
            .zip(p.device_maps.iter().chain(std::iter::repeat(&false)))
            .zip(p.tiers.iter().chain(std::iter::repeat(&None)))
            .map(|((d, on_gpu), tier)| map_info(d, *on_gpu, *tier))
            .collect(),
        tier: None,
        engine: Some(p.exec.engine().to_string()),
        compile_us: p.exec.compile_time().map(|t| t.as_micros() as u64),
    }
}

fn map_info(d: &ebpf::MapDef, device: bool, tier: Option<device::tier::TierSpec>) -> MapInfo {
    MapInfo {
        name: d.name.clone(),
        kind: serde_json::to_value(d.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        key_size: d.key_size,
        value_size: d.value_size,
        max_entries: d.max_entries,
        placement: match tier {
            Some(t) => t.to_string(),
            None if device => "device".into(),
            None => "shm".into(),
        },
    }
}

fn find(svc: &Service, prog: &str) -> Option<Arc<Installed>> {
    match prog.parse::<u32>() {
        Ok(id) => svc.table.get(id),
        Err(_) => svc.table.by_name(prog),
    }
}

fn find_map(svc: &Service, spec: &str) -> Result<(String, Arc<dyn MapOps>), String> {
    let (prog, map) = match spec.split_once(':') {
        Some((p, m)) => (Some(p), m),
        None => (None, spec),
    };
    let mut found = Vec::new();
    for p in svc.table.list() {
        if prog.is_some_and(|n| n != p.name && n != p.id.to_string()) {
            continue;
        }
        for (d, m) in p.program.maps.iter().zip(&p.maps) {
            if d.name == map {
                found.push((format!("{}:{}", p.name, d.name), m.clone()));
            }
        }
    }
    match found.len() {
        0 => Err(format!("no map `{spec}` in any loaded program")),
        1 => Ok(found.pop().expect("one element")),
        _ => Err(format!(
            "map name `{spec}` is ambiguous: use one of {}",
            found
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn map_update(svc: &Service, spec: &str, key_hex: &str, value_hex: &str, flags: u64) -> Reply {
    let (name, m) = match find_map(svc, spec) {
        Ok(x) => x,
        Err(e) => return err(e),
    };
    let (key, value) = match (crate::hex::decode(key_hex), crate::hex::decode(value_hex)) {
        (Ok(k), Ok(v)) => (k, v),
        (Err(e), _) => return err(format!("bad key: {e}")),
        (_, Err(e)) => return err(format!("bad value: {e}")),
    };
    let d = m.def();
    if key.len() != d.key_size as usize || value.len() != d.value_size as usize {
        return err(format!(
            "map `{name}` takes a {}-byte key and a {}-byte value; got {} and {}",
            d.key_size,
            d.value_size,
            key.len(),
            value.len()
        ));
    }
    if let Some(len) = super::maps::device_span(svc, &name) {
        return super::maps::update_device_map(svc, &name, &m, len, &key, &value, flags)
            .map_or_else(err, ok);
    }
    match m.update(&key, &value, flags, 0) {
        Ok(()) => ok(()),
        Err(e) => err(format!("update of map `{name}` failed: {e}")),
    }
}

/// `load` and `replace` (when `replacing` names the installed program).
fn load(
    svc: &Service,
    file: &str,
    object_hex: &str,
    prog: Option<&str>,
    name: Option<&str>,
    replacing: Option<&str>,
    placement: &[String],
) -> Reply {
    let bytes = match crate::hex::decode(object_hex) {
        Ok(b) => b,
        Err(e) => return err(format!("bad object bytes: {e}")),
    };
    let program = match ebpf::elf::load(&bytes, file, prog) {
        Ok(p) => p,
        Err(e) => return err(e.to_string()),
    };
    let (stack_depth, maps_atomic) = match verify(&program, &VerifyOptions::default()) {
        Ok(v) => (v.max_stack_depth as u32, v.maps_atomic),
        Err(e) => return err(format!("verifier rejected the program: {e}")),
    };
    // One lock for the whole install, so two loads cannot race for a name.
    let mut st = svc.state.lock().unwrap_or_else(|p| p.into_inner());
    let old = match replacing {
        Some(n) => match svc.table.by_name(n) {
            Some(p) => Some(p),
            None => {
                return err(format!(
                    "no program `{n}` is loaded, so there is nothing to replace"
                ));
            }
        },
        None => None,
    };
    let install_name = replacing
        .map(str::to_string)
        .or_else(|| name.map(str::to_string))
        .unwrap_or_else(|| program.name.clone());
    if old.is_none()
        && let Some(p) = svc.table.by_name(&install_name)
    {
        return err(format!(
            "a program named `{install_name}` is already loaded (id {}); use replace, or load it under another --name",
            p.id
        ));
    }
    let (maps, device_maps, tiers) = match super::maps::bind(
        svc,
        &mut st,
        &install_name,
        &program,
        old.as_deref(),
        placement,
    ) {
        Ok(m) => m,
        Err(e) => return err(e),
    };
    // (Maps bound above and not installed are collected by the reaper.)
    if let Err(e) = super::maps::check_shared_atomics(svc, &program, &device_maps, maps_atomic) {
        return err(e);
    }
    let vm = match Vm::new(&program, device::tier::view(&maps, &tiers)) {
        Ok(vm) => vm,
        Err(e) => return err(format!("cannot prepare the program: {e}")),
    };
    // Verified above (job ctx, which is how jobs run it), so the native code needs no
    // bounds checks; a failed JIT compile runs on the interpreter (Executor logs a warning).
    let exec = jit::cpu::Executor::verified(vm, svc.cfg.engine);
    // The object bytes stay in the arena, so `run --recover` can load the program again.
    let object_off = match st.arena.alloc(bytes.len() as u64, Owner::Service) {
        Ok(off) => off,
        Err(e) => return err(format!("no arena room for the program's object: {e}")),
    };
    svc.region.write_arena(object_off, &bytes);
    let (id, version) = match &old {
        Some(o) => (o.id, o.version + 1),
        None => {
            let id = st.next_id;
            st.next_id += 1;
            (id, 1)
        }
    };
    let bytes_len = bytes.len() as u64;
    let installed = Installed {
        id,
        name: install_name,
        version,
        program,
        exec,
        maps,
        object: Arc::new(bytes),
        selector: prog.map(str::to_string),
        stack_depth,
        device_maps,
        tiers,
    };
    let reply = info(&installed);
    if let Some((off, _)) = st.objects.insert(id, (object_off, bytes_len)) {
        let _ = st.arena.free(off, Owner::Service);
    }
    svc.table.install(installed);
    svc.save(&st);
    drop(st);
    svc.program_changed(id);
    tracing::info!(id, name = %reply.name, version, "installed");
    ok(reply)
}
