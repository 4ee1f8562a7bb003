//! Fuzz target: any bytes on the control socket. One service runs for the whole process;
//! each input goes through the socket's own line loop, every reply must encode and the
//! service must stay up. The body is `host::service::fuzz::control`, replayed by the
//! stable tests over `fuzz/replay/control/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    host::service::fuzz::control(data);
});
