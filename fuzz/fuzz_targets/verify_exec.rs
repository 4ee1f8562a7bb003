//! Fuzz target: the verifier with the interpreter as its oracle. A program the verifier
//! accepts must never fault in the interpreter, run past its budget or touch memory
//! outside its regions. The body is `ebpf::fuzz::verify_exec`, replayed by the stable
//! tests over `fuzz/replay/verify_exec/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ebpf::fuzz::verify_exec(data));
