//! `cargo bench -p bench --bench service`: the CPU-backend service, measured from other
//! processes, next to baselines measured in the same run.
//!
//! | figure | what | baseline (same run) |
//! |---|---|---|
//! | round trip | one-record job, `submit` + `wait`, from a second process (p50, p99) | a Unix-socket echo round trip between two processes; the program run in-process |
//! | throughput | tiny jobs/s from 1, 2 and 4 client processes, batches of 64 | the same program run in a plain in-process loop |
//! | large job | records/s of a filter over 10M 64-byte records | the same program over the same records in a plain in-process loop |
//!
//! Writes `bench/results/service_cpu.{json,md}` (`BPFTIME_BENCH_ENGINE=interp`) or
//! `service_cpu_jit.{json,md}` (`jit`, the default): the service's CPU engine, also used by
//! the in-process baselines (as the service runs them: verified programs). The service runs in a child process with one worker thread
//! (this machine has 2 cores: one for the worker, one for the clients).

use bench::cmd;
use ebpf::interp::{Env, Vm};
use host::client::{Client, Job, Wait};
use host::service::{BackendChoice, Service, ServiceConfig};
use serde::Serialize;
use shm_maps::RegionConfig;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROLE: &str = "BPFTIME_BENCH_ROLE";
const T: Duration = Duration::from_secs(600);

fn tiny() -> Vec<ebpf::isa::Insn> {
    ebpf::asm::assemble(
        "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr4 = r2\nr4 += 8\nif r4 > r3 goto short\n\
         r0 = *(u64 *)(r2 + 0)\nr0 += 1\nexit\nshort:\nr0 = 0\nexit\n",
    )
    .unwrap()
}

/// Verdict per 64-byte record: out = {key > args[0] && flag, index}; r0 = verdict.
fn filter() -> Vec<ebpf::isa::Insn> {
    ebpf::asm::assemble(
        "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr4 = r2\nr4 += 64\nif r4 > r3 goto bad\n\
         r6 = *(u64 *)(r1 + 16)\nr7 = *(u64 *)(r1 + 24)\nr4 = r6\nr4 += 8\nif r4 > r7 goto bad\n\
         r0 = 0\nr5 = *(u64 *)(r2 + 0)\nr8 = *(u64 *)(r1 + 48)\nif r5 <= r8 goto store\n\
         r9 = *(u8 *)(r2 + 8)\nif r9 == 0 goto store\nr0 = 1\nstore:\n*(u32 *)(r6 + 0) = r0\n\
         r5 = *(u64 *)(r1 + 32)\n*(u32 *)(r6 + 4) = r5\nexit\nbad:\nr0 = -1\nexit\n",
    )
    .unwrap()
}

fn bytes(insns: &[ebpf::isa::Insn]) -> Vec<u8> {
    ebpf::isa::insns_to_bytes(insns)
}

fn pct(mut v: Vec<u64>, q: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() as f64 * q) as usize).min(v.len() - 1)]
}

fn me(role: &str, name: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.env(ROLE, role).env("BPFTIME_BENCH_NAME", name);
    c
}

/// The CPU engine under test (`BPFTIME_BENCH_ENGINE`, default `jit`).
fn engine() -> jit::cpu::Engine {
    std::env::var("BPFTIME_BENCH_ENGINE")
        .ok()
        .map(|e| e.parse().expect("BPFTIME_BENCH_ENGINE is interp or jit"))
        .unwrap_or_default()
}

fn service_role(name: &str) {
    let svc = Service::start(ServiceConfig {
        name: name.into(),
        backend: BackendChoice::Cpu,
        workers: 1,
        mode: 0o600,
        recover: true,
        region: RegionConfig {
            arena_size: 1 << 30,
            queue_capacity: 8192,
            ..RegionConfig::default()
        },
        metrics: None,
        max_insns: 10_000_000,
        engine: engine(),
        cuda: Default::default(),
        devices: Vec::new(),
    })
    .unwrap();
    svc.wait();
}

fn echo_role(path: &str) {
    let l = UnixListener::bind(path).unwrap();
    let (mut s, _) = l.accept().unwrap();
    let mut b = [0u8; 8];
    while s.read_exact(&mut b).is_ok() {
        if s.write_all(&b).is_err() {
            break;
        }
    }
}

