//! Issue 18 row a: a service killed with SIGKILL and restarted with `--recover` gives back
//! its programs (ids, versions), its maps (contents), its clients' buffers and its queued
//! jobs, and ends the jobs it was running with `SERVICE_RESTARTED`, exactly once each.
//!
//! Services run in child processes (this test binary re-executed with `BPFTIME_TEST_ROLE`,
//! entered through `child_entry`), so that they can be killed; clients run in the test.

use host::client::{Client, ClientError, Job, Wait};
use host::service::{BackendChoice, Service, ServiceConfig};
use shm_maps::{RegionConfig, status};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ROLE: &str = "BPFTIME_TEST_ROLE";
const T: Duration = Duration::from_secs(30);
/// Worker threads of the crash test's service.
const WORKERS: u32 = 2;

fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "bpftime-r-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn config(name: &str, recover: bool) -> ServiceConfig {
    ServiceConfig {
        name: name.into(),
        backend: BackendChoice::Cpu,
        workers: std::env::var("BPFTIME_TEST_WORKERS").map_or(2, |w| w.parse().unwrap()),
        mode: 0o600,
        recover,
        region: RegionConfig {
            arena_size: 16 << 20,
            queue_capacity: 256,
            max_clients: 8,
            completions_per_client: 64,
            ..RegionConfig::default()
        },
        metrics: None,
        max_insns: 100_000_000,
        engine: jit::cpu::Engine::default(),
        cuda: Default::default(),
        devices: Vec::new(),
    }
}

/// Entry point of the service processes (does nothing in the parent run).
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "serve");
    let name = std::env::var("BPFTIME_TEST_NAME").unwrap();
    let recover = std::env::var("BPFTIME_TEST_RECOVER").is_ok_and(|v| v == "1");
    let svc = Service::start(config(&name, recover)).unwrap();
    println!("CHILD-SERVING");
    svc.wait();
}

/// A service process; `recover` adopts the region a killed one left.
fn serve(name: &str, recover: bool, workers: u32) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(ROLE, "serve")
        .env("BPFTIME_TEST_NAME", name)
        .env("BPFTIME_TEST_RECOVER", if recover { "1" } else { "0" })
        .env("BPFTIME_TEST_WORKERS", workers.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(out).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("CHILD-SERVING"))),
        "the service did not start"
    );
    // Keep reading so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    child
}

