//! `gpu_service`: the CUDA backend's benchmarks a–h and its GPU checks, in one run on a GPU
//! machine. Writes `$OUT/gpu_service.json` and `$OUT/gpu_service.md` (copied to
//! `bench/results/` by hand with the run's device, driver, date and commit).
//!
//! | # | figure | baseline measured in the same run |
//! |---|--------|-----------------------------------|
//! | a | one-record job round trip from another process, p50/p99 | the bare cross-process mailbox of GPU-FACTS §1 (the probe's two loads a poll; and one 16-byte load a poll, the fastest there); empty kernel launch + sync; one-node CUDA graph launch + sync |
//! | b | tiny jobs/s, 1, 2, 4 and 8 client processes, batches of 64 | — (target 5M/s with 4) |
//! | c | memory-bound job over a 1 GiB device-resident buffer, GB/s | device-to-device copy, bytes read + written |
//! | d | the same job over 1 GiB in the shared (pinned) arena | host-to-device copy from pinned memory |
//! | e | `load` returned → first job of the new program done | — (target 1 ms) |
//! | f | native generation swaps: the time no backend takes jobs (the host serves the queue during the GPU's pause unless `BPFTIME_GPU_HOST_GAPS=0`), p50 and max; the GPU's own pause | the client's round trips in flight during a pause, and overall |
//! | g | 1,000 `replace` calls under 4 client processes: lost / duplicated / wrong-version jobs | — (target 0) |
//! | h | host mailbox latency: trace record written on the GPU → read by the host thread | — (target 10 µs) |
//! | t | a map in an emulated tier (cxl-sim, issue 15): added latency of a one-record job, a capped link's pace | the same program on a local map |
//! | u | job input and output buffers in an emulated tier (issue 15): the same figures, each record fetched through its input buffer's tier; a 4,096-record job's outputs through a capped link | the same program on a local buffer |
//!
//! Checks (pass/fail in the JSON): a 100,000-record job's outputs equal the CPU
//! interpreter's; a fault injected on the GPU completes the faulting job with
//! `DEVICE_FAULT`, every other job completes, and the service serves again afterwards.
//!
//! The service runs in this process; clients are child processes of this binary
//! (`BPFTIME_GPU_ROLE`). The GPU worker is `$BPFTIME_SUPER_BIN gpu-worker`.
//!
//! `BPFTIME_BENCH_ROWS=a,b` runs only those rows (the checks always run). The run ends
//! with a markdown table of every row next to its baseline (`$OUT/gpu_service.md`, with the
//! device, driver, date and `BPFTIME_COMMIT`), and exits with status 1 when a correctness
//! check failed.

use device::cuda::baseline::MailboxPoll;
use host::client::{Client, Job, JobResult, Wait};
use host::service::{BackendChoice, Service, ServiceConfig};
use serde_json::{Value, json};
use shm_maps::RegionConfig;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROLE: &str = "BPFTIME_GPU_ROLE";
const T: Duration = Duration::from_secs(60);
const GIB: u64 = 1 << 30;

fn asm(s: &str) -> Vec<u8> {
    ebpf::isa::insns_to_bytes(&ebpf::asm::assemble(s).expect("assembles"))
}

/// r0 = first u64 of the record + 1 (checked access).
fn tiny() -> Vec<u8> {
    asm(
        "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr4 = r2\nr4 += 8\nif r4 > r3 goto short\n\
         r0 = *(u64 *)(r2 + 0)\nr0 += 1\nexit\nshort:\nr0 = 0\nexit\n",
    )
}

/// r0 = a constant: the versions of `replace`.
fn constant(k: u32) -> Vec<u8> {
    asm(&format!("r0 = {k}\nexit\n"))
}

/// Memory-bound: r0 = sum of the eight u64 words of a 64-byte record.
fn sum64() -> Vec<u8> {
    let mut s = String::from(
        "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr4 = r2\nr4 += 64\nif r4 > r3 goto bad\nr0 = 0\n",
    );
    for i in 0..8 {
        s.push_str(&format!("r5 = *(u64 *)(r2 + {})\nr0 += r5\n", 8 * i));
    }
    s.push_str("exit\nbad:\nr0 = 0\nexit\n");
    asm(&s)
}

/// Reads every word of a job's ctx: r0 = (in[0] * arg0 ^ arg1) - arg2 + arg3 + index + n,
/// also stored in the output record when the job has one (the one-record check).
fn ctx_mix() -> Vec<u8> {
    asm(
        "r2 = *(u64 *)(r1 + 0)\nr3 = *(u64 *)(r1 + 8)\nr4 = r2\nr4 += 8\nif r4 > r3 goto bad\n\
         r5 = *(u64 *)(r2 + 0)\nr6 = *(u64 *)(r1 + 48)\nr5 *= r6\nr6 = *(u64 *)(r1 + 56)\nr5 ^= r6\n\
         r6 = *(u64 *)(r1 + 64)\nr5 -= r6\nr6 = *(u64 *)(r1 + 72)\nr5 += r6\n\
         r6 = *(u64 *)(r1 + 32)\nr5 += r6\nr6 = *(u64 *)(r1 + 40)\nr5 += r6\n\
         r7 = *(u64 *)(r1 + 16)\nr8 = *(u64 *)(r1 + 24)\nr9 = r7\nr9 += 8\nif r9 > r8 goto noout\n\
         *(u64 *)(r7 + 0) = r5\nnoout:\nr0 = r5\nexit\nbad:\nr0 = 0\nexit\n",
    )
}

/// Calls trace_printk("hi %d\n", index) from the stack.
fn traced() -> Vec<u8> {
    asm(
        "r2 = 0x0a642520\nr2 <<= 16\nr2 |= 0x6968\n*(u64 *)(r10 - 8) = r2\nr3 = *(u64 *)(r1 + 32)\n\
         r1 = r10\nr1 += -8\nr2 = 8\ncall 6\nr0 = 0\nexit\n",
    )
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 * q) as usize).min(v.len() - 1)]
}

fn client(name: &str) -> Client {
    Client::connect(name).expect("connect")
}

fn me(role: &str, name: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("exe"));
    c.env(ROLE, role)
        .env("BPFTIME_GPU_NAME", name)
        .stdout(Stdio::piped());
    c
}

fn run_children(role: &str, name: &str, n: usize, extra: &[(&str, String)]) -> Vec<Value> {
    let kids: Vec<_> = (0..n)
        .map(|i| {
            let mut c = me(role, name);
            c.env("BPFTIME_GPU_INDEX", i.to_string());
            for (k, v) in extra {
                c.env(k, v);
            }
            c.spawn().expect("spawn client")
        })
        .collect();
    kids.into_iter()
        .map(|k| {
            let o = k.wait_with_output().expect("client");
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
                json!({"error": format!("client output unreadable: {e}: {}", String::from_utf8_lossy(&o.stdout))})
            })
        })
        .collect()
}

// ---------------------------------------------------------------- client roles

