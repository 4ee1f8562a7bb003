//! Splices counting probes into a PTX file: every kernel entry adds 1 to
//! `__bpftime_counts[0]`, every exit (each `ret`/`exit`, and a reachable closing `}`) adds 1
//! to `__bpftime_counts[1]`. After a launch, both equal the number of threads that ran.
//!
//! ```text
//! cargo run -p jit --example count_probes -- in.ptx > out.ptx
//! ```
//!
//! `jit/gpu/probe_counts.py` runs the result on a GPU and checks the counts.

use jit::passes::probe::{self, ProbeBlocks, ProbeModule, Site};
use jit::ptx::parse::PtxFunction;

struct Counter;

impl ProbeBlocks for Counter {
    fn block(&mut self, _kernel: &PtxFunction<'_>, site: &Site, uid: u32) -> Option<String> {
        let off = match site {
            Site::Entry => 0,
            Site::Exit { .. } => 8,
        };
        Some(format!(
            "{{ // count probe {uid}\n\t.reg .b64 %__cnt<2>;\n\tmov.u64 %__cnt0, 1;\n\tred.global.add.u64 [__bpftime_counts+{off}], %__cnt0;\n}}"
        ))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: count_probes <in.ptx> > out.ptx")?;
    let src = std::fs::read_to_string(&path)?;
    let module = ProbeModule {
        text: ".visible .global .align 8 .u64 __bpftime_counts[2];\n".into(),
        min_version: (7, 0),
        min_sm: 70,
    };
    let out = probe::instrument(&src, &module, &mut Counter)?;
    for w in &out.warnings {
        eprintln!("{path}:{}: warning: {}", w.line, w.what);
    }
    for a in &out.attached {
        eprintln!("{path}:{}: {} {:?}", a.line, a.kernel, a.site);
    }
    print!("{}", out.text);
    Ok(())
}
