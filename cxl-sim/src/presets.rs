//! Published CXL devices as [`Params`]. The figures are rounded from the ranges the sources
//! in `cxl-sim/README.md` report (added latency over local DRAM for a random load; the
//! link's usable read bandwidth); the sequential ratio and the queueing coefficient are
//! modelling choices, not measurements. Every field can be overridden on the command line.

use crate::model::{Params, WaitMode};

/// One preset.
#[derive(Clone, Debug)]
pub struct Preset {
    /// Its name on the command line.
    pub name: &'static str,
    /// What it stands for.
    pub what: &'static str,
    /// The parameters.
    pub params: Params,
}

fn params(latency_ns: f64, gbps: f64) -> Params {
    Params {
        latency_ns,
        seq_ratio: 2.0,
        strided_fraction: 0.75,
        bandwidth_gbps: Some(gbps),
        queue_k: 1.0,
        cache_mib: 64,
        burst_bytes: 64 << 10,
        seq_stride: 256,
        wait: WaitMode::Spin,
    }
}

/// The presets: a direct-attached type-3 expander on PCIe 5.0 x8, the same behind one CXL
/// switch, and a pooled (multi-headed) device.
pub fn all() -> Vec<Preset> {
    vec![
        Preset {
            name: "direct-x8",
            what: "type-3 memory expander directly attached over PCIe 5.0 x8: +170 ns random, 26 GB/s",
            params: params(170.0, 26.0),
        },
        Preset {
            name: "switch",
            what: "the same expander behind one CXL switch: +300 ns random, 24 GB/s",
            params: params(300.0, 24.0),
        },
        Preset {
            name: "pooled",
            what: "a pooled multi-headed device shared by several hosts: +400 ns random, 16 GB/s",
            params: params(400.0, 16.0),
        },
    ]
}

/// The preset called `name`.
pub fn by_name(name: &str) -> Option<Preset> {
    all().into_iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn presets_are_valid_and_ordered() {
        let all = super::all();
        for p in &all {
            p.params.validate().unwrap();
        }
        // Farther is slower.
        for w in all.windows(2) {
            assert!(w[0].params.latency_ns < w[1].params.latency_ns);
            assert!(w[0].params.bandwidth_gbps >= w[1].params.bandwidth_gbps);
        }
        assert!(super::by_name("direct-x8").is_some());
        assert!(super::by_name("nope").is_none());
    }
}