fn kill(child: &mut Child) {
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

fn cleanup(name: &str) {
    let _ = std::fs::remove_file(format!("/dev/shm/{name}"));
    let _ = std::fs::remove_file(format!("/dev/shm/{name}.sock"));
}

/// A loop of `iters` iterations, returning the count.
fn spinner(iters: u32) -> Vec<u8> {
    let text = format!("r0 = 0\nloop:\nr0 += 1\nif r0 < {iters} goto loop\nexit\n");
    ebpf::isa::insns_to_bytes(&ebpf::asm::assemble(&text).unwrap())
}

/// Sum of the `counts` array of a `counter` or `job_counter` program.
fn counted(c: &mut Client, prog: &str) -> u64 {
    c.map_dump(&format!("{prog}:counts"))
        .unwrap()
        .entries
        .iter()
        .map(|(_, v)| {
            let b = host::hex::decode(v).unwrap();
            u64::from_le_bytes(b[..8].try_into().unwrap())
        })
        .sum()
}

#[test]
fn recover_keeps_programs_maps_buffers_and_queued_jobs() {
    let Some(obj) = bpftime_tests::compile("counter") else {
        return;
    };
    let name = unique("keep");
    let mut svc = serve(&name, false, 1);
    let mut c = Client::connect(&name).unwrap();
    let spin = c
        .load_bytes("spin.bin", &spinner(300_000), Some("spin"))
        .unwrap();
    c.load_file_as(&obj, None, Some("counter")).unwrap();
    // Version 2: `replace` keeps the maps; the recovered service must keep the version.
    let counter = c.replace_file("counter", &obj, None).unwrap();
    assert_eq!(counter.version, 2);
    let input = c.alloc(64).unwrap();
    c.write(&input, 0, &[7; 64]).unwrap();
    // A buffer in an emulated tier: its placement is part of what comes back, in the tier
    // slot its jobs name (slot 2: the first one's is free again by then).
    let first = c.alloc_placed(64, Some("cxl:20000")).unwrap();
    let slow = c.alloc_placed(160, Some("cxl:20000")).unwrap();
    c.free(first).unwrap();
    assert_eq!(slow.tier_slot, 2);
    let one = Job::new(counter.id, 1).input(&input, 8);
    for i in 1..=3 {
        assert_eq!(c.run(&one, T).unwrap().r0, i);
    }
    // One worker: a long job runs, five counter jobs queue behind it. Submitted in one
    // batch, the worker usually takes all six at once: the five are in its hands, not
    // started.
    let big = c.alloc(1 << 16).unwrap();
    let mut tickets = c
        .submit_batch(
            &[
                Job::new(spin.id, 1 << 16).input(&big, 1),
                one,
                one,
                one,
                one,
                one,
            ],
            Wait::No,
        )
        .unwrap();
    let queued = tickets.split_off(1);
    let long = tickets.pop().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let old_pid = svc.id();
    kill(&mut svc);
    assert!(matches!(
        c.wait(long, T),
        Err(ClientError::ServiceDied { .. })
    ));
    let orphans = c.orphans();
    assert_eq!(orphans.len(), 1);

    let mut svc = serve(&name, true, 1);
    assert!(c.service_ready());
    let s = c.status().unwrap(); // a new connection to the new socket
    let rec = s.recovered.expect("the status says what was recovered");
    assert_eq!(rec.from_pid, old_pid);
    assert_eq!((rec.programs, rec.maps), (2, 3), "{rec:?}");
    // All five are in the queue again: those the worker had taken with the long job
    // (how many depends on when it polled; usually all) were put back.
    assert_eq!(rec.queued_jobs, 5, "{rec:?}");
    assert!(rec.requeued_jobs <= 5, "{rec:?}");
    assert_eq!(rec.ended_jobs, 1, "{rec:?}");
    assert!(rec.buffers >= 1, "{rec:?}");
    let long = c.wait(orphans.into_iter().next().unwrap(), T).unwrap();
    assert_eq!(long.status, status::SERVICE_RESTARTED);
    assert!(long.error.unwrap().contains("died"));
    // The queued jobs ran on the recovered program, over the kept counter.
    let r0: Vec<u64> = queued
        .into_iter()
        .map(|t| {
            let r = c.wait(t, T).unwrap();
            assert!(r.ok(), "{r:?}");
            assert_eq!((r.prog_id, r.prog_version), (counter.id, 2));
            r.r0
        })
        .collect();
    assert_eq!(r0, vec![4, 5, 6, 7, 8]);
    assert_eq!(counted(&mut c, "counter"), 8);
    // Ids, versions and the buffer are the same; new loads get new ids.
    let listed = c.list().unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|p| (p.id, p.name.as_str(), p.version))
            .collect::<Vec<_>>(),
        vec![(spin.id, "spin", 1), (counter.id, "counter", 2)]
    );
    assert_eq!(c.read(&input, 0, 64).unwrap(), vec![7; 64]);
    // Still in the tier: each of 20 records waits its 20 µs.
    let r = c.run(&Job::new(counter.id, 20).input(&slow, 8), T).unwrap();
    assert!(r.ok() && r.run_ns >= 20 * 20_000, "{r:?}");
    // And in its slot: a new placed buffer takes the free slot 1, not slot 2.
    let fresh = c.alloc_placed(64, Some("cxl:100")).unwrap();
    assert_eq!(fresh.tier_slot, 1);
    let again = c
        .load_bytes("spin2.bin", &spinner(10), Some("spin2"))
        .unwrap();
    assert!(again.id > counter.id);
    c.stop(false).unwrap();
    svc.wait().unwrap();
    cleanup(&name);
}

/// What one client saw: tag → final status, in submission order.
type Outcomes = BTreeMap<u64, i32>;

/// A client that submits one-record counter jobs (up to 4 in flight) until `stop`,
/// riding out service deaths: jobs whose wait ended with `ServiceDied` are waited for
/// again once the recovered service is ready.
fn load_client(name: String, prog: u32, stop: Arc<AtomicBool>) -> Outcomes {
    let mut c = Client::connect(&name).unwrap();
    let input = c.alloc(64).unwrap();
    let job = Job::new(prog, 1).input(&input, 8);
    let mut seen = Outcomes::new();
    let record = |seen: &mut Outcomes, t_tag: u64, r: host::client::JobResult| {
        assert_eq!(r.tag, t_tag, "a completion of another job");
        assert!(
            seen.insert(t_tag, r.status).is_none(),
            "job {t_tag} ended twice"
        );
    };
    while !stop.load(Ordering::Relaxed) {
        let tickets = match c.submit_batch(&[job, job, job, job], Wait::No) {
            Ok(t) => t,
            Err(ClientError::QueueFull { .. }) => continue,
            Err(ClientError::ServiceDied { .. } | ClientError::NotRunning(_)) => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) => panic!("submit: {e}"),
        };
        for t in tickets {
            let tag = t.tag();
            match c.wait(t, T) {
                Ok(r) => record(&mut seen, tag, r),
                Err(ClientError::ServiceDied { .. }) => {}
                Err(e) => panic!("wait: {e}"),
            }
        }
        let orphans = c.orphans();
        if !orphans.is_empty() {
            let t0 = Instant::now();
            while !c.service_ready() {
                assert!(t0.elapsed() < T, "the service never came back");
                std::thread::sleep(Duration::from_millis(2));
            }
            for t in orphans {
                let tag = t.tag();
                match c.wait(t, T) {
                    Ok(r) => record(&mut seen, tag, r),
                    Err(e) => panic!("waiting again for job {tag} after recovery: {e}"),
                }
            }
        }
    }
    seen
}