fn role_main(role: &str) {
    if role == "mailbox" {
        // The bare mailbox's client: no CUDA, only the shared mapping.
        let path = std::env::var("BPFTIME_GPU_MAILBOX").expect("mailbox file");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("mailbox file");
        // SAFETY: a 4096-byte file shared with the parent and the GPU; accessed through
        // atomics only.
        let m = unsafe { memmap2::MmapMut::map_mut(&f) }.expect("map the mailbox");
        let asked = std::env::var("BPFTIME_GPU_MAILBOX_POLL").unwrap_or_default();
        let poll = [MailboxPoll::Probe, MailboxPoll::OneLoad]
            .into_iter()
            .find(|p| p.name() == asked)
            .unwrap_or(MailboxPoll::Probe);
        let out = match device::cuda::baseline::mailbox_round_trips(&m, poll, 2_000, 10_000) {
            Ok(mut v) => {
                json!({"p50_us": pct(&mut v, 0.5), "p99_us": pct(&mut v, 0.99), "n": v.len()})
            }
            Err(e) => json!({"error": e}),
        };
        println!("{out}");
        return;
    }
    let name = std::env::var("BPFTIME_GPU_NAME").expect("name");
    let prog: u32 = std::env::var("BPFTIME_GPU_PROG")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut c = client(&name);
    let inp = c.alloc(64).expect("alloc");
    c.write(&inp, 0, &41u64.to_le_bytes()).unwrap();
    let job = Job::new(prog, 1).input(&inp, 8);
    let out = match role {
        "rtt" => {
            let n: usize = std::env::var("BPFTIME_GPU_N")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(10_000);
            for _ in 0..2_000 {
                c.run(&job, T).expect("warm-up job");
            }
            // BPFTIME_GPU_UNTIL: say so once warm (`PATH.ready`), then run until PATH
            // exists (n at most): row f measures round trips over all its swaps.
            let until = std::env::var("BPFTIME_GPU_UNTIL").ok();
            if let Some(u) = &until {
                std::fs::write(format!("{u}.ready"), b"").expect("ready file");
            }
            let mut lat = Vec::with_capacity(n);
            let mut queued = Vec::with_capacity(n);
            let mut run = Vec::with_capacity(n);
            let mut submit = Vec::with_capacity(n);
            let mut back = Vec::with_capacity(n);
            let mut poll = Vec::with_capacity(n);
            let mut fence = Vec::with_capacity(n);
            // BPFT_HOP_SPLIT 3 or 4 (a prelude): the hop words hold up to five 12-bit
            // fields, ns from the GPU's start of the job to steps of its run; 5 and 6: SM
            // cycles in units of 2 and 4 (runtime.cu says which steps);
            // BPFTIME_BENCH_HOP_FIELDS names them (comma-separated), or is 1 for mode 3's.
            let steps: Vec<String> = match std::env::var("BPFTIME_BENCH_HOP_FIELDS") {
                Ok(v) if v.contains(',') => v.split(',').map(str::to_string).collect(),
                Ok(_) => ["stored", "lookup", "checked", "input", "program"]
                    .map(String::from)
                    .to_vec(),
                Err(_) => Vec::new(),
            };
            let split = !steps.is_empty();
            let mut fields: Vec<Vec<f64>> = vec![Vec::new(); steps.len().min(5)];
            let mut bad = 0;
            // Round trips over 100 µs: when (CLOCK_MONOTONIC at submit) and where the time
            // went (queued: submit → started; run; finished → seen here).
            let mut slow = Vec::new();
            let now = shm_maps::region::monotonic_ns;
            // A round trip is timed as the baselines' are: one clock read before (t0) and
            // one after (t2), each counting half of itself. What one read costs here:
            let reads = 10_000;
            let c0 = now();
            for _ in 0..reads {
                std::hint::black_box(now());
            }
            let clock_read_ns = (now() - c0) as f64 / (reads + 1) as f64;
            for i in 0..n {
                if i % 256 == 0
                    && until
                        .as_ref()
                        .is_some_and(|u| std::path::Path::new(u).exists())
                {
                    break;
                }
                let t0 = now();
                let tk = c.submit(&job, Wait::Block(T)).expect("submit");
                // Off the round trip's path: the GPU's poll takes longer than this read.
                let t1 = now();
                let r = c.wait(tk, T).expect("job");
                let t2 = now();
                lat.push((t2 - t0) as f64 / 1e3);
                if *lat.last().unwrap() > 100.0 && slow.len() < 1000 {
                    slow.push(json!({"at_ns": t0, "rtt_us": lat.last(), "queued_us": r.queued_ns as f64 / 1e3,
                        "run_us": r.run_ns as f64 / 1e3, "seen_after_finish_us": (t2 as f64 - r.finished_ns as f64) / 1e3,
                        "submit_call_us": (t1 - t0) as f64 / 1e3}));
                }
                queued.push(r.queued_ns as f64 / 1e3);
                run.push(r.run_ns as f64 / 1e3);
                submit.push((t1 - t0) as f64 / 1e3);
                // Finish on the GPU (its clock, calibrated at start) to DONE seen here.
                back.push((t2 as f64 - r.finished_ns as f64) / 1e3);
                poll.push(r.gpu_hops[0] as f64 / 1e3);
                fence.push(r.gpu_hops[1] as f64 / 1e3);
                if split {
                    let w = r.gpu_hops[0] as u64 | (r.gpu_hops[1] as u64) << 32;
                    for (i, v) in fields.iter_mut().enumerate() {
                        v.push(((w >> (12 * i)) & 0xfff) as f64 / 1e3);
                    }
                }
                if !r.ok() || r.r0 != 42 {
                    bad += 1;
                }
            }
            let max = lat.iter().cloned().fold(0.0, f64::max);
            let over = |us: f64| lat.iter().filter(|l| **l > us).count();
            let (over_100us, over_1ms) = (over(100.0), over(1000.0));
            let mut out = json!({"p50_us": pct(&mut lat, 0.5), "p99_us": pct(&mut lat, 0.99), "max_us": max, "n": lat.len(), "bad": bad,
                   "over_100us": over_100us, "over_1ms": over_1ms, "slow": slow, "clock_read_ns": clock_read_ns,
                   "submit_to_gpu_start_p50_us": pct(&mut queued, 0.5), "gpu_run_p50_us": pct(&mut run, 0.5),
                   "hops_p50_us": {"submit_call": pct(&mut submit, 0.5), "gpu_poll_round_trip": pct(&mut poll, 0.5),
                       "gpu_acquire_fence": pct(&mut fence, 0.5), "gpu_finish_to_client_seen": pct(&mut back, 0.5)}});
            if split {
                for (k, v) in steps.iter().zip(fields.iter_mut()) {
                    out["gpu_run_split_p50_us"][k.as_str()] = json!(pct(v, 0.5));
                }
            }
            out
        }
        "tput" => {
            let secs: f64 = std::env::var("BPFTIME_GPU_SECS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(2.0);
            let batch = vec![job; 64];
            let mut done = 0u64;
            let mut bad = 0u64;
            let t = Instant::now();
            let mut pending = std::collections::VecDeque::new();
            while t.elapsed().as_secs_f64() < secs {
                let tickets = c.submit_batch(&batch, Wait::Block(T)).expect("submit");
                pending.push_back(tickets);
                if pending.len() >= 4 {
                    for tk in pending.pop_front().unwrap() {
                        let r = c.wait(tk, T).expect("wait");
                        bad += (!r.ok() || r.r0 != 42) as u64;
                        done += 1;
                    }
                }
            }
            for ts in pending {
                for tk in ts {
                    let r = c.wait(tk, T).expect("wait");
                    bad += (!r.ok() || r.r0 != 42) as u64;
                    done += 1;
                }
            }
            let el = t.elapsed().as_secs_f64();
            json!({"jobs": done, "secs": el, "jobs_per_s": done as f64 / el, "bad": bad})
        }
        "load" => {
            // Submit until the stop file appears; every job must complete exactly once.
            let stop = std::env::var("BPFTIME_GPU_STOP").expect("stop file");
            let mut submitted = 0u64;
            let mut completed = 0u64;
            let mut wrong = 0u64;
            let mut statuses = std::collections::BTreeMap::<i32, u64>::new();
            let mut seen = std::collections::HashSet::new();
            let mut dup = 0u64;
            let batch = vec![job; 16];
            // A job not done in 20 s is reported (and the role ends) instead of hanging the
            // run: the driver turns it into a failed check.
            let patience = Duration::from_secs(20);
            let mut stuck = None;
            'outer: while !std::path::Path::new(&stop).exists() {
                let ts = match c.submit_batch(&batch, Wait::Block(patience)) {
                    Ok(ts) => ts,
                    Err(e) => {
                        stuck = Some(format!("submit: {e}"));
                        break;
                    }
                };
                submitted += ts.len() as u64;
                for tk in ts {
                    let tag = tk.tag();
                    let r: JobResult = match c.wait(tk, patience) {
                        Ok(r) => r,
                        Err(e) => {
                            stuck = Some(format!("job tag {tag} not done: {e}"));
                            break 'outer;
                        }
                    };
                    completed += 1;
                    if !seen.insert(tag) || r.tag != tag {
                        dup += 1;
                    }
                    *statuses.entry(r.status).or_default() += 1;
                    // Programs return their version, or 42 (the tiny program).
                    if r.ok() && r.r0 != r.prog_version as u64 && r.r0 != 42 {
                        wrong += 1;
                    }
                }
            }
            json!({"submitted": submitted, "completed": completed, "duplicates": dup, "wrong_version": wrong, "stuck": stuck,
                   "statuses": statuses.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()})
        }
        other => json!({"error": format!("unknown role {other}")}),
    };
    println!("{out}");
}

