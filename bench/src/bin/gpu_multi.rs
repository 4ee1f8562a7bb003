//! `gpu_multi`: the persistent service on several GPUs (`run --devices`), on a machine with
//! two or more. Writes `$OUT/gpu_multi.json` and `$OUT/gpu_multi.md`.
//!
//! | part | what | baseline in the same run |
//! |------|------|--------------------------|
//! | scaling | a compute-bound job mix (64 jobs of 65,536 records, a 64-bit LCG iterated `ITERS` times per record), submitted at once, jobs/s | the same mix on GPU 0 alone, and on GPU 1 alone (target: 2 GPUs ≥ 1.8× one) |
//! | routing | jobs naming a GPU run there; unnamed jobs split by load | — |
//! | maps | `job_counter` (atomic adds on a shared array in host memory): exact where the GPUs have native host atomics, refused at load where they do not; `device` placement of the shared array refused; `thread_count` (a per-thread array, placed per GPU): the sum of every GPU's value sets equals the records run | — |
//! | tiers | a job input buffer in a latency-only emulated tier (`cxl:20000`): one-record jobs on each GPU pay the 20 µs; a capped placement is refused | the same jobs on a local buffer, on the same GPU |
//! | fault | a fault on GPU 1 ends only GPU 1's job; GPU 0's running job finishes with correct results; GPU 1 serves again | — |
//!
//! `BPFTIME_MULTI_PARTS=routing,tiers` runs only those parts (all by default).
//! Every record's result of a sample (one in 1,024) is checked against the same LCG computed
//! here. The run exits with status 1 when any check fails.
//!
//! `BPFTIME_SUPER_BIN` names the binary that runs `gpu-worker`; `BPFTIME_JOB_COUNTER` and
//! `BPFTIME_THREAD_COUNT` the clang-built `tests/programs/{job_counter,thread_count}.bpf.o`
//! (the maps part is skipped, and says so, without them).

use host::client::{Client, Job, JobResult, Wait};
use host::service::{BackendChoice, Service, ServiceConfig};
use serde_json::{Value, json};
use shm_maps::RegionConfig;
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(120);
const A: u64 = 6_364_136_223_846_793_005;
const C: u64 = 1_442_695_040_888_963_407;
const JOBS: usize = 64;
const RECORDS: u64 = 1 << 16;

/// r0 = the record's u64, put through `x = x * A + C` `iters` times (compute-bound: one
/// 8-byte load per record).
fn lcg(iters: u32) -> Vec<u8> {
    let text = format!(
        "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr4 = r2\nr4 += 8\nif r4 > r3 goto short\n\
         r0 = *(u64 *)(r2 + 0)\nr6 = {A:#x} ll\nr7 = {C:#x} ll\nr5 = 0\n\
         loop:\nr0 *= r6\nr0 += r7\nr5 += 1\nif r5 < {iters} goto loop\nexit\n\
         short:\nr0 = 0\nexit\n"
    );
    ebpf::isa::insns_to_bytes(&ebpf::asm::assemble(&text).expect("assembles"))
}

/// The reference: the same LCG on the CPU.
fn lcg_ref(x: u64, iters: u32) -> u64 {
    (0..iters).fold(x, |x, _| x.wrapping_mul(A).wrapping_add(C))
}

fn input(i: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555
}

fn config(name: &str, devices: Vec<i32>) -> ServiceConfig {
    ServiceConfig {
        name: name.into(),
        backend: BackendChoice::Cuda,
        workers: 1,
        mode: 0o600,
        recover: false,
        region: RegionConfig {
            arena_size: 256 << 20,
            queue_capacity: 1024,
            ..RegionConfig::default()
        },
        metrics: None,
        max_insns: 100_000_000,
        engine: jit::cpu::Engine::default(),
        cuda: device::cuda::CudaConfig {
            device_arena: 64 << 20,
            allow_fault_injection: true,
            ..Default::default()
        },
        devices,
    }
}

struct Running {
    svc: Arc<Service>,
    name: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.svc.stop(true);
    }
}

fn start(tag: &str, devices: Vec<i32>) -> Running {
    let name = format!("bpftime-multi-{}-{tag}", std::process::id());
    let svc = Service::start(config(&name, devices.clone()))
        .unwrap_or_else(|e| panic!("the service on GPUs {devices:?} starts: {e}"));
    Running { svc, name }
}

