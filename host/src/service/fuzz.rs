//! The body of the `control` fuzz target (`fuzz/fuzz_targets/control.rs`), here so that
//! the stable test suite replays the kept corpus (`fuzz/replay/control/`) through the same
//! code: any bytes a client may send on the control socket.
//!
//! One service (CPU backend, small region) runs for the whole process. Each input goes
//! through the socket's own line loop (`control::serve_lines`), as if a client had sent
//! it; every reply must encode, and the service must stay up. One request is held back,
//! because it would end the experiment rather than test it: a `stop` line is dropped
//! before the input is served. After each input, the programs it loaded are unloaded so
//! that state does not pile up across inputs.

use super::{BackendChoice, Service, ServiceConfig};
use crate::protocol::Request;
use shm_maps::RegionConfig;
use std::sync::{Arc, OnceLock};

fn service() -> &'static Arc<Service> {
    static S: OnceLock<Arc<Service>> = OnceLock::new();
    S.get_or_init(|| {
        Service::start(ServiceConfig {
            name: format!("bpftime-fuzz-control-{}", std::process::id()),
            backend: BackendChoice::Cpu,
            workers: 1,
            mode: 0o600,
            recover: false,
            region: RegionConfig {
                queue_capacity: 16,
                max_clients: 4,
                completions_per_client: 16,
                message_slots: 16,
                max_maps: 64,
                max_records: 1024,
                arena_size: 16 << 20,
                checkpoint_size: 1 << 20,
                queues: 1,
            },
            metrics: None,
            max_insns: 100_000,
            engine: jit::cpu::Engine::default(),
            cuda: Default::default(),
            devices: Vec::new(),
        })
        .inspect(|svc| {
            // Everything here talks to the service in this process: the names can go now,
            // so no run leaves its region (18 MiB) or socket behind in /dev/shm.
            let _ = svc.region.unlink();
            let _ = std::fs::remove_file(super::socket_path(&svc.cfg.name));
        })
        .expect("the fuzz service starts")
    })
}

/// The `control` target: see the module documentation. Returns the reply bytes.
pub fn control(data: &[u8]) -> Vec<u8> {
    let svc = service();
    // Hold back `stop`, line by line, on the bytes exactly as the loop would split them.
    let mut input = Vec::with_capacity(data.len());
    for line in data.split_inclusive(|&b| b == b'\n') {
        let text = std::str::from_utf8(line).unwrap_or("");
        if matches!(
            serde_json::from_str::<Request>(text.trim_end()),
            Ok(Request::Stop { .. })
        ) {
            continue;
        }
        input.extend_from_slice(line);
    }
    let mut out = Vec::new();
    super::control::serve_lines(svc, std::io::Cursor::new(input), &mut out);
    for p in svc.table.list() {
        svc.table.remove(p.id);
        let mut st = svc.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((off, _)) = st.objects.remove(&p.id) {
            let _ = st.arena.free(off, shm_maps::arena::Owner::Service);
        }
    }
    assert!(
        svc.region.service_alive() && !svc.stopping.load(std::sync::atomic::Ordering::Relaxed),
        "the service went down"
    );
    out
}