// ---------------------------------------------------------------- driver

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        role_main(&role);
        return;
    }
    tracing_subscriber_init();
    let out_dir = std::env::var("OUT").unwrap_or_else(|_| "/tmp/gpu_service".into());
    std::fs::create_dir_all(&out_dir).expect("out dir");
    let mut res = serde_json::Map::new();
    let step = |s: &str| eprintln!("== {s}");
    // Results are written after every step, so a run cut short keeps what it measured.
    let save = |res: &serde_json::Map<String, Value>| {
        let _ = std::fs::write(
            format!("{out_dir}/gpu_service.json"),
            serde_json::to_string_pretty(&Value::Object(res.clone())).unwrap_or_default(),
        );
    };

    step("baselines: launch + sync, graph + sync, copy bandwidths");
    let (mut launch, mut graph) =
        device::cuda::baseline::launch_latencies(0, 5_000).expect("launch baseline");
    let (d2d, h2d) =
        device::cuda::baseline::copy_bandwidths(0, GIB as usize, 5).expect("copy baseline");
    let launch50 = pct(&mut launch, 0.5);
    let graph50 = pct(&mut graph, 0.5);
    let mailbox = bare_mailbox(MailboxPoll::Probe);
    let mailbox50 = mailbox["p50_us"].as_f64().unwrap_or(f64::NAN);
    // The fastest mailbox GPU-FACTS measured (one 16-byte load a poll): the floor of any
    // path through host memory, which row a's graph target is set against.
    let one_load = bare_mailbox(MailboxPoll::OneLoad);
    let one_load50 = one_load["p50_us"].as_f64().unwrap_or(f64::NAN);
    res.insert(
        "baseline".into(),
        json!({
        "launch_sync_p50_us": launch50, "launch_sync_p99_us": pct(&mut launch, 0.99),
        "graph_sync_p50_us": graph50, "graph_sync_p99_us": pct(&mut graph, 0.99),
        "bare_mailbox": mailbox, "bare_mailbox_one_load": one_load,
        "d2d_gbps": d2d, "h2d_gbps": h2d}),
    );
    save(&res);
    let rows = std::env::var("BPFTIME_BENCH_ROWS").ok();
    let want = |r: &str| {
        rows.as_deref()
            .is_none_or(|l| l.split(',').any(|x| x.trim() == r))
    };

    let name = format!("bpftime-gpubench-{}", std::process::id());
    let svc = Service::start(ServiceConfig {
        name: name.clone(),
        backend: BackendChoice::Cuda,
        workers: 1,
        mode: 0o600,
        recover: true,
        region: RegionConfig {
            arena_size: GIB + (512 << 20),
            max_records: 1 << 25,
            queue_capacity: 4096,
            ..RegionConfig::default()
        },
        metrics: None,
        max_insns: 1_000_000,
        engine: jit::cpu::Engine::default(),
        cuda: device::cuda::CudaConfig {
            device_arena: GIB + (64 << 20),
            allow_fault_injection: true,
            // Row f's comparison: BPFTIME_GPU_HOST_GAPS=0 leaves swaps' jobs to the GPU.
            host_gaps: std::env::var("BPFTIME_GPU_HOST_GAPS").map_or(true, |v| v != "0"),
            ..Default::default()
        },
        devices: Vec::new(),
    })
    .expect("the CUDA service starts");
    let mut c = client(&name);
    let tiny_id = c
        .load_bytes("tiny.bin", &tiny(), Some("tiny"))
        .expect("load")
        .id;
    let sum_id = c
        .load_bytes("sum64.bin", &sum64(), Some("sum64"))
        .expect("load")
        .id;
    let trace_id = c
        .load_bytes("traced.bin", &traced(), Some("traced"))
        .expect("load")
        .id;
    let mix_id = c
        .load_bytes("ctx_mix.bin", &ctx_mix(), Some("ctx_mix"))
        .expect("load")
        .id;
    let times = svc
        .cuda_swap_now()
        .expect("cuda")
        .expect("first native generation");
    res.insert(
        "first_generation".into(),
        serde_json::to_value(times).unwrap(),
    );
    save(&res);

    step(
        "check: 100,000-record jobs equal the CPU interpreter (64-byte records, and 67-byte ones, misaligned)",
    );
    {
        let n = 100_000u64;
        let buf = c.alloc(n * 64).unwrap();
        let data: Vec<u8> = (0..n * 64)
            .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
            .collect();
        c.write(&buf, 0, &data).unwrap();
        let resb = c.alloc(n * 8).unwrap();
        let prog = ebpf::elf::load(&sum64(), "sum64.bin", None).unwrap();
        let vm = ebpf::interp::Vm::new(&prog, vec![]).unwrap();
        let mut env = ebpf::interp::Env::new(0);
        let mut checks = Vec::new();
        let mut pass = true;
        // 67-byte records start at every address modulo 8: the JIT's aligned runs take the
        // byte-by-byte path for most of them. The last job runs a copy of the program loaded
        // just before, so the instant tier (the GPU's interpreter) runs it: its byte path.
        for (size, fresh) in [(64u64, false), (67, false), (67, true)] {
            let recs = n * 64 / size;
            let (id, tier) = if fresh {
                let p = c
                    .load_bytes("sum64i.bin", &sum64(), Some("sum64_instant"))
                    .expect("load");
                // Its tier as the GPU reports it (`list` asks the worker), just before.
                let tier = c
                    .list()
                    .expect("list")
                    .into_iter()
                    .find(|x| x.id == p.id)
                    .and_then(|x| x.tier)
                    .unwrap_or_default();
                (p.id, tier)
            } else {
                (sum_id, "native".to_string())
            };
            let r = c
                .run(
                    &Job::new(id, recs).input(&buf, size as u32).results(&resb),
                    T,
                )
                .unwrap();
            let got = c.read(&resb, 0, recs * 8).unwrap();
            let mut mismatch = 0u64;
            for i in 0..recs as usize {
                let rec = &data[i * size as usize..(i + 1) * size as usize];
                let want = vm
                    .run_job(rec, &mut [], i as u64, recs, [0; 4], &mut env)
                    .unwrap();
                if got[i * 8..i * 8 + 8] != want.to_le_bytes() {
                    mismatch += 1;
                }
            }
            let ok = mismatch == 0 && r.ok();
            pass &= ok;
            checks.push(
                json!({"record_bytes": size, "records": recs, "mismatches": mismatch,
                "tier_at_submit": tier, "status": r.status, "error": r.error, "pass": ok}),
            );
            if fresh {
                c.unload("sum64_instant").expect("unload");
            }
        }
        res.insert(
            "check_cpu_equal".into(),
            json!({"records": n, "jobs": checks, "pass": pass}),
        );
        save(&res);
        if !pass {
            // Nothing after this can be trusted: stop now, loudly.
            eprintln!("FAILED: a 100,000-record job differs from the CPU interpreter: {checks:?}");
            svc.stop(true);
            std::process::exit(1);
        }
        c.free(buf).unwrap();
        c.free(resb).unwrap();
    }

    step(
        "check: one-record jobs equal the CPU interpreter (inline and arena inputs, misaligned ones, output records, args)",
    );
    {
        let pass = check_one_record(&mut c, sum_id, mix_id);
        let ok = pass["pass"] == json!(true);
        res.insert("check_one_record_equal".into(), pass.clone());
        save(&res);
        if !ok {
            eprintln!("FAILED: a one-record job differs from the CPU interpreter: {pass}");
            svc.stop(true);
            std::process::exit(1);
        }
    }

    if want("a") {
        step("a: round trip from another process");
        let rtt = run_children(
            "rtt",
            &name,
            1,
            &[("BPFTIME_GPU_PROG", tiny_id.to_string())],
        )
        .remove(0);
        let p50 = rtt["p50_us"].as_f64().unwrap_or(f64::NAN);
        res.insert(
            "a_round_trip".into(),
            json!({"persistent": rtt, "bare_mailbox_p50_us": mailbox50,
            "one_load_mailbox_p50_us": one_load50, "vs_one_load_mailbox": p50 / one_load50,
            "launch_sync_p50_us": launch50, "graph_sync_p50_us": graph50,
            "vs_mailbox": p50 / mailbox50,
            "speedup_vs_launch": launch50 / p50, "speedup_vs_graph": graph50 / p50,
            "target": "p50 <= 1.15x the bare mailbox, and >= 1.5x faster than the graph launch",
            "met": p50 <= 1.15 * mailbox50 && graph50 / p50 >= 1.5}),
        );
        save(&res);
    }

    if want("b") {
        step("b: tiny-job throughput, 1, 2, 4 and 8 clients");
        let mut b = serde_json::Map::new();
        for k in [1usize, 2, 4, 8] {
            let v = run_children(
                "tput",
                &name,
                k,
                &[("BPFTIME_GPU_PROG", tiny_id.to_string())],
            );
            let total: f64 = v
                .iter()
                .map(|x| x["jobs_per_s"].as_f64().unwrap_or(0.0))
                .sum();
            b.insert(
                format!("clients_{k}"),
                json!({"jobs_per_s": total, "per_client": v}),
            );
        }
        let b4 = b["clients_4"]["jobs_per_s"].as_f64().unwrap_or(0.0);
        let g = svc.status().gpu.unwrap_or_default();
        b.insert(
            "dispatcher".into(),
            json!({"jobs_taken": g["jobs_taken"], "batches": g["batches"],
                   "mean_batch": g["jobs_taken"].as_f64().unwrap_or(0.0) / g["batches"].as_f64().unwrap_or(1.0).max(1.0)}),
        );
        b.insert("target".into(), json!(">= 5,000,000 jobs/s with 4 clients"));
        b.insert("met".into(), json!(b4 >= 5e6));
        res.insert("b_throughput".into(), Value::Object(b));
        save(&res);
    }

    if want("c") || want("d") {
        step("c, d: memory-bound job over 1 GiB, device-resident and from shared memory");
        let n = GIB / 64;
        let shm = c.alloc(GIB).unwrap();
        let chunk = 64 << 20;
        let mut last = [0u8; 64];
        for off in (0..GIB).step_by(chunk as usize) {
            let data: Vec<u8> = (off..off + chunk)
                .map(|i| (i.wrapping_mul(0x9E3779B1) >> 11) as u8)
                .collect();
            if off + chunk == GIB {
                last.copy_from_slice(&data[data.len() - 64..]);
            }
            c.write(&shm, off, &data).unwrap();
        }
        let want = (0..8).fold(0u64, |a, i| {
            a.wrapping_add(u64::from_le_bytes(
                last[i * 8..i * 8 + 8].try_into().unwrap(),
            ))
        });
        let dev = c.device_alloc(GIB).unwrap();
        c.device_copy(true, &shm, &dev, GIB).unwrap();
        let mut measure = |job: Job| {
            let mut bw = Vec::new();
            let mut ok = true;
            for i in 0..6 {
                let r = c.run(&job, T).unwrap();
                ok &= r.ok() && r.r0 == want && r.records_done == n;
                if i > 0 {
                    bw.push(GIB as f64 / r.run_ns as f64);
                }
            }
            (pct(&mut bw, 0.5), ok)
        };
        let (dev_bw, dev_ok) = measure(Job::new(sum_id, n).device_input(&dev, 64));
        let (shm_bw, shm_ok) = measure(Job::new(sum_id, n).input(&shm, 64));
        res.insert(
            "c_device_buffer".into(),
            json!({"gbps": dev_bw, "d2d_gbps": d2d, "ratio": dev_bw / d2d, "r0_correct": dev_ok,
            "target": ">= 70% of the device copy bandwidth", "met": dev_bw / d2d >= 0.7 && dev_ok}),
        );
        save(&res);
        res.insert("d_shared_buffer".into(), json!({"gbps": shm_bw, "h2d_gbps": h2d, "ratio": shm_bw / h2d, "r0_correct": shm_ok,
            "target": ">= 80% of the host-to-device bandwidth", "met": shm_bw / h2d >= 0.8 && shm_ok}));
        save(&res);
        c.device_free(dev).unwrap();
        c.free(shm).unwrap();
    }

    if want("e") {
        step("e: load returned -> first job done (instant tier)");
        let inp = c.alloc(64).unwrap();
        c.write(&inp, 0, &41u64.to_le_bytes()).unwrap();
        let mut lat = Vec::new();
        let mut ok = true;
        for i in 0..40 {
            let id = c
                .load_bytes("tiny.bin", &tiny(), Some(&format!("inst{i}")))
                .unwrap()
                .id;
            let t = Instant::now();
            let r = c.run(&Job::new(id, 1).input(&inp, 8), T).unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1e3);
            ok &= r.ok() && r.r0 == 42;
            c.unload(&format!("inst{i}")).unwrap();
        }
        let p50 = pct(&mut lat, 0.5);
        res.insert("e_load_to_first_job".into(), json!({"p50_ms": p50, "p99_ms": pct(&mut lat, 0.99), "max_ms": lat.last(), "all_correct": ok,
            "target": "<= 1 ms", "met": p50 <= 1.0 && ok}));
        save(&res);
        c.free(inp).unwrap();
    }

    if want("f") {
        step("f: native generation swap pause, with a client measuring round trips meanwhile");
        let svc2 = svc.clone();
        let until = format!("{out_dir}/stop-f");
        let _ = std::fs::remove_file(&until);
        let _ = std::fs::remove_file(format!("{until}.ready"));
        let ready = format!("{until}.ready");
        let until2 = until.clone();
        // BPFTIME_BENCH_WAIT_STANDBY=1: start only once the warm standby worker is ready
        // (its context and module load run in the background after the service starts).
        let standby = || svc.status().gpu.unwrap_or_default()["standby_ready"] == json!(true);
        if std::env::var("BPFTIME_BENCH_WAIT_STANDBY").is_ok_and(|v| v == "1") {
            let t = Instant::now();
            while !standby() && t.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let standby_at_start = standby();
        let gap_jobs_now = || {
            svc.status().gpu.unwrap_or_default()["gap_jobs"]
                .as_u64()
                .unwrap_or(0)
        };
        let gap_jobs0 = gap_jobs_now();
        let swaps = std::thread::spawn(move || {
            // The client is warm and measuring before the first swap.
            let t = Instant::now();
            while !std::path::Path::new(&ready).exists() && t.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(50));
            let mut v = Vec::new();
            for _ in 0..30 {
                let t0 = shm_maps::region::monotonic_ns();
                if let Some(Ok(t)) = svc2.cuda_swap_now() {
                    v.push((t, t0, shm_maps::region::monotonic_ns()));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(Duration::from_millis(50));
            let _ = std::fs::write(&until2, b"");
            v
        });
        let rtt = run_children(
            "rtt",
            &name,
            1,
            &[
                ("BPFTIME_GPU_PROG", tiny_id.to_string()),
                ("BPFTIME_GPU_N", "2000000".into()),
                ("BPFTIME_GPU_UNTIL", until.clone()),
            ],
        )
        .remove(0);
        let (t, windows): (Vec<_>, Vec<_>) = swaps
            .join()
            .unwrap()
            .into_iter()
            .map(|(t, a, b)| (t, (a, b)))
            .unzip();
        // Slow round trips (over 100 µs) in flight during a swap's pause: from 100 µs
        // before the old kernel's stop to the handback, which ends the swap call. The
        // rest happened away from any pause.
        let pauses: Vec<(u64, u64)> = t
            .iter()
            .zip(&windows)
            .map(|(x, (_, b))| {
                let len = x.drain_ns + x.relaunch_ns + x.start_ns + x.handback_ns + 100_000;
                (b.saturating_sub(len), *b)
            })
            .collect();
        let slow_in_pauses: Vec<f64> = rtt["slow"].as_array().map_or(Vec::new(), |s| {
            s.iter()
                .filter(|j| {
                    let at = j["at_ns"].as_u64().unwrap_or(0);
                    let end = at + (j["rtt_us"].as_f64().unwrap_or(0.0) * 1e3) as u64;
                    pauses.iter().any(|(a, b)| at <= *b && end >= *a)
                })
                .map(|j| j["rtt_us"].as_f64().unwrap_or(0.0))
                .collect()
        });
        let worst_in_pauses_us = slow_in_pauses.iter().cloned().fold(0.0, f64::max);
        let gap_jobs = gap_jobs_now() - gap_jobs0;
        let host_served = t.iter().filter(|x| x.host_served).count();
        let mut pause: Vec<f64> = t
            .iter()
            .map(|x| (x.drain_ns + x.relaunch_ns) as f64 / 1e6)
            .collect();
        let mut drain: Vec<f64> = t.iter().map(|x| x.drain_ns as f64 / 1e6).collect();
        let med = |f: fn(&device::cuda::SwapTimes) -> u64| {
            let mut v: Vec<f64> = t.iter().map(|x| f(x) as f64 / 1e6).collect();
            if v.is_empty() {
                f64::NAN
            } else {
                pct(&mut v, 0.5)
            }
        };
        let parts = json!({"unload_p50_ms": med(|x| x.unload_ns), "publish_p50_ms": med(|x| x.publish_ns),
            "launch_p50_ms": med(|x| x.launch_ns), "getfunc_p50_ms": med(|x| x.getfunc_ns), "load_library_p50_ms": med(|x| x.load_ns), "jit_p50_ms": med(|x| x.jit_ns)});
        let mut link: Vec<f64> = t.iter().map(|x| x.link_ns as f64 / 1e6).collect();
        let p50 = if pause.is_empty() {
            f64::NAN
        } else {
            pct(&mut pause, 0.5)
        };
        let max = pause.last().copied().unwrap_or(f64::NAN);
        let rtt_ok = rtt["bad"].as_u64() == Some(0);
        // With host gaps, what jobs wait for is the time nobody took them (`unserved`),
        // not the GPU's pause; without them it is the pause and the new kernel's start.
        let unserved_p50 = med(|x| x.unserved_ns);
        let unserved_max = t
            .iter()
            .map(|x| x.unserved_ns as f64 / 1e6)
            .fold(f64::NAN, f64::max);
        let g = svc.status().gpu.unwrap_or_default();
        res.insert(
            "f_swap_pause".into(),
            json!({"swaps": t.len(), "pause_p50_ms": p50, "pause_max_ms": max,
            "host_gaps": host_served > 0, "standby_ready_at_start": standby_at_start, "swaps_host_served": host_served, "jobs_run_by_the_host_in_gaps": gap_jobs,
            "unserved_p50_ms": unserved_p50, "unserved_max_ms": unserved_max,
            "slow_round_trips_in_pauses": slow_in_pauses.len(), "worst_round_trip_in_pauses_us": worst_in_pauses_us,
            "swap_calls_ns": windows.iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>(),
            "handback_p50_ms": med(|x| x.handback_ns), "kernel_start_p50_ms": med(|x| x.start_ns),
            "unloaded_in_pauses": t.iter().map(|x| x.unloaded).sum::<u32>(),
            "stale_libs_after": g["stale_libs"], "idle_pauses": g["tidy_pauses"], "idle_pause_max_ms": g["tidy_max_ns"].as_f64().map(|n| n / 1e6),
            "drain_p50_ms": if drain.is_empty() { f64::NAN } else { pct(&mut drain, 0.5) },
            "link_p50_ms": if link.is_empty() { f64::NAN } else { pct(&mut link, 0.5) },
            "parts": parts, "client_during_swaps": rtt,
            "target": "p50 <= 0.3 ms, max <= 1 ms, no job waits > 1 ms (of the time no backend takes jobs)",
            // A job waits because of a swap when it is in flight during a pause; round
            // trips away from every pause count against the service, not the swap.
            "met": unserved_p50 <= 0.3 && unserved_max <= 1.0 && worst_in_pauses_us <= 1000.0 && rtt_ok,
            // Every swap's parts in ms, in order (where the max comes from).
            "per_swap_ms": t.iter().map(|x| json!({"pause": (x.drain_ns + x.relaunch_ns) as f64 / 1e6,
                "drain": x.drain_ns as f64 / 1e6, "unload": x.unload_ns as f64 / 1e6,
                "publish": x.publish_ns as f64 / 1e6, "getfunc": x.getfunc_ns as f64 / 1e6,
                "launch": x.launch_ns as f64 / 1e6, "unloaded": x.unloaded,
                "unserved": x.unserved_ns as f64 / 1e6, "handback": x.handback_ns as f64 / 1e6,
                "kernel_start": x.start_ns as f64 / 1e6})).collect::<Vec<_>>()}),
        );
        save(&res);
    }

    if want("g") {
        step("g: 1,000 replace calls under 4 client processes");
        let id = c
            .load_bytes("v1.bin", &constant(1), Some("versioned"))
            .unwrap()
            .id;
        let stop = format!("{out_dir}/stop-g");
        let _ = std::fs::remove_file(&stop);
        let stop2 = stop.clone();
        let name2 = name.clone();
        let replacer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let mut c = client(&name2);
            let t = Instant::now();
            let mut errs = 0;
            for v in 2..=1001u32 {
                if c.replace_bytes("versioned", "v.bin", &constant(v)).is_err() {
                    errs += 1;
                }
            }
            let el = t.elapsed().as_secs_f64();
            std::thread::sleep(Duration::from_millis(300));
            std::fs::write(&stop2, b"stop").unwrap();
            (el, errs)
        });
        let v = run_children(
            "load",
            &name,
            4,
            &[
                ("BPFTIME_GPU_PROG", id.to_string()),
                ("BPFTIME_GPU_STOP", stop.clone()),
            ],
        );
        let (el, errs) = replacer.join().unwrap();
        let sum = |k: &str| v.iter().map(|x| x[k].as_u64().unwrap_or(0)).sum::<u64>();
        let (sub, comp, dup, wrong) = (
            sum("submitted"),
            sum("completed"),
            sum("duplicates"),
            sum("wrong_version"),
        );
        let st = svc.status();
        res.insert("g_replace_under_load".into(), json!({"replaces": 1000, "replace_errors": errs, "replace_secs": el,
            "submitted": sub, "completed": comp, "lost": sub - comp.min(sub), "duplicates": dup, "wrong_version": wrong,
            "clients": v, "generation_after": st.gpu.as_ref().map(|g| g["generation"].clone()),
            "target": "0 lost, 0 duplicated", "met": sub == comp && dup == 0 && wrong == 0 && errs == 0}));
        save(&res);
    }

    if want("h") {
        step("h: host mailbox round trip (GPU writes a request, the host thread answers)");
        let inp = c.alloc(64).unwrap();
        c.write(&inp, 0, &41u64.to_le_bytes()).unwrap();
        let mut job = Job::new(tiny_id, 1).input(&inp, 8);
        job.desc_mut().flags |= shm_maps::job_flags::MAILBOX_PING;
        let mut rtt = Vec::new();
        let mut ok = true;
        for i in 0..2200 {
            let r = c.run(&job, T).unwrap();
            ok &= r.ok() && r.records_done == 1;
            if i >= 200 {
                rtt.push(r.r0 as f64 / 1e3);
            }
        }
        let p50 = pct(&mut rtt, 0.5);
        let tbuf = c.alloc(6400).unwrap();
        let traced_ok = c
            .run(&Job::new(trace_id, 100).input(&tbuf, 64), T)
            .is_ok_and(|r| r.ok());
        res.insert("h_host_mailbox".into(), json!({"pings": rtt.len(), "p50_us": p50, "p99_us": pct(&mut rtt, 0.99), "all_ok": ok,
            "trace_printk_job_ok": traced_ok,
            "what": "GPU writes a record into the host mailbox (trace ring) and spins until the host thread's answer; timed on the GPU (%globaltimer)",
            "target": "p50 <= 10 us", "met": p50 <= 10.0 && ok}));
        save(&res);
        c.free(inp).unwrap();
        c.free(tbuf).unwrap();
    }

    step("check: a GPU fault is survived");
    {
        let stop = format!("{out_dir}/stop-fault");
        let _ = std::fs::remove_file(&stop);
        let name2 = name.clone();
        let stop2 = stop.clone();
        let tiny2 = tiny_id;
        let bg = std::thread::spawn(move || {
            run_children(
                "load",
                &name2,
                2,
                &[
                    ("BPFTIME_GPU_PROG", tiny2.to_string()),
                    ("BPFTIME_GPU_STOP", stop2),
                ],
            )
        });
        std::thread::sleep(Duration::from_millis(300));
        let inp = c.alloc(64).unwrap();
        c.write(&inp, 0, &41u64.to_le_bytes()).unwrap();
        let mut job = Job::new(tiny_id, 1).input(&inp, 8);
        job.desc_mut().flags |= shm_maps::job_flags::INJECT_FAULT;
        let t = Instant::now();
        let r = c.run(&job, T).unwrap();
        let fault_status = r.status;
        // Wait for the new worker, then run ordinary jobs.
        let mut recovered_ms = f64::NAN;
        for _ in 0..3000 {
            let st = svc.status();
            if st
                .gpu
                .as_ref()
                .and_then(|g| g["recoveries"].as_u64())
                .unwrap_or(0)
                >= 1
                && st
                    .gpu
                    .as_ref()
                    .and_then(|g| g["generation"].as_u64())
                    .unwrap_or(0)
                    >= 1
            {
                recovered_ms = t.elapsed().as_secs_f64() * 1e3;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut after_ok = 0;
        let ok_job = Job::new(tiny_id, 1).input(&inp, 8);
        for _ in 0..if recovered_ms.is_nan() { 0 } else { 100 } {
            if c.run(&ok_job, Duration::from_secs(10))
                .map(|r| r.ok() && r.r0 == 42)
                .unwrap_or(false)
            {
                after_ok += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        std::fs::write(&stop, b"stop").unwrap();
        let v = bg.join().unwrap();
        let sum = |k: &str| v.iter().map(|x| x[k].as_u64().unwrap_or(0)).sum::<u64>();
        let st = svc.status();
        let pass = fault_status == shm_maps::layout::status::DEVICE_FAULT
            && after_ok == 100
            && v.iter().all(|x| x.get("submitted").is_some())
            && sum("submitted") == sum("completed")
            && sum("duplicates") == 0;
        res.insert(
            "check_fault_recovery".into(),
            json!({"fault_job_status": fault_status, "fault_job_error": r.error,
            "recovered_after_ms": recovered_ms, "jobs_ok_after": after_ok, "background_clients": v,
            "gpu": st.gpu, "pass": pass}),
        );
        save(&res);
    }

    if want("t") {
        step("t: a map in an emulated tier (cxl-sim) on the GPU: instant tier, then native");
        match tier_row(&svc, &mut c) {
            Ok(v) => {
                res.insert("t_tiered_map".into(), v);
            }
            Err(e) => {
                res.insert("t_tiered_map".into(), json!({"error": e}));
            }
        }
        save(&res);
    }

    if want("u") {
        step("u: job buffers in an emulated tier (cxl-sim) on the GPU: instant tier, then native");
        let v = buffer_tier_row(&svc, &mut c).unwrap_or_else(|e| json!({"error": e}));
        res.insert("u_tiered_buffers".into(), v);
        save(&res);
    }

    let st = svc.status();
    res.insert("service_status".into(), serde_json::to_value(&st).unwrap());
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    res.insert(
        "run".into(),
        json!({"date": date, "commit": std::env::var("BPFTIME_COMMIT").unwrap_or_else(|_| "unknown".into()),
               "device": st.gpu.as_ref().map(|g| g["device"].clone()),
               // The kernel module's version (580.x); the driver API gives only CUDA's (13.0).
               "driver": format!("{} (CUDA {})",
                   std::fs::read_to_string("/sys/module/nvidia/version").map(|v| v.trim().to_string()).unwrap_or_else(|_| "?".into()),
                   st.gpu.as_ref().and_then(|g| g["driver"].as_str().map(str::to_string)).unwrap_or_default()),
               "rows": rows.clone().unwrap_or_else(|| "all".into())}),
    );
    save(&res);
    svc.stop(false);
    let _ = Arc::strong_count(&svc);
    let failed = failed_checks(&res);
    let j = Value::Object(res);
    std::fs::write(
        format!("{out_dir}/gpu_service.json"),
        serde_json::to_string_pretty(&j).unwrap(),
    )
    .unwrap();
    let md = report(&j);
    std::fs::write(format!("{out_dir}/gpu_service.md"), &md).unwrap();
    println!("{md}");
    if !failed.is_empty() {
        eprintln!("FAILED correctness checks: {}", failed.join("; "));
        std::process::exit(1);
    }
}

/// Rows t and u's program: `$BPFTIME_TIER_PROG`, else `job_counter.bpf.o` next to this
/// binary.
fn tier_prog() -> std::path::PathBuf {
    std::env::var("BPFTIME_TIER_PROG")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::env::current_exe()
                .unwrap_or_default()
                .with_file_name("job_counter.bpf.o")
        })
}

/// Row t: `job_counter` (one lookup of `counts` a record) loaded three times, its `counts`
/// local (GPU memory), at `cxl:20000` and at `cxl:0:0.008` (GPU memory behind the tier). The latency shows in a one-record job's round
/// trip over the local map's, alternating, medians of 100 each; the cap (8 B at 0.008 GB/s:
/// 1 µs of link per access) as a 4,096-record job's time against 4.1 ms of link time. First
/// on the instant tier (the device interpreter), then after a swap on native code. The
/// object is `$BPFTIME_TIER_PROG`, else `job_counter.bpf.o` next to this binary.
fn tier_row(svc: &Service, c: &mut Client) -> Result<Value, String> {
    let obj = tier_prog();
    let load = |c: &mut Client, name: &str, place: &[String]| {
        c.load_file_placed(&obj, None, Some(name), place)
            .map_err(|e| format!("{}: {e}", obj.display()))
    };
    // The local map where the tiered ones live, in GPU memory (by default a plain array
    // stays in host shared memory, whose atomics cross PCIe).
    let plain = load(c, "tier_local", &["counts=device".into()])?;
    let slow = load(c, "tier_slow", &["counts=cxl:20000".into()])?;
    let capped = load(c, "tier_capped", &["counts=cxl:0:0.008".into()])?;
    let placement = |p: &host::protocol::ProgramInfo| {
        p.maps
            .iter()
            .find(|m| m.name == "counts")
            .map(|m| m.placement.clone())
            .unwrap_or_default()
    };
    let input = c.alloc(4096).map_err(|e| e.to_string())?;
    let tier_of = |c: &mut Client, id: u32| {
        c.list()
            .ok()
            .and_then(|l| l.into_iter().find(|x| x.id == id).and_then(|x| x.tier))
            .unwrap_or_default()
    };
    let measure = |c: &mut Client| -> Result<Value, String> {
        let tiers = [
            tier_of(c, plain.id),
            tier_of(c, slow.id),
            tier_of(c, capped.id),
        ];
        let ids = [plain.id, slow.id, capped.id];
        let mut v = tier_figures(&mut |k, n| job_us(c, &Job::new(ids[k], n).input(&input, 1)))?;
        v["tiers"] = json!({"local": tiers[0], "slow": tiers[1], "capped": tiers[2]});
        Ok(v)
    };
    let both = (|| -> Result<(Value, Value), String> {
        let instant = measure(c)?;
        svc.cuda_swap_now()
            .ok_or("no GPU")?
            .map_err(|e| format!("swap: {e}"))?;
        Ok((instant, measure(c)?))
    })();
    // The row leaves the service as it found it, whatever happened.
    let _ = c.free(input);
    for p in [&plain, &slow, &capped] {
        let _ = c.unload(&p.name);
    }
    let (instant, native) = both?;
    let met = instant["met"] == json!(true) && native["met"] == json!(true);
    Ok(json!({
        "placements": {"local": placement(&plain), "slow": placement(&slow), "capped": placement(&capped)},
        "first": instant, "after_swap": native,
        "target": "added latency = 20 µs ± 10%; the 4,096-record job at least the link time, at most 1.1× it plus the local job",
        "met": met,
    }))
}

/// A job's round trip in µs (an error unless every record ran).
fn job_us(c: &mut Client, job: &Job) -> Result<f64, String> {
    let t = Instant::now();
    let r = c.run(job, T).map_err(|e| e.to_string())?;
    if !r.ok() {
        return Err(format!("job failed: {r:?}"));
    }
    Ok(t.elapsed().as_secs_f64() * 1e6)
}

/// Rows t and u: `job_us(k, n)` runs an `n`-record job against the local (k = 0), the
/// `cxl:20000` (1) or the `cxl:0:0.008` (2) setup and gives its round trip in µs; an
/// access of 8 bytes takes 1 µs of the capped link. The latency is the one-record p50 over
/// the local one (100 each, alternating); the cap a 4,096-record job's p50 of 5 against
/// 4.096 ms of link time.
fn tier_figures(
    job_us: &mut dyn FnMut(usize, u64) -> Result<f64, String>,
) -> Result<Value, String> {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..100 {
        a.push(job_us(0, 1)?);
        b.push(job_us(1, 1)?);
    }
    let (local50, slow50) = (pct(&mut a, 0.5), pct(&mut b, 0.5));
    let added = slow50 - local50;
    let (mut lt, mut ct) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        lt.push(job_us(0, 4096)? / 1e3);
        ct.push(job_us(2, 4096)? / 1e3);
    }
    let (local_ms, capped_ms) = (pct(&mut lt, 0.5), pct(&mut ct, 0.5));
    let link_ms = 4096.0 * 1e-3;
    Ok(json!({
        "one_record_p50_us": {"local": local50, "slow": slow50, "added": added},
        "latency_configured_us": 20.0,
        "latency_error": added / 20.0 - 1.0,
        "job_4096_ms": {"local": local_ms, "capped": capped_ms},
        "link_time_ms": link_ms,
        "cap_ratio": capped_ms / link_ms,
        "met": (added / 20.0 - 1.0).abs() <= 0.1 && capped_ms >= link_ms && capped_ms <= 1.1 * link_ms + local_ms,
    }))
}

