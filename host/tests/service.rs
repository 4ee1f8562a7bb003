//! The service end to end: real client processes, hot swap under load, and every kind of
//! bad input from issue 3, each in its own test.
//!
//! Client processes are this test binary re-executed with `BPFTIME_TEST_ROLE` set; the
//! `child_entry` test is their entry point and does nothing in the parent run.

use host::client::{Client, ClientError, Job, Wait};
use host::service::{BackendChoice, Service, ServiceConfig};
use shm_maps::{RegionConfig, status};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const ROLE: &str = "BPFTIME_TEST_ROLE";
const T: Duration = Duration::from_secs(30);

fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "bpftime-t-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn config(name: &str) -> ServiceConfig {
    ServiceConfig {
        name: name.into(),
        backend: BackendChoice::Cpu,
        workers: 1,
        mode: 0o600,
        recover: false,
        region: RegionConfig {
            arena_size: 64 << 20,
            queue_capacity: 1024,
            max_clients: 16,
            completions_per_client: 512,
            ..RegionConfig::default()
        },
        metrics: None,
        max_insns: 10_000_000,
        engine: jit::cpu::Engine::default(),
        cuda: Default::default(),
        devices: Vec::new(),
    }
}

struct Running {
    svc: Arc<Service>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.svc.stop(true);
    }
}

fn start(cfg: ServiceConfig) -> Running {
    Running {
        svc: Service::start(cfg).expect("service starts"),
    }
}

/// `r0 = *(u64 *)data + (VERSION << 32)`, after the bounds check; 0 if the record is short.
fn versioned(version: u64) -> Vec<u8> {
    let text = format!(
        "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr4 = r2\nr4 += 8\nif r4 > r3 goto short\n\
         r0 = *(u64 *)(r2 + 0)\nr5 = {:#x} ll\nr0 += r5\nexit\nshort:\nr0 = 0\nexit\n",
        version << 32
    );
    ebpf::isa::insns_to_bytes(&ebpf::asm::assemble(&text).unwrap())
}

/// A loop of `iters` iterations, returning the count.
fn spinner(iters: u32) -> Vec<u8> {
    let text = format!("r0 = 0\nloop:\nr0 += 1\nif r0 < {iters} goto loop\nexit\n");
    ebpf::isa::insns_to_bytes(&ebpf::asm::assemble(&text).unwrap())
}

fn one_record(c: &mut Client, prog: u32, v: u64) -> Job {
    let b = c.alloc(8).unwrap();
    c.write(&b, 0, &v.to_le_bytes()).unwrap();
    Job::new(prog, 1).input(&b, 8)
}

fn run_one(c: &mut Client, prog: u32, v: u64) -> host::client::JobResult {
    let job = one_record(c, prog, v);
    c.run(&job, T).unwrap()
}

