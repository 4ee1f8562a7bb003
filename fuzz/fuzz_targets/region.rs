//! Fuzz target: a region as a client (or a recovering service) finds it, with the input's
//! patches applied to its header, map directory, map headers, checkpoint and queue. It
//! must give an error or work, never crash. The body is `shm_maps::fuzz::region`,
//! replayed by the stable tests over `fuzz/replay/region/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shm_maps::fuzz::region(data);
});