/// A client process: `jobs` one-record jobs in batches of 64, starting at `start_ns`.
fn throughput_role(name: &str) {
    let jobs: u64 = std::env::var("JOBS").unwrap().parse().unwrap();
    let start_ns: u64 = std::env::var("START_NS").unwrap().parse().unwrap();
    let mut c = Client::connect(name).unwrap();
    let prog = c.resolve("tiny").unwrap().id;
    const B: u64 = 64;
    let input = c.alloc(B * 8).unwrap();
    for i in 0..B {
        c.write(&input, i * 8, &i.to_le_bytes()).unwrap();
    }
    let batch: Vec<Job> = (0..B)
        .map(|i| Job::new(prog, 1).input(&input.slice(i * 8, 8), 8))
        .collect();
    while shm_maps::region::monotonic_ns() < start_ns {
        std::hint::spin_loop();
    }
    let t0 = Instant::now();
    let mut done = 0;
    while done < jobs {
        let k = B.min(jobs - done) as usize;
        let tickets = c.submit_batch(&batch[..k], Wait::Block(T)).unwrap();
        for t in tickets {
            let r = c.wait(t, T).unwrap();
            assert!(r.ok());
        }
        done += k as u64;
    }
    println!("DONE {done} {}", t0.elapsed().as_nanos());
}

#[derive(Serialize)]
struct Results {
    engine: String,
    date: String,
    commit: String,
    host: String,
    workers: usize,
    rtt_p50_ns: u64,
    rtt_p99_ns: u64,
    rtt_samples: usize,
    socket_echo_p50_ns: u64,
    socket_echo_p99_ns: u64,
    inprocess_run_ns: f64,
    rtt_vs_socket_echo: f64,
    throughput: Vec<Throughput>,
    inprocess_jobs_per_s: f64,
    large_records: u64,
    large_service_s: f64,
    large_loop_s: f64,
    large_service_records_per_s: f64,
    large_loop_records_per_s: f64,
    large_service_over_loop: f64,
}

#[derive(Serialize)]
struct Throughput {
    clients: usize,
    jobs: u64,
    jobs_per_s: f64,
    ratio_to_inprocess: f64,
}