/// Entry point of child processes (does nothing in the parent run).
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let name = std::env::var("BPFTIME_TEST_NAME").unwrap();
    match role.as_str() {
        "submitter" => {
            let jobs: u64 = std::env::var("BPFTIME_TEST_JOBS").unwrap().parse().unwrap();
            let base: u64 = std::env::var("BPFTIME_TEST_BASE").unwrap().parse().unwrap();
            let mut c = Client::connect(&name).unwrap();
            let prog = c.resolve("versioned").unwrap().id;
            const BATCH: u64 = 64;
            let input = c.alloc(BATCH * 8).unwrap();
            let mut done = 0;
            let mut versions = std::collections::BTreeSet::new();
            while done < jobs {
                let k = BATCH.min(jobs - done);
                let mut batch = Vec::new();
                for i in 0..k {
                    let v = base + done + i;
                    c.write(&input, i * 8, &v.to_le_bytes()).unwrap();
                    let slot = input.slice(i * 8, 8);
                    batch.push(Job::new(prog, 1).input(&slot, 8));
                }
                let tickets = c.submit_batch(&batch, Wait::Block(T)).unwrap();
                assert_eq!(tickets.len() as u64, k);
                for (i, t) in tickets.into_iter().enumerate() {
                    let r = c.wait(t, T).unwrap();
                    assert!(r.ok(), "{r:?}");
                    assert_eq!(r.records_done, 1);
                    let v = base + done + i as u64;
                    assert_eq!(
                        r.r0,
                        v + ((r.prog_version as u64) << 32),
                        "job {v} ran on version {} but its result is {:#x}",
                        r.prog_version,
                        r.r0
                    );
                    versions.insert(r.prog_version);
                }
                done += k;
            }
            println!("CHILD-OK {done} versions {}", versions.len());
        }
        "die-mid-job" => {
            let mut c = Client::connect(&name).unwrap();
            let prog = c.resolve("spinner").unwrap().id;
            let n: u64 = std::env::var("BPFTIME_TEST_RECORDS").map_or(4096, |v| v.parse().unwrap());
            let b = c.alloc(n * 16).unwrap();
            let job = Job::new(prog, n).input(&b, 16);
            let _t = c.submit(&job, Wait::No).unwrap();
            println!("CHILD-SUBMITTED");
            std::process::abort();
        }
        "serve" => {
            let _svc = Service::start(config(&name)).unwrap();
            println!("CHILD-SERVING");
            std::thread::sleep(Duration::from_secs(120));
        }
        "crash-service" => {
            let _svc = Service::start(config(&name)).unwrap();
            println!("CHILD-SERVING");
            std::process::abort();
        }
        other => panic!("unknown role {other}"),
    }
}