/// Row u: job buffers in an emulated tier. `job_counter` (its `counts` in GPU memory) runs
/// on 8-byte records from a local buffer, one at `cxl:20000` and one at `cxl:0:0.008`
/// (each record's 8 bytes: 1 µs of link), each record fetched through its buffer's tier on
/// the GPU before the program runs; first on the instant tier, then on native code. The
/// figures are row t's ([`tier_figures`]), and a 4,096-record job's 8-byte outputs
/// written into a `cxl:0:0.008` buffer (posted writes: the link's 4.096 ms, no latency).
fn buffer_tier_row(svc: &Service, c: &mut Client) -> Result<Value, String> {
    let obj = tier_prog();
    let prog = c
        .load_file_placed(&obj, None, Some("tier_buffers"), &["counts=device".into()])
        .map_err(|e| format!("{}: {e}", obj.display()))?;
    let mut bufs = Vec::new();
    let both = (|| -> Result<(Value, Value), String> {
        for place in [
            None,
            Some("cxl:20000"),
            Some("cxl:0:0.008"),
            None,
            Some("cxl:0:0.008"),
            Some("cxl:200000"),
        ] {
            bufs.push(c.alloc_placed(4096 * 8, place).map_err(|e| e.to_string())?);
        }
        let measure = |c: &mut Client| -> Result<Value, String> {
            let mut v = tier_figures(&mut |k, n| {
                job_us(c, &Job::new(prog.id, n).input(&bufs[k].slice(0, n * 8), 8))
            })?;
            // Output: 4,096 records from the local input, their 8-byte outputs into a
            // local buffer (3) or one behind the capped link (4): 4.096 ms of link.
            let (mut lt, mut ct) = (Vec::new(), Vec::new());
            for _ in 0..5 {
                for (k, times) in [(3, &mut lt), (4, &mut ct)] {
                    let job = Job::new(prog.id, 4096)
                        .input(&bufs[0], 8)
                        .output(&bufs[k], 8);
                    times.push(job_us(c, &job)? / 1e3);
                }
            }
            let (local_ms, capped_ms) = (pct(&mut lt, 0.5), pct(&mut ct, 0.5));
            let out_met = capped_ms >= 4.096 && capped_ms <= 1.1 * 4.096 + local_ms;
            v["output_4096_ms"] = json!({"local": local_ms, "capped": capped_ms, "met": out_met});
            // A latency over BPFT_SHORT_TIER_NS (50 µs): the one-record job waits in a
            // worker warp, not on the dispatcher. Medians of 20, alternating.
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for _ in 0..20 {
                for (k, times) in [(0, &mut a), (5, &mut b)] {
                    times.push(job_us(
                        c,
                        &Job::new(prog.id, 1).input(&bufs[k].slice(0, 8), 8),
                    )?);
                }
            }
            let long_added = pct(&mut b, 0.5) - pct(&mut a, 0.5);
            let long_met = (long_added / 200.0 - 1.0).abs() <= 0.1;
            v["long_one_record_added_us"] =
                json!({"configured": 200.0, "added": long_added, "met": long_met});
            v["met"] = json!(v["met"] == json!(true) && out_met && long_met);
            Ok(v)
        };
        let instant = measure(c)?;
        svc.cuda_swap_now()
            .ok_or("no GPU")?
            .map_err(|e| format!("swap: {e}"))?;
        Ok((instant, measure(c)?))
    })();
    let slots: Vec<u8> = bufs.iter().map(|b| b.tier_slot).collect();
    for b in bufs {
        let _ = c.free(b);
    }
    let _ = c.unload(&prog.name);
    let (instant, native) = both?;
    let met = instant["met"] == json!(true) && native["met"] == json!(true);
    Ok(json!({
        "placements": {"local": "shm", "slow": "cxl:20000", "capped": "cxl:0:0.008"},
        "tier_slots": slots,
        "first": instant, "after_swap": native,
        "target": "added latency = 20 µs ± 10%; the 4,096-record jobs (input, then output) at least the link time, at most 1.1× it plus the local job",
        "met": met,
    }))
}

