//! Maps of the running service: shared-memory maps updated concurrently by programs, by
//! `map update` and by clients attached directly, without torn values; and map carry-over
//! rules of `replace`.

use host::client::{Client, ClientError, Job, JobResult};
use host::service::{BackendChoice, Service, ServiceConfig};
use shm_maps::RegionConfig;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// The tests of this file run one at a time: the tier test times microseconds, and the
/// update test keeps every core busy (a CI run on two cores, with both at once, measured
/// the tier's 20 µs as 13.7 µs over a plain map whose own fastest run carried the noise).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn start(tag: &str) -> (Arc<Service>, String) {
    let name = format!("bpftime-m-{}-{tag}", std::process::id());
    let svc = Service::start(ServiceConfig {
        name: name.clone(),
        backend: BackendChoice::Cpu,
        workers: 1,
        mode: 0o600,
        recover: false,
        region: RegionConfig {
            arena_size: 16 << 20,
            max_clients: 8,
            completions_per_client: 256,
            ..RegionConfig::default()
        },
        metrics: None,
        max_insns: 1_000_000,
        engine: jit::cpu::Engine::default(),
        cuda: Default::default(),
        devices: Vec::new(),
    })
    .unwrap();
    (svc, name)
}

fn halves_equal(v: &[u8]) -> bool {
    v[..8] == v[8..16]
}

/// One `job_counter` job over `n` one-byte records of `input`, checked: ok, and the last
/// record saw every count before it (whole jobs of `n`, none lost).
fn counted_job(c: &mut Client, prog: u32, n: u64, input: &host::client::Buffer) -> JobResult {
    let r = c.run(&Job::new(prog, n).input(input, 1), T).unwrap();
    assert!(r.ok(), "{r:?}");
    assert!(r.r0 > 0 && r.r0.is_multiple_of(n), "{}", r.r0);
    r
}

/// The worker's own run time of a job: the client's wake-ups and the queue's wait are
/// noise of their own, as large as the whole delay on a busy two-core machine.
fn run_time(r: &JobResult) -> Duration {
    Duration::from_nanos(r.run_ns)
}

/// The fastest of `rounds` runs of the baseline (`run(false)`) and of the tier
/// (`run(true)`), alternating, so that both see the same machine noise.
fn fastest(rounds: usize, mut run: impl FnMut(bool) -> Duration) -> (Duration, Duration) {
    let (mut base, mut t) = (Duration::MAX, Duration::MAX);
    for _ in 0..rounds {
        base = base.min(run(false));
        t = t.min(run(true));
    }
    (base, t)
}

#[test]
fn concurrent_map_updates_never_tear() {
    let _serial = one_at_a_time();
    let Some(obj) = bpftime_tests::compile("pairs") else {
        return;
    };
    let (svc, name) = start("tear");
    let mut c = Client::connect(&name).unwrap();
    let p = c.load_file(&obj, None).unwrap();
    let input = c.alloc(8).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // A second client updates through the control socket (`map update`).
    let updater = {
        let (name, stop) = (name.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(&name).unwrap();
            let mut x = 1u64 << 40;
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                x += 1;
                let v = [x.to_le_bytes(), x.to_le_bytes()].concat();
                c.map_update("write_pair:pairs", &((x & 3) as u32).to_le_bytes(), &v, 0)
                    .unwrap();
                n += 1;
            }
            n
        })
    };
    // A third reads the shared map directly.
    let reader = {
        let (name, stop) = (name.clone(), stop.clone());
        std::thread::spawn(move || {
            let c = Client::connect(&name).unwrap();
            let m = c.open_map("write_pair:pairs").unwrap();
            let mut dumps = 0;
            while !stop.load(Ordering::Relaxed) {
                for (k, v) in m.entries() {
                    assert!(halves_equal(&v), "torn value at key {k:?}: {v:?}");
                }
                dumps += 1;
            }
            dumps
        })
    };
    // The programs update too.
    for i in 0..3000u64 {
        let r = c
            .run(
                &Job::new(p.id, 4)
                    .input(&input, 2)
                    .args([i * 1000 + 7, 0, 0, 0]),
                T,
            )
            .unwrap();
        assert!(r.ok(), "{r:?}");
        assert_eq!(r.r0, 1);
    }
    stop.store(true, Ordering::Relaxed);
    assert!(updater.join().unwrap() > 0);
    assert!(reader.join().unwrap() > 0);
    let d = c.map_dump("pairs").unwrap();
    assert_eq!(d.map, "write_pair:pairs");
    assert_eq!(d.entries.len(), 4);
    for (_, v) in &d.entries {
        assert_eq!(v[..16], v[16..32], "torn value in dump: {v}");
    }
    drop(c);
    svc.stop(false);
}

