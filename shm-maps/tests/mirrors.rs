//! A map mirror cleared for a GPU that starts afresh: everything after the header goes to
//! zero, the header stays (a multi-GPU service's per-thread arrays after a fault or
//! `--recover`).

use shm_maps::region::OnStale;
use shm_maps::{RegionConfig, ShmRegion};

#[test]
fn clearing_a_mirror_keeps_its_header_and_zeroes_the_rest() {
    let r = ShmRegion::create(
        &format!("bpftime-mirror-{}", std::process::id()),
        &RegionConfig {
            arena_size: 1 << 20,
            max_clients: 1,
            completions_per_client: 1,
            ..RegionConfig::default()
        },
        0o600,
        OnStale::Replace,
    )
    .expect("region");
    r.write_arena(4096, &[0xaa; 256]).unwrap();
    r.clear_map_values(4096, 256).unwrap();
    let b = r.read_arena(4096, 256).unwrap();
    assert!(b[..64].iter().all(|&x| x == 0xaa), "the header stays");
    assert!(
        b[64..].iter().all(|&x| x == 0),
        "values and sequence words are zero"
    );
    assert!(
        r.clear_map_values(4096, 32).is_none(),
        "shorter than a header"
    );
    assert!(
        r.clear_map_values(u64::MAX - 8, 256).is_none(),
        "outside the arena"
    );
    r.unlink().ok();
}