/// The bare mailbox baseline: the kernel in this process, the client in a child process
/// that maps the same `/dev/shm` file (GPU-FACTS §1); `poll`: the probe's kernel or the
/// one-load one.
fn bare_mailbox(poll: MailboxPoll) -> Value {
    let path = format!("/dev/shm/bpftime-gpubench-mb-{}", std::process::id());
    let run = || -> Result<Value, String> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| format!("{path}: {e}"))?;
        f.set_len(4096).map_err(|e| e.to_string())?;
        // SAFETY: a fresh 4096-byte file of ours; shared with the child and the GPU through
        // atomics only, unmapped after the kernel stopped.
        let mut m = unsafe { memmap2::MmapMut::map_mut(&f) }.map_err(|e| e.to_string())?;
        let mb = device::cuda::baseline::BareMailbox::start(0, m.as_mut_ptr(), poll)
            .map_err(|e| e.to_string())?;
        let mut c = me("mailbox", "-");
        c.env("BPFTIME_GPU_MAILBOX", &path)
            .env("BPFTIME_GPU_MAILBOX_POLL", poll.name());
        let out = c
            .spawn()
            .and_then(|k| k.wait_with_output())
            .map_err(|e| e.to_string());
        mb.stop().map_err(|e| e.to_string())?;
        let out = out?;
        serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
    };
    let v = run().unwrap_or_else(|e| json!({"error": e}));
    let _ = std::fs::remove_file(&path);
    v
}

