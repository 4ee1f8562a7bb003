//! Fuzz target: load (ELF or raw bytecode), then verify every program that loads. Neither
//! may panic; the verifier must terminate within its instruction budget. The body is
//! `ebpf::fuzz::load_and_verify`, replayed by the stable tests over
//! `fuzz/replay/load_and_verify/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ebpf::fuzz::load_and_verify(data));