/// Runs the job mix on a service; returns `(jobs/s, records checked, mismatches, jobs per
/// GPU, seconds)`.
fn mix(r: &Running, iters: u32) -> Value {
    let mut c = Client::connect(&r.name).expect("connect");
    let p = c
        .load_bytes("lcg.bin", &lcg(iters), Some("lcg"))
        .expect("load");
    // The first native generation, so that the timed jobs run JIT code on every GPU.
    r.svc.cuda_swap_now().expect("cuda").expect("generation");
    let inp = c.alloc(RECORDS * 8).unwrap();
    let data: Vec<u8> = (0..RECORDS).flat_map(|i| input(i).to_le_bytes()).collect();
    c.write(&inp, 0, &data).unwrap();
    let results: Vec<_> = (0..JOBS).map(|_| c.alloc(RECORDS * 8).unwrap()).collect();
    let jobs: Vec<Job> = results
        .iter()
        .map(|b| Job::new(p.id, RECORDS).input(&inp, 8).results(b))
        .collect();
    // Warm-up: one job per GPU.
    for d in 0..c.devices() {
        let w = c.run(&jobs[0].on_device(d), T).expect("warm-up");
        assert!(w.ok(), "warm-up on GPU {d}: {:?}", w.error);
    }
    let t = Instant::now();
    let tickets = c.submit_batch(&jobs, Wait::Block(T)).expect("submit");
    let done: Vec<JobResult> = tickets
        .into_iter()
        .map(|tk| c.wait(tk, T).expect("wait"))
        .collect();
    let secs = t.elapsed().as_secs_f64();
    let mut per_gpu = vec![0u64; c.devices() as usize];
    let failed = done.iter().filter(|r| !r.ok()).count();
    for r in &done {
        per_gpu[r.device as usize] += 1;
    }
    let (mut checked, mut mismatches) = (0u64, 0u64);
    for b in &results {
        let got = c.read(b, 0, RECORDS * 8).unwrap();
        for i in (0..RECORDS).step_by(1024) {
            let g = u64::from_le_bytes(got[i as usize * 8..i as usize * 8 + 8].try_into().unwrap());
            checked += 1;
            mismatches += (g != lcg_ref(input(i), iters)) as u64;
        }
    }
    json!({"jobs_per_s": JOBS as f64 / secs, "records_per_s": (JOBS as u64 * RECORDS) as f64 / secs,
           "seconds": secs, "jobs_per_gpu": per_gpu, "failed_jobs": failed,
           "checked": checked, "mismatches": mismatches})
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let out = std::env::var("OUT").unwrap_or_else(|_| "/tmp/gpu_multi".into());
    std::fs::create_dir_all(&out).expect("out dir");
    let iters: u32 = std::env::var("BPFTIME_MULTI_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let gpus = device::cuda::Gpu::count();
    let mut res = serde_json::Map::new();
    res.insert(
        "run".into(),
        json!({"gpus": gpus, "iters": iters, "jobs": JOBS, "records_per_job": RECORDS,
               "driver": std::fs::read_to_string("/sys/module/nvidia/version").map(|v| v.trim().to_string()).unwrap_or_else(|_| "?".into()),
               "commit": std::env::var("BPFTIME_COMMIT").unwrap_or_else(|_| "unknown".into()),
               "date": std::process::Command::new("date").arg("-u").arg("+%Y-%m-%d").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default()}),
    );
    let save = |res: &serde_json::Map<String, Value>| {
        let _ = std::fs::write(
            format!("{out}/gpu_multi.json"),
            serde_json::to_string_pretty(&Value::Object(res.clone())).unwrap_or_default(),
        );
    };
    if gpus < 2 {
        eprintln!("gpu_multi needs two GPUs; this machine has {gpus}");
        res.insert("skipped".into(), json!(format!("{gpus} GPU(s)")));
        save(&res);
        std::process::exit(2);
    }
    let mut ok = true;
    let parts = std::env::var("BPFTIME_MULTI_PARTS").ok();
    let want = |p: &str| {
        parts
            .as_deref()
            .is_none_or(|l| l.split(',').any(|x| x == p))
    };

    let both_run;
    if want("scaling") {
        eprintln!("== scaling: one GPU, then the other, then both");
        let one0 = mix(&start("g0", vec![0]), iters);
        let one1 = mix(&start("g1", vec![1]), iters);
        both_run = start("g01", vec![0, 1]);
        let both = mix(&both_run, iters);
        let ratio = both["jobs_per_s"].as_f64().unwrap_or(0.0)
            / one0["jobs_per_s"].as_f64().unwrap_or(f64::NAN);
        for m in [&one0, &one1, &both] {
            ok &= m["mismatches"] == 0 && m["failed_jobs"] == 0;
        }
        res.insert(
            "scaling".into(),
            json!({"gpu0": one0, "gpu1": one1, "both": both, "ratio_both_over_gpu0": ratio, "target": 1.8}),
        );
        save(&res);
    } else {
        both_run = start("g01", vec![0, 1]);
    }

    if want("routing") {
        eprintln!("== routing and status on two GPUs");
        let mut c = Client::connect(&both_run.name).expect("connect");
        let p = c.load_bytes("lcg1.bin", &lcg(1), Some("lcg1")).unwrap();
        let b = c.alloc(8).unwrap();
        c.write(&b, 0, &5u64.to_le_bytes()).unwrap();
        let mut named = Vec::new();
        for d in [1u32, 0, 1, 0] {
            let r = c
                .run(&Job::new(p.id, 1).input(&b, 8).on_device(d), T)
                .unwrap();
            named.push(json!({"asked": d, "ran_on": r.device, "ok": r.ok(), "r0_ok": r.r0 == lcg_ref(5, 1)}));
            ok &= r.ok() && r.device == d && r.r0 == lcg_ref(5, 1);
        }
        let st = both_run.svc.status();
        let queues: Vec<Value> = st
            .queues
            .iter()
            .map(|q| json!({"queue": q.queue, "device": q.device, "submitted": q.submitted, "done": q.done,
                             "load": q.load, "name": q.gpu.as_ref().and_then(|g| g.get("device").cloned())}))
            .collect();
        ok &= st.queues.len() == 2;
        res.insert(
            "routing".into(),
            json!({"named": named, "status_queues": queues}),
        );
        save(&res);
    }

    if want("tiers") {
        eprintln!("== tiers: a job buffer in an emulated tier on two GPUs");
        let v = tiers_check(&both_run);
        ok &= v["pass"] == true;
        res.insert("tiers".into(), v);
        save(&res);
    }

    if want("maps") {
        eprintln!("== maps: a shared array and a per-thread array on two GPUs");
        match (
            std::env::var_os("BPFTIME_JOB_COUNTER"),
            std::env::var_os("BPFTIME_THREAD_COUNT"),
        ) {
            (Some(jc), Some(tc)) => {
                let v = maps_check(&both_run, jc.as_ref(), tc.as_ref());
                ok &= v["pass"] == true;
                res.insert("maps".into(), v);
            }
            _ => {
                res.insert(
                "maps".into(),
                json!({"skipped": "BPFTIME_JOB_COUNTER and BPFTIME_THREAD_COUNT (tests/programs/{job_counter,thread_count}.bpf.o) not given"}),
            );
            }
        }
        save(&res);
    }

    if want("fault") {
        eprintln!("== fault on GPU 1 while GPU 0 runs");
        let mut c = Client::connect(&both_run.name).expect("connect");
        let p = c.load_bytes("lcgf.bin", &lcg(iters), Some("lcgf")).unwrap();
        let tiny = c.load_bytes("lcgt.bin", &lcg(1), Some("lcgt")).unwrap();
        both_run
            .svc
            .cuda_swap_now()
            .expect("cuda")
            .expect("generation");
        let n = RECORDS;
        let inp = c.alloc(n * 8).unwrap();
        let data: Vec<u8> = (0..n).flat_map(|i| input(i).to_le_bytes()).collect();
        c.write(&inp, 0, &data).unwrap();
        let out_b = c.alloc(n * 8).unwrap();
        let long: Vec<_> = (0..4)
            .map(|_| {
                c.submit(
                    &Job::new(p.id, n)
                        .input(&inp, 8)
                        .results(&out_b)
                        .on_device(0),
                    Wait::Block(T),
                )
                .unwrap()
            })
            .collect();
        let b = c.alloc(8).unwrap();
        let mut bad = Job::new(tiny.id, 1).input(&b, 8).on_device(1);
        bad.desc_mut().flags |= shm_maps::job_flags::INJECT_FAULT;
        let fr = c.run(&bad, T).unwrap();
        let long_ok: Vec<bool> = long
            .into_iter()
            .map(|t| {
                c.wait(t, T)
                    .map(|r| r.ok() && r.device == 0)
                    .unwrap_or(false)
            })
            .collect();
        let got = c.read(&out_b, 0, n * 8).unwrap();
        let wrong = (0..n)
            .step_by(997)
            .filter(|&i| {
                u64::from_le_bytes(got[i as usize * 8..i as usize * 8 + 8].try_into().unwrap())
                    != lcg_ref(input(i), iters)
            })
            .count();
        // GPU 1 comes back.
        let mut again = None;
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) {
            let r = c
                .run(&Job::new(tiny.id, 1).input(&b, 8).on_device(1), T)
                .unwrap();
            if r.ok() {
                again = Some((t.elapsed().as_secs_f64() * 1e3, r.device));
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let pass = fr.status == shm_maps::status::DEVICE_FAULT
            && long_ok.iter().all(|x| *x)
            && wrong == 0
            && again.is_some_and(|(_, d)| d == 1);
        ok &= pass;
        res.insert(
            "fault".into(),
            json!({"fault_status": fr.status, "fault_error": fr.error, "gpu0_jobs_ok": long_ok,
                   "gpu0_wrong_records": wrong, "gpu1_back_after_ms": again.map(|a| a.0), "pass": pass}),
        );
    }
    drop(both_run);
    res.insert("pass".into(), json!(ok));
    save(&res);
    let md = report(&Value::Object(res.clone()));
    let _ = std::fs::write(format!("{out}/gpu_multi.md"), &md);
    println!("{md}");
    if !ok {
        eprintln!("FAILED: a multi-GPU check failed (see gpu_multi.json)");
        std::process::exit(1);
    }
}

/// The tiers part: a one-record job's round trip on each GPU from a buffer at `cxl:20000`
/// against a local one (medians of 100 each, alternating), and the refusal of a capped
/// placement on two GPUs (each GPU's link word would give it the whole cap).
fn tiers_check(r: &Running) -> Value {
    let mut c = Client::connect(&r.name).expect("connect");
    let p = c
        .load_bytes("lcg_tier.bin", &lcg(1), Some("lcg_tier"))
        .unwrap();
    let local = c.alloc(8).unwrap();
    let slow = c.alloc_placed(8, Some("cxl:20000")).unwrap();
    for b in [&local, &slow] {
        c.write(b, 0, &5u64.to_le_bytes()).unwrap();
    }
    let mut per_gpu = Vec::new();
    let mut pass = slow.tier_slot != 0;
    for d in [0u32, 1] {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..100 {
            for (buf, times) in [(&local, &mut a), (&slow, &mut b)] {
                let t = Instant::now();
                let res = c
                    .run(&Job::new(p.id, 1).input(buf, 8).on_device(d), T)
                    .unwrap();
                times.push(t.elapsed().as_secs_f64() * 1e6);
                pass &= res.ok() && res.device == d && res.r0 == lcg_ref(5, 1);
            }
        }
        a.sort_by(f64::total_cmp);
        b.sort_by(f64::total_cmp);
        let added = b[50] - a[50];
        pass &= (added / 20.0 - 1.0).abs() <= 0.1;
        per_gpu.push(
            json!({"gpu": d, "local_p50_us": a[50], "tiered_p50_us": b[50], "added_us": added}),
        );
    }
    let refused = c
        .alloc_placed(8, Some("cxl:0:16"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    pass &= refused.contains("caps a link");
    let _ = c.free(local);
    let _ = c.free(slow);
    json!({"placement": "cxl:20000", "tier_slot": slow.tier_slot, "per_gpu": per_gpu,
           "capped_refused": refused,
           "target": "added latency = 20 µs ± 10% on each GPU; a cap refused", "pass": pass})
}

/// Sum of every u64 in a dump's values, and the byte length of one value.
fn dump_sum(dump: &host::protocol::MapDump) -> (u64, usize) {
    let mut total = 0u64;
    let mut len = 0;
    for (_, v) in &dump.entries {
        let bytes = host::hex::decode(v).unwrap_or_default();
        len = bytes.len();
        total += bytes
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
            .sum::<u64>();
    }
    (total, len)
}

/// Maps on two GPUs: `job_counter`'s shared counter (atomic adds on host memory) is
/// exact where the GPUs have native host atomics and refused at load where they do not;
/// `device` placement of a shared map is refused; `thread_count`'s per-thread array,
/// placed per GPU, sums to the records run.
fn maps_check(r: &Running, job_counter: &std::path::Path, thread_count: &std::path::Path) -> Value {
    let mut c = Client::connect(&r.name).expect("connect");
    let native: Vec<bool> = r
        .svc
        .status()
        .queues
        .iter()
        .map(|q| {
            q.gpu
                .as_ref()
                .and_then(|g| g["host_native_atomics"].as_bool())
                .unwrap_or(false)
        })
        .collect();
    let all_native = native.iter().all(|x| *x);
    let placed_refusal = c
        .load_file_placed(
            job_counter,
            None,
            Some("jc_bad"),
            &["counts=device".to_string()],
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    let n = 20_000u64;
    let b = c.alloc(8 * n).unwrap();
    let run8 = |c: &mut Client, id: u32| -> ([u64; 2], bool) {
        let job = Job::new(id, n).input(&b, 8);
        let tickets = c.submit_batch(&[job; 8], Wait::Block(T)).unwrap();
        let mut per_gpu = [0u64; 2];
        let mut all_ok = true;
        for t in tickets {
            let r = c.wait(t, T).unwrap();
            all_ok &= r.ok();
            per_gpu[r.device as usize] += 1;
        }
        (per_gpu, all_ok)
    };
    let (shared, shared_ok) = match c.load_file_as(job_counter, None, Some("jc")) {
        Ok(p) => {
            let (per_gpu, jobs_ok) = run8(&mut c, p.id);
            let (count, _) = dump_sum(&c.map_dump("jc:counts").expect("dump counts"));
            (
                json!({"loaded": true, "count": count, "jobs_per_gpu": per_gpu}),
                all_native && jobs_ok && count == 8 * n,
            )
        }
        Err(e) => {
            let e = e.to_string();
            let ok = !all_native && e.contains("not atomic with one another");
            (json!({"loaded": false, "refused": e}), ok)
        }
    };
    let p = c
        .load_file_as(thread_count, None, Some("tc"))
        .expect("load thread_count");
    let (per_gpu, jobs_ok) = run8(&mut c, p.id);
    let (sum, value_bytes) = dump_sum(&c.map_dump("tc:per_thread").expect("dump per_thread"));
    let value_sets = r.svc.status().workers;
    let pass = shared_ok
        && placed_refusal.contains("only per-thread arrays")
        && jobs_ok
        && sum == 8 * n
        && value_bytes == 2 * value_sets * 8
        && per_gpu[0] > 0
        && per_gpu[1] > 0;
    json!({"host_native_atomics": native, "device_placement_refused": placed_refusal,
           "job_counter": shared, "records": 8 * n, "per_thread_sum": sum,
           "per_thread_value_bytes": value_bytes, "value_sets_per_gpu": value_sets,
           "jobs_per_gpu": per_gpu, "pass": pass})
}

fn report(j: &Value) -> String {
    let run = &j["run"];
    let s = &j["scaling"];
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let mut md = format!(
        "# The persistent service on several GPUs (`run --devices`)\n\n| | |\n|---|---|\n| GPUs | {} |\n| driver | {} |\n| date | {} |\n| commit | `{}` |\n| job mix | {} jobs × {} records, LCG × {} per record |\n\n",
        run["gpus"],
        run["driver"].as_str().unwrap_or("?"),
        run["date"].as_str().unwrap_or("?"),
        run["commit"].as_str().unwrap_or("?"),
        run["jobs"],
        run["records_per_job"],
        run["iters"]
    );
    if !s.is_null() {
        md.push_str("| service | jobs/s | records/s | jobs per GPU | sampled records wrong |\n|---|---|---|---|---|\n");
        for (label, k) in [
            ("GPU 0 alone", "gpu0"),
            ("GPU 1 alone", "gpu1"),
            ("GPUs 0 and 1", "both"),
        ] {
            let m = &s[k];
            md.push_str(&format!(
                "| {label} | {:.1} | {:.3e} | {} | {} of {} |\n",
                f(&m["jobs_per_s"]),
                f(&m["records_per_s"]),
                m["jobs_per_gpu"],
                m["mismatches"],
                m["checked"]
            ));
        }
        md.push_str(&format!(
            "\nTwo GPUs over GPU 0 alone: **{:.2}×** (target ≥ 1.8×).\n\n",
            f(&s["ratio_both_over_gpu0"])
        ));
    }
    md.push_str(&format!(
        "Routing: {}\n\nMaps: {}\n\nTiers: {}\n\nFault isolation: {}\n\nAll checks: **{}**\n",
        j["routing"],
        j["maps"],
        j["tiers"],
        j["fault"],
        if j["pass"].as_bool() == Some(true) {
            "pass"
        } else {
            "FAIL"
        }
    ));
    md
}
