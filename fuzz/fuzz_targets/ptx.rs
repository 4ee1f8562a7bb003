//! Fuzz target: the PTX parser and the instrumentation passes (entry/exit splice, memory
//! pass) on any text: they must return, and the splice's output must parse. The body is
//! `jit::passes::fuzz::ptx`, replayed by the stable tests over `fuzz/replay/ptx/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| jit::passes::fuzz::ptx(data));