/// One-record jobs (the short paths, and the lone fast path for inline inputs) against
/// the CPU interpreter: `sum64` over 64- and 67-byte inputs (inline, so aligned in the
/// slot) and 131-byte ones (read from the arena at misaligned offsets), and `ctx_mix`,
/// which reads every ctx word, with output records and args. r0 and the output records
/// must be the interpreter's.
fn check_one_record(c: &mut Client, sum_id: u32, mix_id: u32) -> Value {
    let len = 64 * 1024u64;
    let buf = c.alloc(len).unwrap();
    let data: Vec<u8> = (0..len)
        .map(|i| (i.wrapping_mul(2654435761) >> 9) as u8)
        .collect();
    c.write(&buf, 0, &data).unwrap();
    let outb = c.alloc(4096).unwrap();
    let mut env = ebpf::interp::Env::new(0);
    let mut jobs = Vec::new();
    let mut pass = true;
    let sum = ebpf::elf::load(&sum64(), "sum64.bin", None).unwrap();
    let sum_vm = ebpf::interp::Vm::new(&sum, vec![]).unwrap();
    for size in [64u64, 67, 131] {
        let (mut mismatch, mut failed) = (0, 0);
        for k in 0..200u64 {
            let off = (k * 997) % (len - size);
            let r = c
                .run(
                    &Job::new(sum_id, 1).input(&buf.slice(off, size), size as u32),
                    T,
                )
                .unwrap();
            let rec = &data[off as usize..(off + size) as usize];
            let want = sum_vm
                .run_job(rec, &mut [], 0, 1, [0; 4], &mut env)
                .unwrap();
            failed += u64::from(!r.ok());
            mismatch += u64::from(r.r0 != want);
        }
        let ok = mismatch == 0 && failed == 0;
        pass &= ok;
        jobs.push(json!({"program": "sum64", "record_bytes": size, "jobs": 200, "mismatches": mismatch, "failed": failed, "pass": ok}));
    }
    let mix = ebpf::elf::load(&ctx_mix(), "ctx_mix.bin", None).unwrap();
    let mix_vm = ebpf::interp::Vm::new(&mix, vec![]).unwrap();
    for (size, with_out) in [(8u64, true), (8, false), (136, true)] {
        let (mut mismatch, mut failed) = (0, 0);
        for k in 0..200u64 {
            let off = (k * 1009) % (len - size);
            let args = [k.wrapping_mul(0x9e37_79b9), k << 17 | 5, k * 3, 1 << 40 | k];
            let mut job = Job::new(mix_id, 1)
                .input(&buf.slice(off, size), size as u32)
                .args(args);
            let out_off = (k % 256) * 16;
            if with_out {
                job = job.output(&outb.slice(out_off, 16), 16);
            }
            let r = c.run(&job, T).unwrap();
            let rec = &data[off as usize..(off + size) as usize];
            let mut out = [0u8; 16];
            let outs: &mut [u8] = if with_out { &mut out } else { &mut [] };
            let want = mix_vm.run_job(rec, outs, 0, 1, args, &mut env).unwrap();
            failed += u64::from(!r.ok());
            let got_out = if with_out {
                c.read(&outb, out_off, 8).unwrap() == out[..8]
            } else {
                true
            };
            mismatch += u64::from(r.r0 != want || !got_out);
        }
        let ok = mismatch == 0 && failed == 0;
        pass &= ok;
        jobs.push(json!({"program": "ctx_mix", "record_bytes": size, "output": with_out, "jobs": 200, "mismatches": mismatch, "failed": failed, "pass": ok}));
    }
    c.free(buf).unwrap();
    c.free(outb).unwrap();
    json!({"jobs": jobs, "pass": pass})
}