#[test]
fn replace_keeps_compatible_maps_and_refuses_incompatible_ones() {
    let _serial = one_at_a_time();
    let (Some(v1), Some(v2), Some(hash)) = (
        bpftime_tests::compile("pairs"),
        bpftime_tests::compile_with("pairs", &["PAIRS_V2"], "pairs_v2"),
        bpftime_tests::compile_with("pairs", &["PAIRS_HASH"], "pairs_hash"),
    ) else {
        return;
    };
    let (svc, name) = start("swap");
    let mut c = Client::connect(&name).unwrap();
    let p = c.load_file(&v1, None).unwrap();
    let input = c.alloc(8).unwrap();
    let r = c
        .run(&Job::new(p.id, 1).input(&input, 8).args([77, 0, 0, 0]), T)
        .unwrap();
    assert_eq!((r.r0, r.prog_version), (1, 1));
    // Compatible: same id, next version, and the map keeps its contents.
    let p2 = c.replace_file("write_pair", &v2, None).unwrap();
    assert_eq!((p2.id, p2.version), (p.id, 2));
    let d = c.map_dump("write_pair:pairs").unwrap();
    let want = [77u64.to_le_bytes(), 77u64.to_le_bytes()].concat();
    assert_eq!(d.entries[0].1, host::hex::encode(&want), "map carried over");
    let r = c.run(&Job::new(p.id, 1).input(&input, 8), T).unwrap();
    assert_eq!((r.r0, r.prog_version), (2, 2));
    // Incompatible: refused, naming the map, and version 2 keeps serving.
    match c.replace_file("write_pair", &hash, None) {
        Err(ClientError::Service(m)) => {
            assert!(m.contains("replace refused: map `pairs`"), "{m}");
            assert!(m.contains("Array") && m.contains("Hash"), "{m}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let r = c.run(&Job::new(p.id, 1).input(&input, 8), T).unwrap();
    assert_eq!((r.r0, r.prog_version), (2, 2));
    // Unload frees the object's bytes at once, and the maps' storage once no job uses
    // them (the map leaves the directory then).
    let used = c.status().unwrap().arena_used;
    let object = std::fs::metadata(&v2).unwrap().len();
    c.unload("write_pair").unwrap();
    let t0 = std::time::Instant::now();
    while c.open_map("write_pair:pairs").is_ok() {
        assert!(t0.elapsed() < T, "map storage not freed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let now = c.status().unwrap().arena_used;
    assert!(now + object < used, "storage freed: {used} -> {now} bytes");
    drop(c);
    svc.stop(false);
}

/// A map placed in an emulated tier (`cxl:LATENCY_NS[:GBPS]`, CPU backend): every record's
/// lookup pays the latency, or its bytes through the cap, measured against the same program
/// on a plain shared map in the same run; counts stay exact.
#[test]
fn a_map_in_an_emulated_tier_pays_its_delay() {
    let _serial = one_at_a_time();
    let Some(obj) = bpftime_tests::compile("job_counter") else {
        return;
    };
    let (svc, name) = start("tier");
    let mut c = Client::connect(&name).unwrap();
    let plain = c.load_file_placed(&obj, None, Some("plain"), &[]).unwrap();
    // 20 µs per access; then 8-byte values through a 0.0004 GB/s link: 20 µs each too.
    let slow = c
        .load_file_placed(&obj, None, Some("slow"), &["counts=cxl:20000".into()])
        .unwrap();
    let capped = c
        .load_file_placed(&obj, None, Some("capped"), &["counts=cxl:0:0.0004".into()])
        .unwrap();
    let placement = |p: &host::protocol::ProgramInfo| {
        p.maps
            .iter()
            .find(|m| m.name == "counts")
            .unwrap()
            .placement
            .clone()
    };
    assert_eq!(placement(&plain), "shm");
    assert_eq!(placement(&slow), "cxl:20000");
    assert_eq!(placement(&capped), "cxl:0:0.0004");
    let n = 200u64;
    let input = c.alloc(n).unwrap();
    // A first job can pay for waking the worker.
    counted_job(&mut c, plain.id, n, &input);
    for (p, what) in [(&slow, "latency"), (&capped, "cap")] {
        let (base, t) = fastest(7, |tier| {
            let id = if tier { p.id } else { plain.id };
            run_time(&counted_job(&mut c, id, n, &input))
        });
        let total = t.as_secs_f64() * 1e6 / n as f64;
        let per = (t.saturating_sub(base)).as_secs_f64() * 1e6 / n as f64;
        eprintln!("{what}: {per:.2} µs per access over the plain map (configured 20)");
        // Every access waits at least the 20 µs, whatever else the machine does.
        assert!(total >= 20.0, "{what}: {total:.1} µs per record");
        // A latency adds to each record's own work. A cap is a rate: the link's clock
        // runs on while the record works or its thread is descheduled, so on a loaded
        // machine the plain run's extra time hides inside the capped run's waits (a CI run
        // measured 13.7 µs over the plain map, with the total still above 20 µs).
        // Timed by the worker, the plain run's minimum is the records' own work (client-side
        // timing let a wake-up's noise into it: clean-clone CI runs on two busy cores
        // measured 16.9 and 13.7 µs over it); the tier's own unit test (`device::tier`,
        // every_access_pays_the_latency) times the wait alone.
        if what == "latency" {
            assert!(
                per >= 18.0,
                "{what}: {per:.1} µs per access over the plain map (want about 20)"
            );
        }
        assert!(per < 200.0, "{what}: {per:.1} µs per access");
    }
    // A bad tier is refused, naming the map and the spec.
    let e = c
        .load_file_placed(&obj, None, Some("bad"), &["counts=cxl:fast".into()])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("counts=cxl:fast") && e.contains("cxl:LATENCY_NS"),
        "{e}"
    );
    svc.stop(false);
}

/// A job buffer placed in an emulated tier (`alloc_placed`, CPU backend): each record of a
/// job reading its input there is fetched through the tier first, measured by the worker
/// against the same job on a local buffer in the same run; counts stay exact; a freed
/// tier buffer's space comes back local; a bad placement is refused, naming it.
#[test]
fn a_job_buffer_in_a_tier_pays_per_record() {
    let _serial = one_at_a_time();
    let Some(obj) = bpftime_tests::compile("job_counter") else {
        return;
    };
    let (svc, name) = start("tierbuf");
    let mut c = Client::connect(&name).unwrap();
    let p = c.load_file_placed(&obj, None, Some("count"), &[]).unwrap();
    let n = 100u64;
    let local = c.alloc(n).unwrap();
    let slow = c.alloc_placed(n, Some("cxl:20000")).unwrap();
    // The service names the buffer's tier slot; the jobs carry it (the CUDA backend's
    // table is indexed by it, the CPU backend finds the buffer itself).
    assert_eq!((local.tier_slot, slow.tier_slot), (0, 1));
    let mut job = host::client::Job::new(p.id, 1).input(&slow.slice(8, 8), 8);
    assert_eq!(shm_maps::job_flags::tier_of(job.desc_mut().flags), 1);
    let time = |c: &mut Client, input: &host::client::Buffer| {
        let r = counted_job(c, p.id, n, input);
        assert_eq!(r.records_done, n, "{r:?}");
        run_time(&r)
    };
    time(&mut c, &local);
    let (base, t) = fastest(5, |tier| time(&mut c, if tier { &slow } else { &local }));
    let per = t.saturating_sub(base).as_secs_f64() * 1e6 / n as f64;
    eprintln!("tier buffer: {per:.2} µs per record over the local buffer (configured 20)");
    assert!((18.0..200.0).contains(&per), "{per:.1} µs per record");
    // An output buffer in a tier: each record's 8 bytes leave through its link, a posted
    // write (0.0008 GB/s: 10 µs a record; a latency alone costs nothing).
    let out_local = c.alloc(n * 8).unwrap();
    let out_capped = c.alloc_placed(n * 8, Some("cxl:0:0.0008")).unwrap();
    let out_slow = c.alloc_placed(n * 8, Some("cxl:20000")).unwrap();
    let with_out = |c: &mut Client, out: &host::client::Buffer| {
        let mut job = Job::new(p.id, n).input(&local, 1).output(out, 8);
        assert_eq!(
            shm_maps::job_flags::out_tier_of(job.desc_mut().flags),
            out.tier_slot
        );
        let r = c.run(&job, T).unwrap();
        assert_eq!(r.records_done, n, "{r:?}");
        run_time(&r)
    };
    let (base, capped) = fastest(5, |tier| {
        with_out(&mut c, if tier { &out_capped } else { &out_local })
    });
    let per = capped.saturating_sub(base).as_secs_f64() * 1e6 / n as f64;
    eprintln!("tier output: {per:.2} µs per record over the local buffer (link 10)");
    assert!((9.0..100.0).contains(&per), "{per:.1} µs per record");
    let (base, posted) = fastest(5, |tier| {
        with_out(&mut c, if tier { &out_slow } else { &out_local })
    });
    let per = posted.saturating_sub(base).as_secs_f64() * 1e6 / n as f64;
    assert!(
        per < 5.0,
        "{per:.1} µs per record for a latency-only output tier"
    );
    for b in [out_local, out_capped, out_slow] {
        c.free(b).unwrap();
    }
    // Freed, its space is local again for the next buffer there.
    let off = slow.off;
    c.free(slow).unwrap();
    let again = c.alloc(n).unwrap();
    assert_eq!(again.off, off, "the arena hands the same space out again");
    // (The best of three: a descheduled worker's run time carries the pause.)
    let t = (0..3).map(|_| time(&mut c, &again)).min().unwrap();
    assert!(
        t < Duration::from_micros(20 * n / 2),
        "{t:?}: still in the tier"
    );
    // Bad placements are refused, naming the spec.
    for bad in ["cxl:fast", "dram", "cxl:5:0"] {
        let e = c.alloc_placed(n, Some(bad)).unwrap_err().to_string();
        assert!(e.contains(bad) && e.contains("cxl:LATENCY_NS"), "{e}");
    }
    drop(c);
    svc.stop(false);
}
