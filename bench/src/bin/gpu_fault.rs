//! Issue 18 row e on the device: time from a GPU fault to the next job served, with the
//! warm standby worker (`CudaConfig::warm_standby`) and, as the baseline in the same run,
//! without it (a new worker process: context, runtime compile, module load, launch).
//!
//! Each round injects a fault (`job_flags::INJECT_FAULT`: the GPU runtime executes `trap`
//! on that job, which kills the worker's context), then submits an ordinary one-record job
//! at once and times it from the moment the faulting job's completion came back (the
//! service ends it with `DEVICE_FAULT` as soon as it sees the fault). Checks: the faulting
//! job ends `DEVICE_FAULT`, every job after it completes with the right result, and the
//! restart used the standby when there was one.
//!
//! ```text
//! OUT=dir cargo run --release -p bench --bin gpu_fault   # needs a CUDA GPU
//! ```
//! Writes `$OUT/gpu_fault.json` and prints it.

use host::client::{Client, Job};
use host::service::{BackendChoice, Service, ServiceConfig};
use serde_json::{Value, json};
use shm_maps::RegionConfig;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
const ROUNDS: usize = 5;

/// `r0 = *(u64 *)data + 1`, after the bounds check.
fn tiny() -> Vec<u8> {
    let text = "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr4 = r2\nr4 += 8\n\
                if r4 > r3 goto short\nr0 = *(u64 *)(r2 + 0)\nr0 += 1\nexit\nshort:\nr0 = 0\nexit\n";
    ebpf::isa::insns_to_bytes(&ebpf::asm::assemble(text).expect("asm"))
}

fn gpu(svc: &Service, key: &str) -> Value {
    svc.status()
        .gpu
        .as_ref()
        .and_then(|g| g.get(key).cloned())
        .unwrap_or(Value::Null)
}

/// One configuration: `ROUNDS` faults, each followed at once by an ordinary job.
fn rounds(warm: bool) -> Value {
    let name = format!("bpftime-gpufault-{}-{warm}", std::process::id());
    let svc = Service::start(ServiceConfig {
        name: name.clone(),
        backend: BackendChoice::Cuda,
        workers: 1,
        mode: 0o600,
        recover: true,
        region: RegionConfig {
            arena_size: 64 << 20,
            ..RegionConfig::default()
        },
        metrics: None,
        max_insns: 1_000_000,
        engine: jit::cpu::Engine::default(),
        cuda: device::cuda::CudaConfig {
            device_arena: 64 << 20,
            allow_fault_injection: true,
            warm_standby: warm,
            ..Default::default()
        },
        devices: Vec::new(),
    })
    .expect("the CUDA service starts");
    let mut c = Client::connect(&name).expect("connect");
    let id = c
        .load_bytes("tiny.bin", &tiny(), Some("tiny"))
        .expect("load")
        .id;
    let inp = c.alloc(64).expect("alloc");
    c.write(&inp, 0, &41u64.to_le_bytes()).expect("write");
    let ok_job = Job::new(id, 1).input(&inp, 8);
    let mut out = Vec::new();
    let mut pass = true;
    for round in 0..ROUNDS {
        // A warm run waits for its standby to be ready, as a service at rest would have.
        let t0 = Instant::now();
        while warm && gpu(&svc, "standby_ready") != Value::Bool(true) && t0.elapsed() < T {
            std::thread::sleep(Duration::from_millis(20));
        }
        let standby_wait_ms = t0.elapsed().as_secs_f64() * 1e3;
        for _ in 0..100 {
            let r = c.run(&ok_job, T).expect("warm-up job");
            pass &= r.ok() && r.r0 == 42;
        }
        let mut bad = ok_job;
        bad.desc_mut().flags |= shm_maps::job_flags::INJECT_FAULT;
        let t_submit = Instant::now();
        let fault = c.run(&bad, T).expect("the faulting job completes");
        let t_fault = Instant::now();
        let next = c.run(&ok_job, T).expect("the next job completes");
        let next_ms = t_fault.elapsed().as_secs_f64() * 1e3;
        let mut after_ok = 0;
        for _ in 0..100 {
            let r = c.run(&ok_job, T).expect("job after");
            after_ok += (r.ok() && r.r0 == 42) as u32;
        }
        let restart_ms = gpu(&svc, "last_restart_ms");
        let restart_warm = gpu(&svc, "last_restart_warm");
        let ok = fault.status == shm_maps::status::DEVICE_FAULT
            && next.ok()
            && next.r0 == 42
            && after_ok == 100
            && (!warm || restart_warm == Value::Bool(true));
        pass &= ok;
        eprintln!(
            "warm {warm} round {round}: fault seen after {:.1} ms, next job served {next_ms:.1} ms \
             after the fault's completion (restart {restart_ms} ms, warm {restart_warm}) {}",
            (t_fault - t_submit).as_secs_f64() * 1e3,
            if ok { "ok" } else { "FAIL" }
        );
        out.push(json!({
            "fault_job_status": fault.status,
            "fault_job_ms": (t_fault - t_submit).as_secs_f64() * 1e3,
            "next_job_after_fault_ms": next_ms,
            "service_restart_ms": restart_ms,
            "restart_used_standby": restart_warm,
            "standby_wait_ms": standby_wait_ms,
            "jobs_ok_after": after_ok,
            "pass": ok,
        }));
    }
    let st = svc.status();
    svc.stop(false);
    let mut next: Vec<f64> = out
        .iter()
        .filter_map(|r| r["next_job_after_fault_ms"].as_f64())
        .collect();
    next.sort_by(f64::total_cmp);
    json!({
        "warm_standby": warm,
        "rounds": out,
        "next_job_after_fault_ms_median": next[next.len() / 2],
        "next_job_after_fault_ms_max": next[next.len() - 1],
        "gpu": st.gpu,
        "pass": pass,
    })
}

fn main() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BPFTIME_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let out_dir = std::env::var("OUT").unwrap_or_else(|_| "/tmp/gpu_fault".into());
    std::fs::create_dir_all(&out_dir).expect("out dir");
    let warm = rounds(true);
    let cold = rounds(false);
    let ratio = cold["next_job_after_fault_ms_median"]
        .as_f64()
        .unwrap_or(f64::NAN)
        / warm["next_job_after_fault_ms_median"]
            .as_f64()
            .unwrap_or(f64::NAN);
    let pass = warm["pass"] == Value::Bool(true) && cold["pass"] == Value::Bool(true);
    let j = json!({
        "what": "issue 18 row e: GPU fault -> next job served, warm standby vs a new worker",
        "target_ms": 100.0,
        "warm": warm,
        "cold_baseline": cold,
        "cold_over_warm_median": ratio,
        "pass": pass,
    });
    let text = serde_json::to_string_pretty(&j).expect("json");
    std::fs::write(format!("{out_dir}/gpu_fault.json"), &text).expect("write");
    println!("{text}");
    if !pass {
        eprintln!("FAIL: a correctness check failed (see pass fields)");
        std::process::exit(1);
    }
}
