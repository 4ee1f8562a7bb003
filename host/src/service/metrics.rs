//! Prometheus metrics: the same figures as `status`, served as Prometheus text.
//!
//! Figures are recorded through the `metrics` facade into `metrics-exporter-prometheus`'s
//! recorder at scrape time, straight from [`Service::status`], so `status` and a scrape
//! never disagree. A small HTTP/1.0 responder on `--metrics ADDR` serves `GET /metrics`.

use super::Service;
use crate::protocol::StatusInfo;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's Prometheus recorder (installed on first use), shared by the service's
/// `--metrics` and `trace --prometheus`.
pub fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed");
        }
        handle
    })
}

/// Records `s` and renders the Prometheus text.
pub fn render(s: &StatusInfo) -> String {
    let h = handle();
    metrics::gauge!("bpftime_jobs_done_total").set(s.jobs_done as f64);
    metrics::gauge!("bpftime_jobs_failed_total").set(s.jobs_failed as f64);
    metrics::gauge!("bpftime_records_total").set(s.records as f64);
    metrics::gauge!("bpftime_records_failed_total").set(s.records_failed as f64);
    metrics::gauge!("bpftime_queue_depth").set(s.queue_depth as f64);
    metrics::gauge!("bpftime_queue_capacity").set(s.queue_capacity as f64);
    metrics::gauge!("bpftime_clients").set(s.clients as f64);
    metrics::gauge!("bpftime_programs").set(s.programs.len() as f64);
    metrics::gauge!("bpftime_arena_used_bytes").set(s.arena_used as f64);
    metrics::gauge!("bpftime_uptime_seconds").set(s.uptime_s);
    for (q, v) in [
        ("0.5", s.latency.p50_ns),
        ("0.9", s.latency.p90_ns),
        ("0.99", s.latency.p99_ns),
        ("0.999", s.latency.p999_ns),
    ] {
        metrics::gauge!("bpftime_job_latency_ns", "quantile" => q).set(v as f64);
    }
    for p in &s.programs {
        metrics::gauge!("bpftime_program_version", "program" => p.name.clone())
            .set(p.version as f64);
    }
    // Per queue: one per GPU of a `run --devices` service (device = its CUDA ordinal).
    for q in &s.queues {
        let labels = [
            ("queue", q.queue.to_string()),
            ("device", q.device.map_or("cpu".into(), |d| d.to_string())),
        ];
        metrics::gauge!("bpftime_queue_jobs_submitted_total", &labels).set(q.submitted as f64);
        metrics::gauge!("bpftime_queue_jobs_done_total", &labels).set(q.done as f64);
        metrics::gauge!("bpftime_queue_load", &labels).set(q.load as f64);
        metrics::gauge!("bpftime_queue_waiting", &labels).set(q.depth as f64);
    }
    h.render()
}

/// Serves `GET /metrics` on `addr` from a background thread.
pub fn serve(svc: Arc<Service>, addr: SocketAddr) -> std::io::Result<()> {
    serve_text(addr, "bpftime-metrics", move || render(&svc.status()))?;
    tracing::info!(%addr, "serving Prometheus metrics");
    Ok(())
}

/// Answers `GET /metrics` (and `GET /`) on `addr` with `render()`, from a thread named
/// `thread` of its own; each connection gets 2 s read and write timeouts, so a stuck client
/// holds up nothing but the next scrape. Returns the bound address (`addr` may ask for port
/// 0). Shared by the service's `--metrics` and `trace --prometheus`.
pub fn serve_text(
    addr: SocketAddr,
    thread: &str,
    render: impl Fn() -> String + Send + 'static,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    handle();
    std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut stream) = conn else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
                let mut line = String::new();
                let _ = BufReader::new(&stream).read_line(&mut line);
                let (code, body) = if line.starts_with("GET /metrics") || line.starts_with("GET / ") {
                    ("200 OK", render())
                } else {
                    ("404 Not Found", "try GET /metrics\n".to_string())
                };
                let _ = write!(
                    stream,
                    "HTTP/1.0 {code}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        })?;
    Ok(bound)
}
