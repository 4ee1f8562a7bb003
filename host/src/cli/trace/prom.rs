//! `trace --prometheus ADDR`: the session's maps and trace's own counters on `GET /metrics`,
//! through the `metrics` facade and its Prometheus recorder (`host::service::metrics`).
//!
//! | metric | labels | value |
//! |--------|--------|-------|
//! | `bpftime_map_value` | `map` (`<object>:<map>`), `key` (as `trace` prints it: kernel name, `file:line` site, address…), `word` for values of several u64s | the value (per-thread arrays summed) |
//! | `bpftime_trace_modules_total` | `instrumented` (`true`/`false`) | modules the application loaded |
//! | `bpftime_trace_memory_sites` | | memory sites instrumented |
//! | `bpftime_trace_warnings_total` | | warnings the shim reported |
//! | `bpftime_trace_records_total`, `bpftime_trace_dropped_total` | | `--mem-trace` records written and dropped (at exit) |
//! | `bpftime_trace_uptime_seconds` | | since trace started |
//!
//! Maps are read at scrape time, as of the shim's last copy-out (`--interval`); objects that
//! `load --name` attaches later are served from then on. A scrape
//! runs on the exporter's own thread with a read and write timeout: a stuck client never
//! holds up the application or trace's printing.

use super::print::{self, KernelNames, SiteNames};
use ebpf::MapDef;
use ebpf::maps::MapOps;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What the report file told trace so far.
#[derive(Default)]
pub struct Shared {
    /// Kernel ids to names.
    pub kernels: KernelNames,
    /// Site ids to sites.
    pub sites: SiteNames,
    /// Modules loaded, instrumented.
    pub modules_instrumented: u64,
    /// Modules loaded, left unchanged.
    pub modules_unchanged: u64,
    /// Warnings.
    pub warnings: u64,
    /// `--mem-trace` totals.
    pub trace_records: u64,
    /// `--mem-trace` drops.
    pub trace_dropped: u64,
    /// The maps it serves: the session's, then those of objects `load --name` added.
    pub maps: Vec<Map>,
}

/// One map the exporter reads.
pub struct Map {
    /// `<object>:<map>`.
    pub name: String,
    /// Its definition.
    pub def: MapDef,
    /// The live map.
    pub ops: Arc<dyn MapOps>,
}

/// Renders the metrics text.
pub fn render(shared: &Shared, start: Instant) -> String {
    let maps = &shared.maps;
    // The recorder first: gauges set before it is installed go nowhere.
    let h = host::service::metrics::handle();
    for m in maps {
        let short = m.name.split_once(':').map(|(_, n)| n).unwrap_or(&m.name);
        let style = print::style_of(short, m.def.kind, m.def.max_entries);
        if style == print::Style::Records {
            continue;
        }
        let entries = if m.def.kind == ebpf::MapKind::PerThreadArray {
            print::sum_value_sets(m.ops.entries(), m.def.value_size as usize)
        } else {
            m.ops.entries()
        };
        for (k, v) in entries {
            let key = if style == print::Style::Sites && k.len() == 4 {
                print::site_text(u32::from_le_bytes([k[0], k[1], k[2], k[3]]), &shared.sites)
            } else {
                print::key_for(short, &k, &shared.kernels)
            };
            let words = print::words(&v);
            if words.len() == 1 {
                metrics::gauge!("bpftime_map_value", "map" => m.name.clone(), "key" => key)
                    .set(words[0] as f64);
            } else {
                for (w, x) in words.iter().enumerate() {
                    metrics::gauge!("bpftime_map_value", "map" => m.name.clone(), "key" => key.clone(), "word" => w.to_string())
                        .set(*x as f64);
                }
            }
        }
    }
    metrics::gauge!("bpftime_trace_modules_total", "instrumented" => "true")
        .set(shared.modules_instrumented as f64);
    metrics::gauge!("bpftime_trace_modules_total", "instrumented" => "false")
        .set(shared.modules_unchanged as f64);
    metrics::gauge!("bpftime_trace_memory_sites").set(shared.sites.len() as f64);
    metrics::gauge!("bpftime_trace_warnings_total").set(shared.warnings as f64);
    metrics::gauge!("bpftime_trace_records_total").set(shared.trace_records as f64);
    metrics::gauge!("bpftime_trace_dropped_total").set(shared.trace_dropped as f64);
    metrics::gauge!("bpftime_trace_uptime_seconds").set(start.elapsed().as_secs_f64());
    h.render()
}

/// Serves `GET /metrics` on `addr` from a thread of its own
/// ([`host::service::metrics::serve_text`]); returns the bound address.
pub fn serve(
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    start: Instant,
) -> std::io::Result<SocketAddr> {
    host::service::metrics::serve_text(addr, "bpftime-prometheus", move || match shared.lock() {
        Ok(s) => render(&s, start),
        Err(p) => render(&p.into_inner(), start),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_render_with_their_keys_named() {
        let def = MapDef {
            name: "launches".into(),
            kind: ebpf::MapKind::Hash,
            key_size: 8,
            value_size: 8,
            max_entries: 16,
            flags: 0,
            origin: ebpf::MapOrigin::Btf,
            init: None,
        };
        let ops = ebpf::maps::create_local(&def, 1).unwrap();
        ops.update(&7u64.to_le_bytes(), &3u64.to_le_bytes(), 0, 0)
            .unwrap();
        let mut shared = Shared::default();
        shared.kernels.insert(7, "vectorAdd".into());
        shared.modules_instrumented = 2;
        shared.maps = vec![Map {
            name: "kernel_count:launches".into(),
            def,
            ops,
        }];
        let text = render(&shared, Instant::now());
        assert!(
            text.contains(r#"bpftime_map_value{map="kernel_count:launches",key="vectorAdd"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"bpftime_trace_modules_total{instrumented="true"} 2"#),
            "{text}"
        );
    }

    #[test]
    fn the_grafana_dashboard_names_only_metrics_we_export() {
        let dash = include_str!("../../../../examples/grafana/bpftime-super.json");
        let ours = [
            include_str!("prom.rs"),
            include_str!("../../service/metrics.rs"),
        ]
        .concat();
        let mut names = Vec::new();
        let mut rest = dash;
        while let Some(at) = rest.find("bpftime_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            names.push(&tail[..end]);
            rest = &tail[end..];
        }
        assert!(names.len() >= 10, "{names:?}");
        for n in names {
            assert!(
                ours.contains(&format!("\"{n}\"")),
                "the dashboard uses {n}, which nothing exports"
            );
        }
    }
}