/// The correctness checks that failed in `res` (empty: all passed).
fn failed_checks(res: &serde_json::Map<String, Value>) -> Vec<String> {
    let mut bad = Vec::new();
    let mut check = |ok: bool, what: &str| {
        if !ok {
            bad.push(what.to_string());
        }
    };
    let get = |k: &str| res.get(k).cloned().unwrap_or(Value::Null);
    check(
        get("check_cpu_equal")["pass"] == json!(true),
        "100,000-record job differs from the CPU interpreter",
    );
    check(
        get("check_fault_recovery")["pass"] == json!(true),
        "GPU fault recovery",
    );
    check(
        get("check_one_record_equal")["pass"] == json!(true),
        "a one-record job differs from the CPU interpreter",
    );
    if let Some(a) = res.get("a_round_trip") {
        check(a["persistent"]["bad"] == json!(0), "a: wrong job results");
    }
    if let Some(b) = res.get("b_throughput").and_then(|b| b.as_object()) {
        for (k, v) in b.iter().filter(|(k, _)| k.starts_with("clients_")) {
            let bad = v["per_client"]
                .as_array()
                .is_none_or(|a| a.iter().any(|c| c["bad"] != json!(0)));
            check(!bad, &format!("b: wrong job results ({k})"));
        }
    }
    for k in ["c_device_buffer", "d_shared_buffer"] {
        if let Some(v) = res.get(k) {
            check(v["r0_correct"] == json!(true), &format!("{k}: wrong sum"));
        }
    }
    if let Some(e) = res.get("e_load_to_first_job") {
        check(e["all_correct"] == json!(true), "e: wrong result");
    }
    if let Some(g) = res.get("g_replace_under_load") {
        check(
            g["lost"] == json!(0) && g["duplicates"] == json!(0) && g["wrong_version"] == json!(0),
            "g: lost, duplicated or wrong-version jobs",
        );
    }
    if let Some(h) = res.get("h_host_mailbox") {
        check(h["all_ok"] == json!(true), "h: mailbox pings");
    }
    bad
}