#[test]
fn killed_under_load_20_times_every_job_ends_once_and_the_counter_agrees() {
    let Some(obj) = bpftime_tests::compile("job_counter") else {
        return;
    };
    let rounds: usize = std::env::var("BPFTIME_CRASH_ROUNDS").map_or(20, |v| v.parse().unwrap());
    let name = unique("crash");
    let mut svc = serve(&name, false, WORKERS);
    let mut c = Client::connect(&name).unwrap();
    let p = c.load_file_as(&obj, None, Some("counter")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (name, stop) = (name.clone(), stop.clone());
            std::thread::spawn(move || load_client(name, p.id, stop))
        })
        .collect();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let ended = Arc::new(Mutex::new(0u64));
    let mut requeued = 0;
    for round in 0..rounds {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(20 + rng % 100));
        kill(&mut svc);
        svc = serve(&name, true, WORKERS);
        let s = c.status().unwrap();
        let rec = s.recovered.unwrap();
        assert_eq!((rec.programs, rec.maps), (1, 2), "round {round}: {rec:?}");
        assert!(rec.errors.is_empty(), "{:?}", rec.errors);
        *ended.lock().unwrap() += rec.ended_jobs;
        requeued += rec.queued_jobs;
        let q = c.resolve("counter").unwrap();
        assert_eq!((q.id, q.version), (p.id, p.version), "round {round}");
    }
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let outcomes: Vec<Outcomes> = clients.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = outcomes
        .iter()
        .flat_map(|o| o.values())
        .filter(|&&s| s == status::OK)
        .count() as u64;
    let restarted = outcomes
        .iter()
        .flat_map(|o| o.values())
        .filter(|&&s| s == status::SERVICE_RESTARTED)
        .count() as u64;
    let other: Vec<i32> = outcomes
        .iter()
        .flat_map(|o| o.values().copied())
        .filter(|&s| s != status::OK && s != status::SERVICE_RESTARTED)
        .collect();
    assert!(other.is_empty(), "unexpected statuses {other:?}");
    // Every job a client submitted has ended exactly once (checked as they came in), and
    // the jobs the recovered services ended are the ones the clients saw end that way.
    assert_eq!(restarted, *ended.lock().unwrap());
    let counter = counted(&mut c, "counter");
    // A job that was running when the service died may or may not have run its record
    // (maps are not transactional): the counter lies between the two bounds.
    assert!(
        ok <= counter && counter <= ok + restarted,
        "counter {counter}, completed {ok}, ended as restarted {restarted}"
    );
    assert!(ok > 1000, "too little load to mean anything: {ok} jobs");
    eprintln!(
        "{rounds} kills: {ok} jobs completed, {restarted} ended as restarted, {requeued} found \
         queued and run after a recovery, counter {counter}"
    );
    c.stop(false).unwrap();
    svc.wait().unwrap();
    cleanup(&name);
}

/// A service whose socket accepts a control request but never answers (stuck) makes the
/// request fail with `Timeout` after the client's request timeout, and the connection is
/// dropped: the next request goes out on a new one and gets its own answer.
#[test]
fn a_control_request_to_a_stuck_service_times_out() {
    let name = unique("stuck");
    let svc = Service::start(config(&name, false)).unwrap();
    let mut c = Client::connect(&name).unwrap();
    assert!(c.status().is_ok());
    // A stuck service: its socket now belongs to a listener that reads and never replies.
    let path = host::service::socket_path(&name);
    let real = path.with_extension("sock.real");
    std::fs::rename(&path, &real).unwrap();
    let stuck = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let hold = std::thread::spawn(move || {
        let (s, _) = stuck.accept().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(&s).read_line(&mut line).unwrap();
        std::thread::sleep(Duration::from_secs(3));
        line
    });
    // The client's connection is to the real service: make it reconnect.
    drop(c);
    let mut c = Client::connect(&name).unwrap();
    c.set_request_timeout(Some(Duration::from_millis(300)));
    let t = Instant::now();
    let e = c.status().unwrap_err();
    assert!(
        matches!(e, ClientError::Timeout(d) if d == Duration::from_millis(300)),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(hold.join().unwrap().contains("status"));
    // Unstuck: the next request connects again and gets the real service's answer.
    std::fs::remove_file(&path).unwrap();
    std::fs::rename(&real, &path).unwrap();
    assert_eq!(c.status().unwrap().name, name);
    drop(c);
    svc.stop(false);
}