fn child(role: &str, name: &str, env: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env("BPFTIME_TEST_NAME", name)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

#[test]
fn many_client_processes_with_continual_replace_lose_nothing() {
    let name = unique("swap");
    let run = start(config(&name));
    let mut c = Client::connect(&name).unwrap();
    c.load_bytes("versioned.bin", &versioned(1), Some("versioned"))
        .unwrap();
    const CLIENTS: u64 = 4;
    const JOBS: u64 = 25_000;
    let kids: Vec<_> = (0..CLIENTS)
        .map(|i| {
            child(
                "submitter",
                &name,
                &[
                    ("BPFTIME_TEST_JOBS", JOBS.to_string()),
                    ("BPFTIME_TEST_BASE", (i * 1_000_000).to_string()),
                ],
            )
            .spawn()
            .unwrap()
        })
        .collect();
    // Replace continually while the children submit.
    let mut version = 1u64;
    let start_t = Instant::now();
    let mut kids_done = false;
    while !kids_done && start_t.elapsed() < Duration::from_secs(120) {
        version += 1;
        let p = c
            .replace_bytes("versioned", "versioned.bin", &versioned(version))
            .unwrap();
        assert_eq!(p.version as u64, version);
        std::thread::sleep(Duration::from_millis(2));
        kids_done = run.svc.status().jobs_done >= CLIENTS * JOBS;
    }
    let mut versions_seen = 0;
    for k in kids {
        let out = k.wait_with_output().unwrap();
        let so = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {so}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = so
            .lines()
            .find_map(|l| l.split_once("CHILD-OK").map(|(_, rest)| rest))
            .unwrap_or_else(|| panic!("child did not report: {so}"));
        let mut parts = line.split_whitespace();
        assert_eq!(parts.next().unwrap().parse::<u64>().unwrap(), JOBS);
        versions_seen += parts.nth(1).unwrap().parse::<u64>().unwrap();
    }
    let s = run.svc.status();
    assert_eq!(
        s.jobs_done,
        CLIENTS * JOBS,
        "every job completed exactly once"
    );
    assert_eq!(s.jobs_failed, 0);
    assert!(version > 3, "replaced only {version} times");
    assert!(versions_seen > CLIENTS, "jobs ran on several versions");
}

fn submit_bad(c: &mut Client, job: Job) -> host::client::JobResult {
    c.run(&job, T).unwrap()
}

#[test]
fn descriptor_outside_the_arena_is_an_error_completion() {
    let name = unique("oob");
    let _run = start(config(&name));
    let mut c = Client::connect(&name).unwrap();
    let p = c.load_bytes("v.bin", &versioned(1), Some("v")).unwrap();
    let mut job = one_record(&mut c, p.id, 5);
    job.desc_mut().input_off = 1 << 40;
    let r = submit_bad(&mut c, job);
    assert_eq!(r.status, status::BAD_DESCRIPTOR);
    assert!(r.error.unwrap().contains("outside the"));
    // Lengths that disagree with n and the record size.
    let mut job = one_record(&mut c, p.id, 5);
    job.desc_mut().n = 2;
    let r = submit_bad(&mut c, job);
    assert_eq!(r.status, status::BAD_DESCRIPTOR);
    assert!(r.error.unwrap().contains("need 16 bytes"));
    // The service still serves.
    let ok = run_one(&mut c, p.id, 5);
    assert_eq!(ok.r0, 5 + (1 << 32));
}

#[test]
fn unknown_program_is_an_error_completion() {
    let name = unique("unk");
    let _run = start(config(&name));
    let mut c = Client::connect(&name).unwrap();
    let job = one_record(&mut c, 4242, 1);
    let r = submit_bad(&mut c, job);
    assert_eq!(r.status, status::UNKNOWN_PROGRAM);
    assert!(r.error.unwrap().contains("unknown program id 4242"));
}

#[test]
fn zero_record_size_is_an_error_completion() {
    let name = unique("zero");
    let _run = start(config(&name));
    let mut c = Client::connect(&name).unwrap();
    let p = c.load_bytes("v.bin", &versioned(1), Some("v")).unwrap();
    let mut job = one_record(&mut c, p.id, 1);
    job.desc_mut().in_rec_size = 0;
    let r = submit_bad(&mut c, job);
    assert_eq!(r.status, status::ZERO_RECORD_SIZE);
    assert!(r.error.unwrap().contains("record size is 0"));
}

#[test]
fn too_many_records_is_an_error_completion() {
    let name = unique("big");
    let mut cfg = config(&name);
    cfg.region.max_records = 1000;
    let _run = start(cfg);
    let mut c = Client::connect(&name).unwrap();
    let p = c.load_bytes("v.bin", &versioned(1), Some("v")).unwrap();
    let mut job = one_record(&mut c, p.id, 1);
    job.desc_mut().n = 1001;
    let r = submit_bad(&mut c, job);
    assert_eq!(r.status, status::TOO_MANY_RECORDS);
    assert!(r.error.unwrap().contains("limit is 1000"));
}

#[test]
fn full_queue_gives_queue_full_or_times_out() {
    let name = unique("full");
    let mut cfg = config(&name);
    cfg.region.queue_capacity = 4;
    let _run = start(cfg);
    let mut c = Client::connect(&name).unwrap();
    let slow = c
        .load_bytes("spin.bin", &spinner(3_000), Some("spin"))
        .unwrap();
    let slower = c
        .load_bytes("spin2.bin", &spinner(300_000), Some("spin2"))
        .unwrap();
    // Keep the only worker busy with a long job (2,000 records of 300,000 iterations:
    // long enough that it cannot finish while the test fills the queue behind it).
    let b = c.alloc(8 * 2000).unwrap();
    let big = c
        .submit(&Job::new(slower.id, 2000).input(&b, 8), Wait::No)
        .unwrap();
    let t0 = Instant::now();
    while !c.region().queue().is_empty() && t0.elapsed() < T {
        std::thread::yield_now();
    }
    // The worker hands the big job's queue slot back once the job has started (a few
    // µs after taking it); only then are all 4 slots free.
    std::thread::sleep(Duration::from_millis(50));
    let small = Job::new(slow.id, 1).input(&b, 8);
    let mut queued = Vec::new();
    for _ in 0..4 {
        queued.push(c.submit(&small, Wait::No).unwrap());
    }
    match c.submit(&small, Wait::No) {
        Err(ClientError::QueueFull { capacity: 4 }) => {}
        other => panic!("expected QueueFull, got {other:?}"),
    }
    match c.submit(&small, Wait::Block(Duration::from_millis(1))) {
        Err(ClientError::Timeout(_)) | Ok(_) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    let r = c.wait(big, T).unwrap();
    assert!(r.ok());
    for t in queued {
        assert!(c.wait(t, T).unwrap().ok());
    }
}

#[test]
fn client_that_dies_mid_job_is_reclaimed_and_others_continue() {
    let name = unique("die");
    let _run = start(config(&name));
    let mut c = Client::connect(&name).unwrap();
    c.load_bytes("spin.bin", &spinner(2_000), Some("spinner"))
        .unwrap();
    let p = c.load_bytes("v.bin", &versioned(1), Some("v")).unwrap();
    let out = child("die-mid-job", &name, &[]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("CHILD-SUBMITTED"));
    assert!(!out.status.success(), "the child aborted");
    // Other clients go on.
    let r = run_one(&mut c, p.id, 7);
    assert_eq!(r.r0, 7 + (1 << 32));
    // The dead client's job finishes and its slot and buffer are reclaimed.
    let t0 = Instant::now();
    loop {
        let s = c.status().unwrap();
        if s.clients == 1 && s.jobs_done >= 2 {
            break;
        }
        assert!(t0.elapsed() < T, "dead client not reclaimed: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_client_waiting_on_a_killed_service_learns_it_at_once() {
    // Issue 18 row b: a client whose job runs when the service is SIGKILLed gets an error
    // naming the service, its pid and how to restart it within 100 ms, not at its timeout.
    use std::io::BufRead;
    let name = unique("killed");
    let mut svc = child("serve", &name, &[]).spawn().unwrap();
    let mut lines = std::io::BufReader::new(svc.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.is_ok_and(|l| l.contains("CHILD-SERVING"))));
    let mut c = Client::connect(&name).unwrap();
    let p = c
        .load_bytes("spin.bin", &spinner(300_000), Some("spinner"))
        .unwrap();
    // 16,384 records of 300,000 iterations: seconds of work on one worker.
    let b = c.alloc(1 << 18).unwrap();
    let t = c
        .submit(&Job::new(p.id, 16_384).input(&b, 16), Wait::No)
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let pid = svc.id();
    svc.kill().unwrap();
    let killed = Instant::now();
    let e = c.wait(t, Duration::from_secs(30)).unwrap_err();
    let waited = killed.elapsed();
    let _ = svc.wait();
    let text = e.to_string();
    assert!(
        matches!(e, host::client::ClientError::ServiceDied { .. }),
        "{text}"
    );
    assert!(
        text.contains(&name) && text.contains(&pid.to_string()) && text.contains("--recover"),
        "{text}"
    );
    assert!(waited < Duration::from_millis(100), "waited {waited:?}");
    eprintln!("row b: the client learnt of the death after {waited:?}");
    let _ = std::fs::remove_file(format!("/dev/shm/{name}"));
    let _ = std::fs::remove_file(format!("/dev/shm/{name}.sock"));
}

#[test]
fn a_dead_clients_running_job_stops_and_frees_the_worker() {
    // Issue 18 row c: a client dies with seconds of work running on the only worker; the
    // job stops at a record boundary, so a one-record job behind it waits for the reaper
    // (20 ms) and one record, not for the dead client's job.
    let name = unique("abandon");
    let _run = start(config(&name));
    let mut c = Client::connect(&name).unwrap();
    c.load_bytes("spin.bin", &spinner(300_000), Some("spinner"))
        .unwrap();
    let p = c.load_bytes("v.bin", &versioned(1), Some("v")).unwrap();
    // 16,384 records of 300,000 iterations: several seconds of work.
    let t0 = Instant::now();
    let out = child(
        "die-mid-job",
        &name,
        &[("BPFTIME_TEST_RECORDS", "16384".into())],
    )
    .output()
    .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("CHILD-SUBMITTED"));
    let r = run_one(&mut c, p.id, 7);
    let waited = t0.elapsed();
    assert_eq!(r.r0, 7 + (1 << 32));
    let s = c.status().unwrap();
    assert!(
        s.jobs_failed >= 1,
        "the dead client's job ended as cancelled: {s:?}"
    );
    assert!(
        waited < Duration::from_secs(2),
        "the job behind the dead client's waited {waited:?}"
    );
    eprintln!("row c: the one-record job behind the dead client's waited {waited:?}");
}

#[test]
fn runtime_failure_is_an_error_completion() {
    let name = unique("rt");
    let mut cfg = config(&name);
    cfg.max_insns = 1000;
    let _run = start(cfg);
    let mut c = Client::connect(&name).unwrap();
    let p = c
        .load_bytes("spin.bin", &spinner(5_000), Some("spin"))
        .unwrap();
    let v = c.load_bytes("v.bin", &versioned(1), Some("v")).unwrap();
    let r = run_one(&mut c, p.id, 1);
    assert_eq!(r.status, status::RUNTIME_ERROR);
    assert_eq!(r.records_failed, 1);
    assert!(r.error.unwrap().contains("limit"), "names the cause");
    let ok = run_one(&mut c, v.id, 3);
    assert!(ok.ok());
}

#[test]
fn second_service_on_the_same_name_is_refused() {
    let name = unique("dup");
    let _run = start(config(&name));
    match Service::start(config(&name)) {
        Err(host::service::ServiceError::Region(shm_maps::RegionError::AlreadyRunning {
            pid,
            ..
        })) => assert_eq!(pid, std::process::id()),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a second service started on {name}"),
    }
}

#[test]
fn stale_region_is_refused_with_instructions_then_recovered() {
    let name = unique("stale");
    let out = child("crash-service", &name, &[]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("CHILD-SERVING"));
    match Service::start(config(&name)) {
        Err(host::service::ServiceError::Region(e @ shm_maps::RegionError::Stale { .. })) => {
            let msg = e.to_string();
            assert!(msg.contains("--recover"), "{msg}");
            assert!(msg.contains(&format!("/dev/shm/{name}")), "{msg}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("started over a stale region without --recover"),
    }
    let mut cfg = config(&name);
    cfg.recover = true;
    let _run = start(cfg);
    let mut c = Client::connect(&name).unwrap();
    let p = c.load_bytes("v.bin", &versioned(1), Some("v")).unwrap();
    assert!(run_one(&mut c, p.id, 1).ok());
}

#[test]
fn replace_of_unknown_and_duplicate_load_are_refused() {
    let name = unique("names");
    let _run = start(config(&name));
    let mut c = Client::connect(&name).unwrap();
    match c.replace_bytes("nope", "x.bin", &versioned(2)) {
        Err(ClientError::Service(m)) => assert!(m.contains("no program `nope`"), "{m}"),
        other => panic!("{other:?}"),
    }
    // And loading twice under one name is refused.
    c.load_bytes("v.bin", &versioned(1), Some("v")).unwrap();
    match c.load_bytes("v.bin", &versioned(1), Some("v")) {
        Err(ClientError::Service(m)) => assert!(m.contains("already loaded"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn status_and_metrics_agree() {
    let name = unique("metrics");
    let mut cfg = config(&name);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    cfg.metrics = Some(format!("127.0.0.1:{port}").parse().unwrap());
    let _run = start(cfg);
    let mut c = Client::connect(&name).unwrap();
    let p = c.load_bytes("v.bin", &versioned(1), Some("v")).unwrap();
    for i in 0..10 {
        assert!(run_one(&mut c, p.id, i).ok());
    }
    let s = c.status().unwrap();
    assert_eq!(s.jobs_done, 10);
    assert_eq!(s.latency.count, 10);
    // The CPU backend runs it on the JIT (the default engine), compile time reported.
    assert_eq!(s.programs[0].engine.as_deref(), Some("jit"));
    assert!(s.programs[0].compile_us.is_some());
    assert!(s.latency.p50_ns > 0 && s.latency.p50_ns <= s.latency.p99_ns);
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    conn.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.0 200"), "{body}");
    assert!(body.contains("bpftime_jobs_done_total 10"), "{body}");
    assert!(
        body.contains("bpftime_program_version{program=\"v\"} 1"),
        "{body}"
    );
}

#[test]
fn stop_drains_queued_jobs() {
    let name = unique("drain");
    let run = start(config(&name));
    let mut c = Client::connect(&name).unwrap();
    let p = c
        .load_bytes("spin.bin", &spinner(5_000), Some("spin"))
        .unwrap();
    let b = c.alloc(8).unwrap();
    let tickets: Vec<_> = (0..50)
        .map(|_| c.submit(&Job::new(p.id, 1).input(&b, 8), Wait::No).unwrap())
        .collect();
    c.stop(false).unwrap();
    for t in tickets {
        let r = c.wait(t, T).unwrap();
        assert!(r.ok(), "drained, not cancelled: {r:?}");
    }
    run.svc.wait();
    assert!(Client::connect(&name).is_err(), "region removed after stop");
}

#[test]
fn stop_now_cancels_queued_jobs_but_completes_every_one() {
    let name = unique("now");
    let run = start(config(&name));
    let mut c = Client::connect(&name).unwrap();
    let p = c
        .load_bytes("spin.bin", &spinner(5_000), Some("spin"))
        .unwrap();
    let b = c.alloc(8 * 64).unwrap();
    let tickets: Vec<_> = (0..200)
        .map(|_| {
            c.submit(&Job::new(p.id, 64).input(&b, 8), Wait::No)
                .unwrap()
        })
        .collect();
    c.stop(true).unwrap();
    let (mut ok, mut cancelled) = (0, 0);
    for t in tickets {
        let r = c.wait(t, T).unwrap();
        match r.status {
            status::OK => ok += 1,
            status::CANCELLED => {
                cancelled += 1;
                assert!(r.error.unwrap().contains("cancelled"));
            }
            s => panic!("unexpected status {s}"),
        }
    }
    assert_eq!(ok + cancelled, 200, "every accepted job completed once");
    assert!(cancelled > 0, "--now cancelled the queued jobs");
    run.svc.wait();
}

/// Map placement: on the CPU backend every map is shared, `device` is refused with the
/// reason, and a bad placement names what was expected.
#[test]
fn map_placement_on_the_cpu_backend() {
    let name = format!("bpftime-test-place-{}", std::process::id());
    let _svc = start(config(&name));
    let mut c = Client::connect(&name).unwrap();
    let obj = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/vec_add.bpf.o");
    let e = c
        .load_file_placed(&obj, None, None, &["records=device".into()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs the CUDA backend"), "{e}");
    let e = c
        .load_file_placed(&obj, None, None, &["records=gpu".into()])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`gpu` is not a placement (device, shm or cxl:LATENCY_NS[:GBPS])"),
        "{e}"
    );
    let e = c
        .load_file_placed(&obj, None, None, &["nosuch=shm".into()])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no map `nosuch`") && e.contains("records"),
        "{e}"
    );
    let p = c
        .load_file_placed(&obj, None, None, &["records=shm".into()])
        .unwrap();
    assert_eq!(p.maps[0].placement, "shm");
    // The per-thread array's default on the CPU backend is shared memory too.
    let p = c.load_file_as(&obj, None, Some("again")).unwrap();
    assert_eq!(p.maps[0].placement, "shm");
}

#[test]
fn jobs_go_to_the_queue_they_name_else_to_the_least_loaded() {
    // The routing of a multi-GPU service (`run --devices`), on a region with two queues
    // that CPU workers serve: the client's choices are the same on either backend.
    let name = unique("queues");
    let mut cfg = config(&name);
    cfg.region.queues = 2;
    cfg.workers = 2;
    let run = start(cfg);
    let mut c = Client::connect(&name).unwrap();
    assert_eq!(c.devices(), 2);
    let v = c.load_bytes("v.bin", &versioned(1), Some("v")).unwrap();
    let slow = c
        .load_bytes("spin.bin", &spinner(300_000), Some("spin"))
        .unwrap();
    // Named jobs run from the queue they name.
    for d in [1u32, 0, 1, 1] {
        let job = one_record(&mut c, v.id, 7).on_device(d);
        let r = c.run(&job, T).unwrap();
        assert!(r.ok(), "{r:?}");
        assert_eq!((r.device, r.r0), (d, 7 + (1 << 32)));
    }
    // Idle queues: a batch of unnamed jobs alternates between them.
    let job = one_record(&mut c, v.id, 9);
    let tickets = c.submit_batch(&[job; 8], Wait::Block(T)).unwrap();
    let mut per = [0; 2];
    for t in tickets {
        let r = c.wait(t, T).unwrap();
        assert!(r.ok());
        per[r.device as usize] += 1;
    }
    assert_eq!(per, [4, 4]);
    // Queue 0 busy with a long job: the next unnamed jobs go to queue 1 until the loads
    // are even.
    let b = c.alloc(8 * 2000).unwrap();
    let big = c
        .submit(&Job::new(slow.id, 2000).input(&b, 8).on_device(0), Wait::No)
        .unwrap();
    let tickets = c.submit_batch(&[job; 3], Wait::Block(T)).unwrap();
    let devices: Vec<u32> = tickets
        .into_iter()
        .map(|t| c.wait(t, T).unwrap().device)
        .collect();
    assert_eq!(devices, [1, 0, 1]);
    assert!(c.wait(big, T).unwrap().ok());
    // A GPU the service lacks is refused before anything is queued.
    match c.submit(&job.on_device(2), Wait::No) {
        Err(ClientError::NoSuchDevice {
            device: 2,
            devices: 2,
        }) => {}
        other => panic!("expected NoSuchDevice, got {other:?}"),
    }
    // `status` reports each queue; every job was counted where it ran.
    let st = run.svc.status();
    assert_eq!(st.queues.len(), 2);
    let submitted: Vec<u64> = st.queues.iter().map(|q| q.submitted).collect();
    assert_eq!(submitted, [1 + 4 + 1 + 1, 3 + 4 + 2]);
    for q in &st.queues {
        assert_eq!((q.done, q.load, q.depth), (q.submitted, 0, 0), "{q:?}");
    }
    // The metrics carry the same per-queue counts, labelled by queue.
    let text = host::service::metrics::render(&st);
    for (queue, submitted) in [(0, 7), (1, 9)] {
        let line = text
            .lines()
            .find(|l| {
                l.starts_with("bpftime_queue_jobs_submitted_total{")
                    && l.contains(&format!("queue=\"{queue}\""))
            })
            .unwrap_or_else(|| panic!("no queue {queue} line: {text}"));
        assert!(line.ends_with(&format!(" {submitted}")), "{line}");
        assert!(line.contains("device=\"cpu\""), "{line}");
    }
}

#[test]
fn several_devices_need_the_cuda_backend() {
    let name = unique("devcpu");
    let mut cfg = config(&name);
    cfg.devices = vec![0, 1];
    match Service::start(cfg) {
        Err(e) => assert!(
            e.to_string().contains("--devices needs the CUDA backend"),
            "{e}"
        ),
        Ok(_) => panic!("a CPU service with several devices started"),
    }
}

#[test]
fn a_failed_start_leaves_no_half_made_region() {
    // A start that fails after laying out the region (here: the CUDA backend on a machine
    // without one) removes it, so the next start is not refused as "not ready".
    let name = unique("failed");
    let mut cfg = config(&name);
    cfg.backend = BackendChoice::Cuda;
    match Service::start(cfg.clone()) {
        Ok(svc) => {
            svc.stop(true); // a GPU machine: nothing to check
            return;
        }
        Err(e) => assert!(e.to_string().contains("CUDA backend"), "{e}"),
    }
    assert!(
        !std::path::Path::new(&format!("/dev/shm/{name}")).exists(),
        "the half-made region is gone"
    );
    let again = Service::start(cfg).err().map(|e| e.to_string());
    assert!(
        again.as_deref().is_some_and(|e| e.contains("CUDA backend")),
        "{again:?}"
    );
    // And the name serves again.
    let _run = start(config(&name));
}