/// The markdown table of one run: every row next to its baseline.
fn report(j: &Value) -> String {
    let f = |v: &Value, d: usize| v.as_f64().map_or("—".to_string(), |x| format!("{x:.d$}"));
    let met = |v: &Value| match v["met"].as_bool() {
        Some(true) => "✔ met",
        Some(false) => "✘ missed",
        None => "—",
    };
    let run = &j["run"];
    let base = &j["baseline"];
    let mut s = format!(
        "# The CUDA backend (persistent kernel): rows a–h\n\n| | |\n|---|---|\n| device | {} |\n| driver | {} |\n| date | {} |\n| commit | `{}` |\n| rows | {} |\n\n",
        run["device"].as_str().unwrap_or("?"),
        run["driver"].as_str().unwrap_or("?"),
        run["date"].as_str().unwrap_or("?"),
        run["commit"].as_str().unwrap_or("?"),
        run["rows"].as_str().unwrap_or("all"),
    );
    s.push_str(
        "| # | what | measured | baseline (same run) | target | |\n|---|---|---|---|---|---|\n",
    );
    if let Some(a) = j.get("a_round_trip") {
        let p = &a["persistent"];
        let h = &p["hops_p50_us"];
        let hops = format!(
            "hops p50: submit call {} µs, GPU poll round trip {} µs, slot check and fence if needed {} µs, GPU run {} µs, GPU finish → client sees DONE {} µs",
            f(&h["submit_call"], 2),
            f(&h["gpu_poll_round_trip"], 2),
            f(&h["gpu_acquire_fence"], 2),
            f(&p["gpu_run_p50_us"], 2),
            f(&h["gpu_finish_to_client_seen"], 2)
        );
        s.push_str(&format!(
            "| a | one-record job round trip from another process | p50 **{} µs**, p99 {} µs ({hops}) | bare mailbox p50 {} µs ({}×); one-load mailbox {} µs ({}×); launch + sync {} µs; graph + sync {} µs ({}× faster) | {} | {} |\n",
            f(&p["p50_us"], 2), f(&p["p99_us"], 2),
            f(&a["bare_mailbox_p50_us"], 2), f(&a["vs_mailbox"], 2),
            f(&a["one_load_mailbox_p50_us"], 2), f(&a["vs_one_load_mailbox"], 2), f(&a["launch_sync_p50_us"], 2),
            f(&a["graph_sync_p50_us"], 2), f(&a["speedup_vs_graph"], 2), a["target"].as_str().unwrap_or(""), met(a)
        ));
    }
    if let Some(b) = j.get("b_throughput") {
        let mut parts = Vec::new();
        for k in [1, 2, 4, 8] {
            let v = &b[format!("clients_{k}")]["jobs_per_s"];
            if let Some(x) = v.as_f64() {
                parts.push(format!("{k}: {:.2} M/s", x / 1e6));
            }
        }
        s.push_str(&format!(
            "| b | one-record jobs/s by client processes (batches of 64) | {} (the dispatcher took {} jobs per poll on average) | — | {} | {} |\n",
            parts.join(", "),
            f(&b["dispatcher"]["mean_batch"], 1),
            b["target"].as_str().unwrap_or(""),
            met(b)
        ));
    }
    if let Some(c) = j.get("c_device_buffer") {
        s.push_str(&format!(
            "| c | sum of 8 words per 64-byte record over 1 GiB in device memory | **{} GB/s** ({}%) | device copy {} GB/s | {} | {} |\n",
            f(&c["gbps"], 0), f(&(c["ratio"].as_f64().map(|x| x * 100.0).into()), 1), f(&c["d2d_gbps"], 0),
            c["target"].as_str().unwrap_or(""), met(c)
        ));
    }
    if let Some(d) = j.get("d_shared_buffer") {
        s.push_str(&format!(
            "| d | the same over 1 GiB of the shared arena (pinned host memory) | **{} GB/s** ({}%) | host-to-device copy {} GB/s | {} | {} |\n",
            f(&d["gbps"], 1), f(&(d["ratio"].as_f64().map(|x| x * 100.0).into()), 1), f(&d["h2d_gbps"], 1),
            d["target"].as_str().unwrap_or(""), met(d)
        ));
    }
    if let Some(e) = j.get("e_load_to_first_job") {
        s.push_str(&format!(
            "| e | `load` returned → first job done (instant tier) | p50 **{} ms**, max {} ms | — | {} | {} |\n",
            f(&e["p50_ms"], 3), f(&e["max_ms"], 3), e["target"].as_str().unwrap_or(""), met(e)
        ));
    }
    if let Some(x) = j.get("f_swap_pause") {
        s.push_str(&format!(
            "| f | native generation swap ({} swaps, host gaps {}): time no backend took jobs | p50 **{} ms**, max {} ms; the GPU's pause p50 {} ms, max {} ms (code upload p50 {} ms); {} jobs run by the host in the gaps | client's round trips meanwhile ({} jobs): worst in flight during a pause **{} µs** ({} over 100 µs); worst overall {} µs, {} over 100 µs | {} | {} |\n",
            x["swaps"], if x["host_gaps"].as_bool() == Some(true) { "on" } else { "off" },
            f(&x["unserved_p50_ms"], 3), f(&x["unserved_max_ms"], 3),
            f(&x["pause_p50_ms"], 3), f(&x["pause_max_ms"], 3), f(&x["parts"]["getfunc_p50_ms"], 3),
            x["jobs_run_by_the_host_in_gaps"],
            x["client_during_swaps"]["n"], f(&x["worst_round_trip_in_pauses_us"], 0), x["slow_round_trips_in_pauses"],
            f(&x["client_during_swaps"]["max_us"], 0), x["client_during_swaps"]["over_100us"],
            x["target"].as_str().unwrap_or(""), met(x)
        ));
    }
    if let Some(g) = j.get("g_replace_under_load") {
        s.push_str(&format!(
            "| g | 1,000 `replace` calls under 4 client processes | {} lost, {} duplicated, {} wrong version of {} jobs | — | {} | {} |\n",
            g["lost"], g["duplicates"], g["wrong_version"], g["submitted"], g["target"].as_str().unwrap_or(""), met(g)
        ));
    }
    if let Some(h) = j.get("h_host_mailbox") {
        s.push_str(&format!(
            "| h | GPU → host mailbox round trip (timed on the GPU) | p50 **{} µs**, p99 {} µs | — | {} | {} |\n",
            f(&h["p50_us"], 2), f(&h["p99_us"], 2), h["target"].as_str().unwrap_or(""), met(h)
        ));
    }
    for (key, row, what) in [
        ("t_tiered_map", "t", "a map in an emulated tier"),
        (
            "u_tiered_buffers",
            "u",
            "job input and output buffers in an emulated tier",
        ),
    ] {
        let Some(t) = j.get(key) else { continue };
        let part = |k: &str| {
            let x = &t[k];
            format!(
                "{} tier: +{} µs a one-record job ({} against {}); 4,096 records {} ms (local {} ms)",
                x["tiers"]["slow"].as_str().unwrap_or(if k == "first" {
                    "instant"
                } else {
                    "native"
                }),
                f(&x["one_record_p50_us"]["added"], 2),
                f(&x["one_record_p50_us"]["slow"], 2),
                f(&x["one_record_p50_us"]["local"], 2),
                f(&x["job_4096_ms"]["capped"], 3),
                f(&x["job_4096_ms"]["local"], 3)
            ) + &x["output_4096_ms"]["capped"]
                .as_f64()
                .map(|o| {
                    format!(
                        "; their outputs into the capped buffer {o:.3} ms (local {} ms)",
                        f(&x["output_4096_ms"]["local"], 3)
                    )
                })
                .unwrap_or_default()
                + &x["long_one_record_added_us"]["added"]
                    .as_f64()
                    .map(|l| format!("; `cxl:200000` +{l:.1} µs (in a worker warp)"))
                    .unwrap_or_default()
        };
        s.push_str(&format!(
            "| {row} | {what} (`cxl:20000`; `cxl:0:0.008`, 1 µs of link an access) | {}; {} {} | the local one, same program | {} | {} |\n",
            part("first"),
            part("after_swap"),
            t["error"].as_str().map(|e| format!("error: {e}")).unwrap_or_default(),
            t["target"].as_str().unwrap_or(""),
            met(t)
        ));
    }
    s.push_str(&format!(
        "\nBaselines: bare mailbox {}; one-load mailbox {}; launch + sync p50 {} µs; graph + sync p50 {} µs; device copy {} GB/s; host-to-device {} GB/s.\n\n",
        base["bare_mailbox"]["p50_us"].as_f64().map_or_else(|| format!("failed: {}", base["bare_mailbox"]["error"]), |x| format!("p50 {x:.2} µs")),
        base["bare_mailbox_one_load"]["p50_us"].as_f64().map_or_else(|| format!("failed: {}", base["bare_mailbox_one_load"]["error"]), |x| format!("p50 {x:.2} µs")),
        f(&base["launch_sync_p50_us"], 2), f(&base["graph_sync_p50_us"], 2), f(&base["d2d_gbps"], 0), f(&base["h2d_gbps"], 1)
    ));
    s.push_str("| check | result |\n|---|---|\n");
    for k in [
        "check_cpu_equal",
        "check_one_record_equal",
        "check_fault_recovery",
    ] {
        s.push_str(&format!(
            "| {k} | {} |\n",
            if j[k]["pass"] == json!(true) {
                "pass"
            } else {
                "**FAIL**"
            }
        ));
    }
    s.push_str(&format!(
        "\nTorn queue-slot reads (read again in order): {}.\n",
        j["service_status"]["gpu"]["torn_reads"]
    ));
    s
}

fn tracing_subscriber_init() {
    // The service's log goes to stderr (RUST_LOG, default warn); stdout carries the JSON.
    let filter = tracing_subscriber::EnvFilter::try_from_env("BPFTIME_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