fn main() {
    let name = std::env::var("BPFTIME_BENCH_NAME")
        .unwrap_or_else(|_| format!("bpftime-bench-{}", std::process::id()));
    match std::env::var(ROLE).as_deref() {
        Ok("service") => return service_role(&name),
        Ok("echo") => return echo_role(&std::env::var("ECHO_PATH").unwrap()),
        Ok("throughput") => return throughput_role(&name),
        _ => {}
    }
    let quick = std::env::var("BENCH_QUICK").is_ok();
    let mut svc: Child = me("service", &name).spawn().unwrap();
    let mut c = loop {
        match Client::connect(&name) {
            Ok(c) if std::path::Path::new(&host::service::socket_path(&name)).exists() => break c,
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let tiny_id = c
        .load_bytes("tiny.bin", &bytes(&tiny()), Some("tiny"))
        .unwrap()
        .id;
    let filter_id = c
        .load_bytes("filter.bin", &bytes(&filter()), Some("filter"))
        .unwrap()
        .id;

    // 1. Round trip.
    let input = c.alloc(8).unwrap();
    c.write(&input, 0, &41u64.to_le_bytes()).unwrap();
    let job = Job::new(tiny_id, 1).input(&input, 8);
    let n_rtt = if quick { 20_000 } else { 200_000 };
    for _ in 0..20_000 {
        c.run(&job, T).unwrap();
    }
    let mut rtt = Vec::with_capacity(n_rtt);
    for _ in 0..n_rtt {
        let t0 = Instant::now();
        let r = c.run(&job, T).unwrap();
        rtt.push(t0.elapsed().as_nanos() as u64);
        assert_eq!(r.r0, 42);
    }
    let (rtt_p50, rtt_p99) = (pct(rtt.clone(), 0.5), pct(rtt, 0.99));

    // Baseline: a Unix-socket echo between two processes.
    let echo_path = format!("/tmp/bpftime-bench-echo-{}", std::process::id());
    let _ = std::fs::remove_file(&echo_path);
    let mut echo = me("echo", &name)
        .env("ECHO_PATH", &echo_path)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut s = loop {
        match UnixStream::connect(&echo_path) {
            Ok(s) => break s,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    let mut echo_t = Vec::new();
    let mut b = [0u8; 8];
    for i in 0..(n_rtt / 4 + 5_000) {
        let t0 = Instant::now();
        s.write_all(&(i as u64).to_le_bytes()).unwrap();
        s.read_exact(&mut b).unwrap();
        if i >= 5_000 {
            echo_t.push(t0.elapsed().as_nanos() as u64);
        }
    }
    drop(s);
    let _ = echo.wait();
    let _ = std::fs::remove_file(&echo_path);
    let (echo_p50, echo_p99) = (pct(echo_t.clone(), 0.5), pct(echo_t, 0.99));

    // Baseline: the program in-process.
    let tiny_prog = ebpf::Program::from_insns("tiny", tiny());
    let vm = jit::cpu::Executor::verified(Vm::new(&tiny_prog, vec![]).unwrap(), engine());
    let mut env = Env::new(0);
    let data = 41u64.to_le_bytes();
    let iters = 2_000_000u64;
    let t0 = Instant::now();
    let mut acc = 0u64;
    for i in 0..iters {
        acc = acc.wrapping_add(vm.run_job(&data, &mut [], i, 1, [0; 4], &mut env).unwrap());
    }
    let inproc_ns = t0.elapsed().as_nanos() as f64 / iters as f64;
    assert_eq!(acc, 42 * iters);

    // 2. Throughput.
    let per_client_total: u64 = if quick { 200_000 } else { 2_000_000 };
    let mut throughput = Vec::new();
    for clients in [1usize, 2, 4] {
        let jobs = per_client_total / clients as u64;
        let start = shm_maps::region::monotonic_ns() + 300_000_000;
        let kids: Vec<Child> = (0..clients)
            .map(|_| {
                me("throughput", &name)
                    .env("JOBS", jobs.to_string())
                    .env("START_NS", start.to_string())
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut total = 0;
        let mut longest = 0u64;
        for k in kids {
            let out = k.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let line = text
                .lines()
                .find(|l| l.starts_with("DONE"))
                .expect("client result");
            let mut p = line.split_whitespace().skip(1);
            total += p.next().unwrap().parse::<u64>().unwrap();
            longest = longest.max(p.next().unwrap().parse().unwrap());
        }
        let jps = total as f64 / (longest as f64 / 1e9);
        throughput.push(Throughput {
            clients,
            jobs: total,
            jobs_per_s: jps,
            ratio_to_inprocess: jps / (1e9 / inproc_ns),
        });
    }

    // 3. Large job: 10M 64-byte records.
    let n: u64 = if quick { 1_000_000 } else { 10_000_000 };
    let rec = 64u64;
    let mut host_in = vec![0u8; (n * rec) as usize];
    for i in 0..n as usize {
        let key = (i as u64 * 7919) % 1000;
        host_in[i * 64..i * 64 + 8].copy_from_slice(&key.to_le_bytes());
        host_in[i * 64 + 8] = (i & 1) as u8;
    }
    let big_in = c.alloc(n * rec).unwrap();
    let chunk = 64 << 20;
    for (k, part) in host_in.chunks(chunk).enumerate() {
        c.write(&big_in, (k * chunk) as u64, part).unwrap();
    }
    let big_out = c.alloc(n * 8).unwrap();
    c.write(&big_out, 0, &vec![0xa5u8; (n * 8) as usize])
        .unwrap();
    let args = [500u64, 0, 0, 0];
    let t0 = Instant::now();
    let r = c
        .run(
            &Job::new(filter_id, n)
                .input(&big_in, rec as u32)
                .output(&big_out, 8)
                .args(args),
            T,
        )
        .unwrap();
    let service_s = t0.elapsed().as_secs_f64();
    assert!(r.ok(), "{r:?}");
    assert_eq!(r.records_done, n);
    let fprog = ebpf::Program::from_insns("filter", filter());
    let fvm = jit::cpu::Executor::verified(Vm::new(&fprog, vec![]).unwrap(), engine());
    let mut host_out = vec![0x5au8; (n * 8) as usize];
    let t0 = Instant::now();
    for i in 0..n as usize {
        fvm.run_job(
            &host_in[i * 64..(i + 1) * 64],
            &mut host_out[i * 8..(i + 1) * 8],
            i as u64,
            n,
            args,
            &mut env,
        )
        .unwrap();
    }
    let loop_s = t0.elapsed().as_secs_f64();
    let svc_out = c.read(&big_out, 0, n * 8).unwrap();
    assert!(svc_out == host_out, "service and in-process outputs differ");

    c.stop(false).unwrap();
    drop(c);
    let _ = svc.wait();

    let res = Results {
        engine: engine().to_string(),
        date: cmd(&["date", "-u", "+%Y-%m-%dT%H:%M:%SZ"]),
        commit: cmd(&["git", "rev-parse", "--short", "HEAD"]),
        host: format!(
            "2-core dev machine, {} cores visible, no GPU",
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0)
        ),
        workers: 1,
        rtt_p50_ns: rtt_p50,
        rtt_p99_ns: rtt_p99,
        rtt_samples: n_rtt,
        socket_echo_p50_ns: echo_p50,
        socket_echo_p99_ns: echo_p99,
        inprocess_run_ns: inproc_ns,
        rtt_vs_socket_echo: echo_p50 as f64 / rtt_p50 as f64,
        throughput,
        inprocess_jobs_per_s: 1e9 / inproc_ns,
        large_records: n,
        large_service_s: service_s,
        large_loop_s: loop_s,
        large_service_records_per_s: n as f64 / service_s,
        large_loop_records_per_s: n as f64 / loop_s,
        large_service_over_loop: service_s / loop_s,
    };
    let mut md = format!(
        "# CPU-backend service, engine `{}`\n\n`BPFTIME_BENCH_ENGINE={} cargo bench -p bench --bench service`, {}, commit {}, {}; service in a \
         separate process with {} worker; the in-process baselines run on the same engine.\n\n| figure | measured | baseline (same run) | ratio |\n|---|---:|---:|---:|\n",
        res.engine, res.engine, res.date, res.commit, res.host, res.workers
    );
    md += &format!(
        "| one-record job round trip, p50 | {:.2} µs | Unix-socket echo p50 {:.2} µs | {:.2}× faster |\n",
        rtt_p50 as f64 / 1e3,
        echo_p50 as f64 / 1e3,
        res.rtt_vs_socket_echo
    );
    md += &format!(
        "| one-record job round trip, p99 | {:.2} µs | Unix-socket echo p99 {:.2} µs | {:.2}× |\n",
        rtt_p99 as f64 / 1e3,
        echo_p99 as f64 / 1e3,
        echo_p99 as f64 / rtt_p99 as f64
    );
    for t in &res.throughput {
        md += &format!(
            "| tiny jobs/s, {} client process(es), batches of 64 | {:.0} | in-process loop {:.0} | {:.2} |\n",
            t.clients, t.jobs_per_s, res.inprocess_jobs_per_s, t.ratio_to_inprocess
        );
    }
    md += &format!(
        "| filter over {}M 64-byte records | {:.2} M records/s ({:.2} s) | in-process loop {:.2} M records/s ({:.2} s) | {:.2}× the loop's time |\n",
        n / 1_000_000,
        res.large_service_records_per_s / 1e6,
        service_s,
        res.large_loop_records_per_s / 1e6,
        loop_s,
        res.large_service_over_loop
    );
    println!("{md}");
    if !quick {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
        std::fs::create_dir_all(&dir).unwrap();
        let stem = match engine() {
            jit::cpu::Engine::Interp => "service_cpu",
            jit::cpu::Engine::Jit => "service_cpu_jit",
        };
        std::fs::write(
            dir.join(format!("{stem}.json")),
            serde_json::to_string_pretty(&res).unwrap() + "\n",
        )
        .unwrap();
        std::fs::write(dir.join(format!("{stem}.md")), md).unwrap();
    }
}
