//! The body of the `ptx` fuzz target (`fuzz/fuzz_targets/ptx.rs`), here so that the stable
//! test suite replays the kept corpus (`fuzz/replay/ptx/`) through the same code: the PTX
//! parser (strict and lenient), the entry/exit splice and the memory pass on any text.
//! Each must return, and what the passes produce must parse again.

use super::mem::{self, MemBlock, MemBlocks, MemOptions, MemSite, Regs};
use super::probe::{self, ProbeBlocks, ProbeModule, Site};
use crate::ptx::parse::{self, PtxFunction};

struct Entry;
impl ProbeBlocks for Entry {
    fn block(&mut self, _: &PtxFunction<'_>, _: &Site, uid: u32) -> Option<String> {
        Some(format!("{{ // probe {uid}\n}}"))
    }
}

struct Every;
impl MemBlocks for Every {
    fn options(&mut self, _: &PtxFunction<'_>) -> Option<MemOptions> {
        Some(MemOptions {
            shared: true,
            local: true,
            ..MemOptions::default()
        })
    }
    fn block(&mut self, _: &PtxFunction<'_>, s: &MemSite, _: u32) -> Option<MemBlock> {
        let mut regs = Regs::default();
        let a = regs.d();
        let before = s.address_into(&a);
        let v = regs.d();
        let value = s.value_into(&v, 0, &mut regs);
        Some(MemBlock {
            decls: regs.decls(),
            before,
            after: value,
            comment: format!("site {}", s.index),
        })
    }
}

/// Parses `data` as PTX and runs both passes over it.
pub fn ptx(data: &[u8]) {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse::parse(src);
    if let Ok(out) = probe::instrument(src, &ProbeModule::default(), &mut Entry)
        && out.text != src
    {
        assert!(
            parse::parse_lenient(&out.text).is_ok(),
            "the splice's output does not parse"
        );
    }
    let _ = mem::instrument(src, &ProbeModule::default(), &mut Every);
}
