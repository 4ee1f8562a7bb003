//! Hot attach on the `trace` side: `bpftime-super load/unload/list --name SESSION` reach a
//! running `trace --name SESSION` through the same control socket and protocol as the
//! service's (`/dev/shm/SESSION.sock`, [`host::protocol`]).
//!
//! ```text
//! load (object bytes) ──▶ verified with the session's objects (ProbeSet::load), maps created
//!                         in the region's reserve ──▶ HotObjects file, generation + 1
//!                         ──▶ the shim moves each kernel at its next launch (attach::shim::hot)
//! unload (object or program name) ──▶ the same file without it
//! list ──▶ the session's objects
//! ```
//!
//! A connection's requests are handed to `trace`'s main loop, which owns the session, and
//! answered from there (within one poll, 50 ms). Other requests of the service's protocol
//! get an error naming what a trace session serves.

use anyhow::{Context, Result};
use host::protocol::{MapInfo, ProgramInfo, Reply, Request};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, channel};

/// A request and where its reply goes.
pub type Call = (Request, Sender<Reply>);

/// Serves the control socket of session `name` on a thread; requests come out of the
/// returned receiver. The socket file is removed when the returned guard drops.
pub fn serve(name: &str) -> Result<(Receiver<Call>, SocketGuard)> {
    let path = host::service::socket_path(name);
    if UnixStream::connect(&path).is_ok() {
        anyhow::bail!(
            "session `{name}` is in use ({} answers): pick another --name",
            path.display()
        );
    }
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).with_context(|| format!("bind {}", path.display()))?;
    let (tx, rx) = channel::<Call>();
    std::thread::Builder::new()
        .name("trace-control".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let tx = tx.clone();
                let _ = std::thread::Builder::new()
                    .name("trace-conn".into())
                    .spawn(move || connection(conn, tx));
            }
        })
        .context("start the control thread")?;
    Ok((rx, SocketGuard(path)))
}

/// Removes the socket file.
pub struct SocketGuard(PathBuf);

impl Drop for SocketGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn connection(conn: UnixStream, tx: Sender<Call>) {
    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(60)));
    let Ok(mut w) = conn.try_clone() else { return };
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Request>(&line) {
            Ok(req) => {
                let (rtx, rrx) = channel();
                if tx.send((req, rtx)).is_err() {
                    return;
                }
                match rrx.recv_timeout(std::time::Duration::from_secs(30)) {
                    Ok(r) => r,
                    Err(_) => error("trace did not answer (is it exiting?)".into()),
                }
            }
            Err(e) => error(format!("bad request: {e}")),
        };
        let mut out = serde_json::to_string(&reply).unwrap_or_default();
        out.push('\n');
        if w.write_all(out.as_bytes()).is_err() {
            return;
        }
    }
}

/// An error reply.
pub fn error(what: String) -> Reply {
    Reply {
        ok: false,
        data: serde_json::Value::Null,
        error: Some(what),
    }
}

/// A success reply.
pub fn ok(data: serde_json::Value) -> Reply {
    Reply {
        ok: true,
        data,
        error: None,
    }
}

/// What `load`/`list` report for probe object `object` of `probes`.
pub fn info(probes: &attach::ProbeSet, object: usize, generation: u32) -> ProgramInfo {
    let o = &probes.objects[object];
    let progs: Vec<&attach::probes::Probe> = probes
        .probes
        .iter()
        .filter(|p| p.object == object)
        .collect();
    ProgramInfo {
        id: object as u32,
        name: o.stem.clone(),
        version: generation,
        section: progs
            .iter()
            .map(|p| p.program.section.as_str())
            .collect::<Vec<_>>()
            .join(","),
        file: o.path.clone(),
        insns: progs.iter().map(|p| p.program.insns.len()).sum(),
        maps: o
            .maps
            .values()
            .map(|d| MapInfo {
                name: d.name.clone(),
                kind: format!("{:?}", d.kind).to_lowercase(),
                key_size: d.key_size,
                value_size: d.value_size,
                max_entries: d.max_entries,
                placement: "shm".into(),
            })
            .collect(),
        tier: None,
        engine: None,
        compile_us: None,
    }
}

/// Where a loaded object's bytes go: `dir/<generation>/<its file name>` (the file name
/// keeps its stem, which names its maps).
pub fn object_path(dir: &Path, generation: u64, file: &str) -> PathBuf {
    let name = Path::new(file)
        .file_name()
        .map(|f| f.to_string_lossy().to_string())
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| "object.bpf.o".into());
    dir.join(generation.to_string()).join(name)
}
